"""Hidden task fields: what a task hides is shown to no client.

A task's hidden fields (`TaskSet(hidden=...)`: a game's secret word, a task's tests) reach the
env and nobody else. The check reads their values from the env's own `TaskSet`, in process (a
server's hidden values are its own), for a sample of tasks: a few of each split, spread over
it, and those the settings' seeds draw. It looks for them in all that a client, a player in
the web UI or an agent is shown: each task's id, its `list_tasks` entry, `get_task`'s answer,
the answers of resets that start it (by position, drawn with a seed, and given inline with
its whole record), the state and the env's view after each of those resets, and `describe()`.

What counts as shown: a hidden value of `MIN_CHARS` characters or more that appears as a whole
token (not inside a longer word or number; case does not matter) in a string, a number or a
key of what is shown. A structured hidden value (a list, an object) is looked for leaf by
leaf; booleans and nulls are not looked for. A word the env shows whatever the task (a rule
in every observation's text) is not a leak of the task that hides the same word: a value is
excused where another sampled task, one that does not hide it, shows it in the same place.
Nothing excuses `describe()`, which is the same for every task.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
import msgspec

from ecotone.client.sync import EnvClient
from ecotone.conformance.expect import expect, fail, show
from ecotone.conformance.registry import check
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import Runner
from ecotone.kernel.tasks import TaskSet
from ecotone.specs import EnvInfo, Render, Rendered, TaskRef

MIN_CHARS: Final = 3
"""Shorter hidden values are not looked for: they are in too much that is not about them."""
PER_SPLIT: Final = 4
"""Tasks looked at in each split, spread over it (first, last, and between)."""


@attrs.frozen
class Secret:
    """One hidden value: the field it is (a path into a structured one) and its text."""

    field: str
    value: str


@attrs.define
class Looked:
    """A task looked at: its hidden values, and what was shown about it, each as (place,
    what, data): `place` the kind of thing shown (the excuse compares like with like),
    `what` how the check got it."""

    label: str
    secrets: list[Secret]
    shown: list[tuple[str, str, Any]] = attrs.field(factory=list)


def leaves(value: Any, path: str = "", *, keys: bool = True) -> Iterator[tuple[str, str]]:
    """Every leaf of plain data as (path, text): strings, numbers, and with `keys` the keys
    of objects; booleans and nulls are none."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield path, str(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if keys:
                yield f"{where} (the key)", str(key)
            yield from leaves(item, where, keys=keys)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]", keys=keys)
    else:
        yield from leaves(msgspec.to_builtins(value), path, keys=keys)


def secrets_of(withheld: Mapping[str, Any]) -> list[Secret]:
    """A record's hidden values worth looking for (`TaskSet.withheld` gives the fields)."""
    found = []
    for name, value in withheld.items():
        for field, text in leaves(value, name, keys=False):
            if len(text.strip()) >= MIN_CHARS:
                found.append(Secret(field, text.strip()))
    return found


@functools.lru_cache(maxsize=4096)
def _token(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)", re.IGNORECASE)


def shows(value: str, text: str) -> bool:
    """Whether `text` holds `value` as a whole token, whatever the case."""
    return _token(value).search(text) is not None


def sample(tasks: TaskSet[Any]) -> list[tuple[str, int]]:
    """The positions looked at: up to `PER_SPLIT` of each split, spread over it."""
    chosen = []
    for split, count in tasks.counts().items():
        if count:
            picks = {round(i * (count - 1) / (PER_SPLIT - 1)) for i in range(PER_SPLIT)}
            chosen += [(split, index) for index in sorted(picks)]
    return chosen


def _after_reset(
    r: Runner, client: EnvClient[Any, Any], what: str, choice: dict[str, Any]
) -> tuple[TaskRef | None, list[tuple[str, str, Any]]]:
    """Reset with `choice`: the task the answer names, and the answer, the state and the
    env's view (where it has one; not an image's bytes) after it."""
    r.doing = what
    result = client.reset(**{**r.settings.reset_options, **choice})
    shown = [("reset", what, msgspec.to_builtins(result))]
    shown.append(("state", f"state() after {what}", r.state(client)))
    r.doing = f"render() after {what}"
    view = r.request(Render(id=r.next_id(), session=client.session_id))
    if isinstance(view, Rendered) and view.kind != "image":
        shown.append(("view", f"render() after {what}", view.content))
    return result.task, shown


def _look_at(
    r: Runner, client: EnvClient[Any, Any], tasks: TaskSet[Any], where: tuple[str, int]
) -> Looked:
    """Task `where` (split, index): its id, its list_tasks entry, get_task's answer, and
    resets that start it by position and inline, with its whole record."""
    split, index = where
    _, record = tasks.get(split, index)
    looked = Looked(f"{split}[{index}]", secrets_of(tasks.withheld(record)))
    chosen = f"split={split!r}, index={index}"
    r.doing = f"get_task({chosen})"
    got = client.get_task(split=split, index=index)
    looked.shown.append(("id", f"the id of task {looked.label}", got.ref.id))
    looked.shown.append(("get_task", f"get_task({chosen})", msgspec.to_builtins(got)))
    r.doing = f"list_tasks({split!r}, offset={index}, limit=1)"
    page = client.list_tasks(split, offset=index, limit=1)
    entry = {"ids": page.ids, "tasks": page.tasks}
    looked.shown.append(("list_tasks", f"list_tasks({split!r}) at {index}", entry))
    inline = {"task": msgspec.to_builtins(record)}
    for what, choice in (
        (f"reset({chosen})", {"split": split, "index": index}),
        (f"reset(task=<the whole record of {looked.label}>)", inline),
    ):
        looked.shown += _after_reset(r, client, what, choice)[1]
    return looked


def _drawn(r: Runner, client: EnvClient[Any, Any], tasks: TaskSet[Any], seed: int) -> Looked:
    """The task reset(seed=) draws, and what that reset shows."""
    what = f"reset(seed={seed})"
    ref, shown = _after_reset(r, client, what, {"seed": seed})
    expect(ref is not None, f"{what}.task", "the task drawn", "none")
    assert ref is not None
    if ref.split is not None and ref.index is not None:
        _, record = tasks.get(ref.split, ref.index)
    else:
        _, record = tasks.find(ref.id)
    label = f"{ref.split}[{ref.index}]"
    shown.append(("id", f"the id of task {label}", ref.id))
    return Looked(label, secrets_of(tasks.withheld(record)), shown)


def _excused(value: str, place: str, looked: list[Looked]) -> bool:
    """Another task that does not hide `value` shows it in the same place."""
    for other in looked:
        if any(s.value.casefold() == value.casefold() for s in other.secrets):
            continue
        for where, _, data in other.shown:
            if where == place and any(shows(value, text) for _, text in leaves(data)):
                return True
    return False


def _leak(one: Looked, looked: list[Looked]) -> None:
    """Fail on the first of `one`'s hidden values shown about it, and not excused."""
    for place, what, data in one.shown:
        for path, text in leaves(data):
            for secret in one.secrets:
                if shows(secret.value, text) and not _excused(secret.value, place, looked):
                    fail(
                        f"{what}: {path}" if path else what,
                        f"no value of task {one.label}'s hidden field `{secret.field}`",
                        f"{secret.value!r} in {show(text)}",
                    )


def _described(info: EnvInfo, looked: list[Looked]) -> None:
    """Fail on a hidden value of any task looked at that describe() shows."""
    for path, text in leaves(msgspec.to_builtins(info)):
        for one in looked:
            for secret in one.secrets:
                if shows(secret.value, text):
                    fail(
                        f"describe(): {path}",
                        f"no value of task {one.label}'s hidden field `{secret.field}`",
                        f"{secret.value!r} in {show(text)}",
                    )


def _server_tasks(r: Runner) -> TaskSet[Any] | None:
    """The TaskSet the in-process engine serves (None against a URL)."""
    engine = r.target.engine
    if engine is None:
        return None
    spec = engine.envs.get(r.info.name) or engine.envs[engine.default_env]
    return spec.tasks


@check(
    "hidden_task_fields",
    needs=("tasks",),
    openenv_skip="OpenEnv's clients have no task frames (its Task API is plain HTTP)",
)
def check_hidden_task_fields(r: Runner) -> str:
    """no value of a field a task hides is in its id, nor in what describe(), list_tasks,
    get_task, a reset's answer, or the state and view after a reset show

    Raises:
        CheckFailed: a hidden value (3 characters or more, as a whole token, whatever the case;
            a structured one leaf by leaf) of a task looked at is in its id, its list_tasks
            entry, get_task's answer, the answer of a reset that starts it (by position, by
            seed, or inline with its whole record), the state or the env's view after that
            reset, where no task that does not hide it shows it too; or in describe().
        CheckSkipped: the target is a server whose env publishes tasks: their hidden values
            are the server's own (check the env in process: `ecotone validate ENV`).
    """
    if not r.info.tasks:
        return "the env publishes no tasks"
    tasks = _server_tasks(r)
    if tasks is None:
        raise CheckSkipped(
            "a server's hidden task values are its own: check the env in process "
            "(ecotone validate ENV) to look for them"
        )
    if not tasks.hidden:
        return "the env's tasks hide no field (TaskSet(hidden=...))"
    with r.session() as client:
        looked = [_look_at(r, client, tasks, where) for where in sample(tasks)]
        looked += [_drawn(r, client, tasks, seed) for seed in r.settings.seeds]
    for one in looked:
        _leak(one, looked)
    _described(r.info, looked)
    values = sum(len(one.secrets) for one in looked)
    fields = ", ".join(sorted(tasks.hidden))
    if not values:
        return f"hidden {fields}: no value of {MIN_CHARS}+ characters in {len(looked)} tasks"
    return f"{values} values of hidden {fields} of {len(looked)} tasks, none shown"
