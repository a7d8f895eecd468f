"""Tasks: the named splits of typed records an env publishes, and how a reset picks one.

An env publishes tasks with a class attribute `tasks`: a `TaskSet` (or a zero-argument
function returning one, called once when the env is registered). A TaskSet holds named splits
(`train`, `test`, ...), each a list of records of one type (a msgspec Struct, a dataclass, or
plain dicts), and names each record by an id field. Clients list splits and pages of tasks,
fetch one task by split and index or by id, and start an episode on one:

    reset(task="fizzbuzz")             # by id
    reset(split="test", index=12)      # by position
    reset(split="test", seed=3)        # drawn from the split with the seed, reproducibly
    reset(seed=3)                      # drawn from the first split with the seed
    reset(task={...})                  # a record given inline (checked against the type)
    reset(task="crane")                # text that is no id, read by the set's `from_text`

The kernel resolves the choice and calls the env's `reset(..., task=<record>)`; the answer
names the chosen task (`split`, `index`, `id`; an inline record equal to a listed task is
named as that task). A reset without a seed and without a choice draws at random. A server
may replace an env's tasks with a file the user names (`TaskSet.from_file`: JSON Lines, a
JSON list, or Parquet through the optional `datasets` package), checked against the env's
task type.

Hidden fields (`hidden=`) stay on the server: the env gets them, and nothing clients are
shown carries them (`list_tasks` and `get_task` give `public(record)`, the task schema marks
them `writeOnly`). An id is shown to everyone, in every reset's answer: when a task's record
is its answer (a secret word), the id must not be made of it (`id=` a function giving an
opaque one); the conformance suite's `hidden_task_fields` check fails an env whose ids or
answers carry a hidden field's value.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from ecotone.specs import TaskRef

T = TypeVar("T")

MAX_PAGE = 1000
"""The most tasks one `list_tasks` answer carries."""

TASK_OPTIONS = frozenset({"task", "split", "index"})
"""The reset options the kernel reads for an env that publishes tasks."""


class TaskError(ValueError):
    """A task choice that cannot be met, or tasks that cannot be read.

    An unknown split or id, an index out of range, an inline record of the wrong shape; a
    task file that cannot be read; records of a `TaskSet` that do not fit. A reset's is
    answered `invalid_argument`, its `details` with it.

    Args:
        message: What is wrong.
        **details: Structured details for the client (the splits and their sizes, say).
    """

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


def _read_records(path: Path) -> list[tuple[str, Any]]:
    """Read a task file's records.

    Returns:
        Each record with where it is (`FILE:LINE`, `FILE[INDEX]`).

    Raises:
        TaskError: The file cannot be read, is not what its suffix says, or its type is
            unknown.
    """
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            records = []
            with path.open(encoding="utf-8-sig") as lines:
                for number, line in enumerate(lines, 1):
                    if not line.strip():
                        continue
                    try:
                        records.append((f"{path}:{number}", json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise TaskError(f"{path}:{number}: not JSON: {exc.msg}") from None
            return records
        if suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8-sig"))
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}: not JSON: {exc}") from None
            if not isinstance(data, list):
                raise TaskError(f"{path}: a JSON task file holds a list of records")
            return [(f"{path}[{i}]", record) for i, record in enumerate(data)]
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read it: {exc}") from None
    if suffix == ".parquet":
        try:
            import datasets  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise TaskError(
                f"{path}: reading Parquet needs the `datasets` package (pip install datasets)"
            ) from None
        table = datasets.Dataset.from_parquet(str(path))
        return [(f"{path}[row {i}]", dict(row)) for i, row in enumerate(table)]
    raise TaskError(f"{path}: unknown task file type (use .jsonl, .json or .parquet)")


class TaskSet(Generic[T]):
    """Named splits of task records, each named by an id.

    An env publishes one as its class attribute `tasks`; the kernel then picks each episode's
    task from the reset's options (see the module docstring) and passes the record to the
    env's `reset(..., task=record)`. Ids are unique across splits.

    Args:
        splits: Split names mapped to records; a plain sequence is one split, `train`.
        id: The name of the records' id field, or a function of a record giving its id.
        type: The records' type (a Struct, a dataclass...): records given as dicts are
            converted to it, and its JSON Schema is what clients see. None keeps records as
            they are (the schema is any object).
        hidden: Fields that stay on the server: the env gets them, `list_tasks` and
            `get_task` leave them out, and the task schema marks them `writeOnly` (a task's
            hidden tests, its reference solution, a game's secret word). Keep them out of the
            id too.
        from_text: Reads a `reset(task=TEXT)` whose text is no task's id as an inline record
            (wordle: a word to play); it raises ValueError for text it cannot read. None: such
            text is an unknown id.

    Raises:
        TaskError: No split, a split name that is not a non-empty str, a record that does not
            fit `type` or has no id, or an id that appears twice.

    Example:
        >>> tasks = ecotone.TaskSet(
        ...     {"train": [{"id": "a", "n": 1}, {"id": "b", "n": 2}], "test": [{"id": "c", "n": 3}]}
        ... )
        >>> tasks
        TaskSet(train=2, test=1)
        >>> tasks.find("c")
        (TaskRef(id='c', split='test', index=0), {'id': 'c', 'n': 3})
    """

    def __init__(
        self,
        splits: Mapping[str, Sequence[Any]] | Sequence[Any],
        *,
        id: str | Callable[[Any], str] = "id",
        type: Any = None,
        hidden: Iterable[str] = (),
        from_text: Callable[[str], Any] | None = None,
    ) -> None:
        self.hidden = frozenset(hidden)
        self.from_text = from_text
        named: Mapping[str, Sequence[Any]] = (
            splits if isinstance(splits, Mapping) else {"train": splits}
        )
        if not named:
            raise TaskError("a TaskSet needs at least one split")
        self.type = type
        self._id = id
        self.splits: dict[str, list[T]] = {}
        for split, records in named.items():
            if not isinstance(split, str) or not split:
                raise TaskError(f"split names are non-empty strings, not {split!r}")
            self.splits[split] = [
                self.record(r, f"split {split!r}, index {i}") for i, r in enumerate(records)
            ]
        self._where: dict[str, tuple[str, int]] = {}
        for split, records in self.splits.items():
            for index, record in enumerate(records):
                key = self.id_of(record)
                if key in self._where:
                    first = self._where[key]
                    raise TaskError(
                        f"task id {key!r} appears twice: {first[0]}[{first[1]}] and "
                        f"{split}[{index}]"
                    )
                self._where[key] = (split, index)

    @classmethod
    def from_file(
        cls,
        sources: str | Path | Mapping[str, str | Path],
        *,
        id: str | Callable[[Any], str] = "id",
        type: Any = None,
        hidden: Iterable[str] = (),
        from_text: Callable[[str], Any] | None = None,
    ) -> TaskSet[Any]:
        """Read tasks from files: JSON Lines, a JSON list, or Parquet (`datasets` needed).

        Args:
            sources: One path, or split names mapped to paths. A file named under the empty
                split name (or given alone) makes the splits its records name in a `split`
                field, or else one split named by the file's stem; under a split's name, all
                its records are that split's (a `split` field they carry is dropped).
            id: As for the constructor.
            type: As for the constructor: every record is checked against it.
            hidden: As for the constructor.
            from_text: As for the constructor.

        Returns:
            The tasks, as a new TaskSet.

        Raises:
            TaskError: A file that cannot be read or parsed, of an unknown type, or whose
                records do not fit `type`, have no id or repeat one.
        """
        named = sources if isinstance(sources, Mapping) else {"": sources}
        checker: TaskSet[Any] = cls([], type=type)  # converts records, saying where they are
        splits: dict[str, list[Any]] = {}
        for split, source in named.items():
            path = Path(source)
            records = _read_records(path)
            by_field = (
                not split
                and records
                and all(isinstance(r, dict) and "split" in r for _, r in records)
            )
            for where, record in records:
                name = split or path.stem
                if isinstance(record, dict) and "split" in record:
                    # The split a record names is where it goes, unless the source was named
                    # a split explicitly (`--tasks test=FILE`): that name wins. Either way the
                    # field is the file's, not the task type's.
                    if by_field:
                        name = str(record["split"])
                    record = {k: v for k, v in record.items() if k != "split"}
                splits.setdefault(name, []).append(checker.record(record, where))
        return cls(splits, id=id, type=type, hidden=hidden, from_text=from_text)

    def reading(self, sources: str | Path | Mapping[str, str | Path]) -> TaskSet[Any]:
        """Read tasks of this set's type, id, hidden fields and text from files (`from_file`).

        A server's `--tasks` in place of the env's own.

        Args:
            sources: As for `from_file`.

        Returns:
            The tasks, as a new TaskSet.

        Raises:
            TaskError: As for `from_file`.
        """
        return TaskSet.from_file(
            sources, id=self._id, type=self.type, hidden=self.hidden, from_text=self.from_text
        )

    def public(self, record: Any) -> Any:
        """Show a record as clients may see it.

        Args:
            record: One of this set's records.

        Returns:
            `record` without the hidden fields (as plain data when there are any).
        """
        if not self.hidden:
            return record
        data = msgspec.to_builtins(record)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in self.hidden}
        return data

    def withheld(self, record: Any) -> dict[str, Any]:
        """Show what `public` leaves out of a record: its hidden fields.

        Args:
            record: One of this set's records.

        Returns:
            Each hidden field the record has, mapped to its value as plain data (empty when
            the set hides nothing, or the record is not an object).
        """
        if not self.hidden:
            return {}
        data = msgspec.to_builtins(record)
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if k in self.hidden}

    def record(self, data: Any, where: str = "task") -> T:
        """Convert data to a record of the set's type.

        Args:
            data: A record, or plain data for one.
            where: Where it comes from, for the error message.

        Returns:
            `data` as the set's type (as it is when the set has no type or it is one).

        Raises:
            TaskError: `data` does not fit the type.
        """
        if self.type is None or isinstance(data, self.type):
            return data  # type: ignore[no-any-return,unused-ignore]
        try:
            converted: T = msgspec.convert(data, self.type)
            return converted
        except msgspec.ValidationError as exc:
            name = getattr(self.type, "__name__", str(self.type))
            raise TaskError(f"{where}: not a {name}: {exc}") from None

    def id_of(self, record: Any) -> str:
        """Name a record by its id.

        Args:
            record: A record (a dict, or an object with the id field).

        Returns:
            The record's id, as a str.

        Raises:
            TaskError: The record has no id field.
        """
        if callable(self._id):
            return str(self._id(record))
        value = (
            record.get(self._id) if isinstance(record, dict) else getattr(record, self._id, None)
        )
        if value is None:
            raise TaskError(f"task {record!r} has no id field {self._id!r}")
        return str(value)

    @property
    def default_split(self) -> str:
        """The first split: the one a choice without a split draws from."""
        return next(iter(self.splits))

    def counts(self) -> dict[str, int]:
        """Count each split's tasks.

        Returns:
            Every split's name mapped to its number of tasks, in the splits' order.
        """
        return {split: len(records) for split, records in self.splits.items()}

    def schema(self) -> dict[str, Any]:
        """Describe the records' type, for clients.

        Hidden fields are in it (a record given inline brings them), marked `writeOnly` (JSON
        Schema's "sent, never returned") and not `required` (a listed record comes without
        them).

        Returns:
            The type's JSON Schema (its other types under `$defs`), or any object's when the
            set has no type.
        """
        if self.type is None:
            return {"type": "object"}
        _, components = msgspec.json.schema_components([self.type], ref_template="#/$defs/{name}")
        name = getattr(self.type, "__name__", "")
        schema = dict(components.get(name, {}))
        others = {k: v for k, v in components.items() if k != name}
        if others:
            schema["$defs"] = others
        return self._mark_hidden(schema)

    def _mark_hidden(self, schema: dict[str, Any]) -> dict[str, Any]:
        properties = schema.get("properties")
        if not self.hidden or not isinstance(properties, dict):
            return schema
        schema["properties"] = {
            name: {**prop, "writeOnly": True} if name in self.hidden else prop
            for name, prop in properties.items()
        }
        if "required" in schema:
            required = [name for name in schema["required"] if name not in self.hidden]
            if required:
                schema["required"] = required
            else:
                del schema["required"]
        return schema

    def _split(self, split: str | None) -> tuple[str, list[T]]:
        name = self.default_split if split is None else split
        records = self.splits.get(name)
        if records is None:
            raise TaskError(
                f"no task split {name!r}; splits: {', '.join(self.splits)}",
                splits=self.counts(),
            )
        return name, records

    def get(self, split: str | None, index: int) -> tuple[TaskRef, T]:
        """Take a task by split and position.

        Args:
            split: The split's name; None: the first split.
            index: The task's position in the split, from 0.

        Returns:
            Where the task is (its id, split and index) and its record.

        Raises:
            TaskError: An unknown split, or an index that is not an int or is out of range.
        """
        name, records = self._split(split)
        if isinstance(index, bool) or not isinstance(index, int):
            raise TaskError(f"a task index is an integer, not {index!r}")
        if not 0 <= index < len(records):
            raise TaskError(
                f"task index {index} is out of range: split {name!r} has {len(records)} tasks",
                split=name,
                count=len(records),
            )
        record = records[index]
        return TaskRef(id=self.id_of(record), split=name, index=index), record

    def find(self, task_id: str) -> tuple[TaskRef, T]:
        """Take a task by id.

        Args:
            task_id: The task's id.

        Returns:
            Where the task is (its id, split and index) and its record.

        Raises:
            TaskError: No task has this id.
        """
        where = self._where.get(task_id)
        if where is None:
            known = list(self._where)
            shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
            raise TaskError(f"no task {task_id!r}; tasks: {shown}", count=len(known))
        return self.get(*where)

    def page(self, split: str | None, offset: int = 0, limit: int = 100) -> tuple[str, list[T]]:
        """Take a page of one split's tasks.

        Args:
            split: The split's name; None: the first split.
            offset: The first task's position (a negative one counts as 0).
            limit: How many tasks at most, up to `MAX_PAGE`.

        Returns:
            The split's name and the page's records.

        Raises:
            TaskError: An unknown split.
        """
        name, records = self._split(split)
        offset = max(0, int(offset))
        limit = max(0, min(int(limit), MAX_PAGE))
        return name, records[offset : offset + limit]

    def choose(self, options: Mapping[str, Any], seed: int | None) -> tuple[TaskRef, T]:
        """Choose the task a reset with these options and this seed starts (see the module).

        Args:
            options: The reset's options: `task` (an id, an inline record, or text the set's
                `from_text` reads as one), or `split` and `index`; neither, or only `split`,
                draws a task.
            seed: The reset's seed: a draw with a seed is reproducible; without one it is
                random.

        Returns:
            Where the task is (an inline record's ref has only its id, unless the record is
            a listed task's) and its record.

        Raises:
            TaskError: `task` given with `split` or `index`, a `split` that is not a str or
                not a split, an unknown id or index (or text `from_text` cannot read), an
                inline record that does not fit, or an empty split to draw from.
        """
        task, split, index = options.get("task"), options.get("split"), options.get("index")
        if split is not None and not isinstance(split, str):
            raise TaskError(f"`split` is a split name, not {split!r}")
        if task is not None:
            if split is not None or index is not None:
                raise TaskError("give `task` or `split`/`index`, not both")
            if isinstance(task, str):
                if task in self._where or self.from_text is None:
                    return self.find(task)
                return self._inline(self._read_text(task))
            return self._inline(task)
        if index is not None:
            return self.get(split, index)
        name, records = self._split(split)
        if not records:
            raise TaskError(f"task split {name!r} is empty", split=name)
        rng = random.Random(seed) if seed is not None else random.SystemRandom()
        return self.get(name, rng.randrange(len(records)))

    def _read_text(self, text: str) -> Any:
        """Read text that is no task's id with `from_text`.

        Returns:
            The record data `from_text` made of the text.

        Raises:
            TaskError: `from_text` raised: a ValueError (or TypeError) says why the text is
                no task; anything else (a bug of the env's) is named, rather than escaping
                into the server.
        """
        assert self.from_text is not None
        try:
            return self.from_text(text)
        except TaskError:
            raise
        except (ValueError, TypeError) as exc:
            raise TaskError(f"no task {text!r}: {exc}") from None
        except Exception as exc:
            raise TaskError(
                f"no task {text!r}: from_text raised {type(exc).__name__}: {exc}"
            ) from None

    def _inline(self, data: Any) -> tuple[TaskRef, T]:
        """Take a record given inline.

        Returns:
            Its ref (a listed task's own when the record is that task's) and the record.

        Raises:
            TaskError: The data does not fit the set's type, or has no id.
        """
        record = self.record(data, "the inline task")
        key = self.id_of(record)
        where = self._where.get(key)
        if where is not None and self.splits[where[0]][where[1]] == record:
            return self.get(*where)
        return TaskRef(id=key), record

    def __len__(self) -> int:
        return sum(len(r) for r in self.splits.values())

    def __iter__(self) -> Iterator[T]:
        for records in self.splits.values():
            yield from records

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={n}" for s, n in self.counts().items())
        return f"TaskSet({counts})"


def task_set_of(env_cls: type) -> TaskSet[Any] | None:
    """Find the tasks an env class publishes.

    Args:
        env_cls: The env class.

    Returns:
        Its `tasks` attribute (called first if it is a function), or None when it has none.

    Raises:
        TypeError: `tasks` is not a TaskSet, nor a function returning one.
    """
    value = getattr(env_cls, "tasks", None)
    if value is None:
        return None
    if callable(value) and not isinstance(value, TaskSet):
        value = value()
    if not isinstance(value, TaskSet):
        raise TypeError(
            f"`tasks` must be an ecotone.TaskSet (or a function returning one), not {value!r}"
        )
    return value


__all__ = ["MAX_PAGE", "TASK_OPTIONS", "TaskError", "TaskRef", "TaskSet", "task_set_of"]
