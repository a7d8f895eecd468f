"""EnvSpec: what the kernel knows about an environment class, worked out once.

Resolves the Action/Observation/State types (class attributes or generic arguments), whether
the env is plain or async, and the JSON Schemas clients and tools see. Building it validates
the class, so a broken env fails when it is registered, not at its first step, with an error
that says what to change.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, Unpack, get_args, get_origin, get_type_hints

import attrs
import msgspec

from ecotone.kernel.contract import (
    AsyncEnvironment,
    AsyncMultiAgentEnvironment,
    AsyncSimultaneousEnvironment,
    Environment,
    MultiAgentEnvironment,
    SimultaneousEnvironment,
    _AsyncSeatedEnvironment,
    _Seated,
    _SeatedEnvironment,
)
from ecotone.kernel.modes import Mode, mode_of
from ecotone.kernel.rubrics import Rubric, check_rubric, scored_factory, scored_mode
from ecotone.kernel.seats import seated_factory
from ecotone.kernel.snapshots import schema_hash, snapshot_kind, unsupported_reason
from ecotone.kernel.tasks import TaskError, TaskSet, task_set_of
from ecotone.specs import EnvInfo


class EnvDefinitionError(TypeError):
    """An environment class breaks the contract (missing types, missing methods...)."""


def _generic_types(cls: type) -> tuple[Any, Any, Any] | None:
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(
                origin, Environment | AsyncEnvironment | _Seated
            ):
                args = get_args(base)
                if len(args) == 3 and not any(isinstance(a, type(Any)) for a in args):
                    return args
    return None


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's fields (`x: int` then `\"\"\"...\"\"\"`), base
    classes' included; {} when the source cannot be read."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in ("builtins", "msgspec"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, after in itertools.pairwise(body):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _structs(type_: Any, seen: dict[str, type] | None = None) -> dict[str, type]:
    """The Struct classes a type refers to (itself, its fields' types...), by name."""
    seen = {} if seen is None else seen
    if isinstance(type_, type) and issubclass(type_, msgspec.Struct):
        if type_.__name__ in seen:
            return seen
        seen[type_.__name__] = type_
        try:
            hints = get_type_hints(type_)
        except Exception:
            return seen
        for hint in hints.values():
            _structs(hint, seen)
        return seen
    for arg in get_args(type_):
        _structs(arg, seen)
    return seen


def _describe_fields(components: dict[str, Any], type_: Any) -> None:
    """Fields' attribute docstrings as their schemas' `description`, where msgspec gave none
    (LLM tools, MCP and the web UI show them)."""
    for name, struct in _structs(type_).items():
        schema = components.get(name)
        props = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(props, dict):
            continue
        for field, doc in _attribute_docs(struct).items():
            prop = props.get(field)
            if isinstance(prop, dict) and "description" not in prop and doc:
                prop["description"] = doc


def _schema(type_: Any) -> dict[str, Any]:
    _, components = msgspec.json.schema_components([type_], ref_template="#/$defs/{name}")
    _describe_fields(components, type_)
    name = getattr(type_, "__name__", "")
    schema = dict(components.get(name, {}))
    others = {k: v for k, v in components.items() if k != name}
    if others:
        schema["$defs"] = others
    return schema


def _reset_options(reset: Callable[..., Any]) -> frozenset[str] | None:
    """The options an env's `reset` takes by name (besides `seed` and `episode_id`): its
    keyword parameters, and the keys of a `**options: Unpack[SomeTypedDict]`; None when it
    takes any (`**kwargs` of no TypedDict), so that none is refused."""
    try:
        params = list(inspect.signature(reset).parameters.values())
    except (TypeError, ValueError):
        return None
    names = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in ("self", "seed", "episode_id")
    }
    rest = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    if rest:
        keys = _typed_keys(reset, rest[0].name)
        if keys is None:
            return None
        names |= keys
    return frozenset(names)


def _typed_keys(function: Callable[..., Any], name: str) -> frozenset[str] | None:
    """The keys of the TypedDict `**name` is annotated with (`Unpack[TD]`), or None."""
    try:
        hint = get_type_hints(function, include_extras=True).get(name)
    except Exception:  # an annotation that does not resolve: take any option
        return None
    if get_origin(hint) is not Unpack:
        return None
    (typed,) = get_args(hint)
    keys = getattr(typed, "__required_keys__", None)
    if keys is None:  # not a TypedDict
        return None
    return frozenset(keys | typed.__optional_keys__)


TEXT_RENDER_KINDS = ("text", "markdown", "html", "svg")
METHODS = ("reset", "step", "state", "close", "render", "list_tools", "call_tool")
"""The methods an env may have; all plain functions, or all coroutines."""
SEAT_METHODS = ("current_seat", "live_seats", "observe")
"""A multi-agent env's own methods, held to the same rule."""
BASES = (
    Environment,
    AsyncEnvironment,
    MultiAgentEnvironment,
    SimultaneousEnvironment,
    AsyncMultiAgentEnvironment,
    AsyncSimultaneousEnvironment,
)
"""The base classes an env may subclass (their methods are placeholders)."""
_TWINS: dict[type, tuple[str, str]] = {
    Environment: ("Environment", "AsyncEnvironment"),
    AsyncEnvironment: ("Environment", "AsyncEnvironment"),
    MultiAgentEnvironment: ("MultiAgentEnvironment", "AsyncMultiAgentEnvironment"),
    AsyncMultiAgentEnvironment: ("MultiAgentEnvironment", "AsyncMultiAgentEnvironment"),
    SimultaneousEnvironment: ("SimultaneousEnvironment", "AsyncSimultaneousEnvironment"),
    AsyncSimultaneousEnvironment: ("SimultaneousEnvironment", "AsyncSimultaneousEnvironment"),
}
"""Each base class's plain and async forms, by name (what an error tells to subclass)."""


def _inherited(env_cls: type, method: str) -> bool:
    """`method` is the base class's placeholder, not the env's own."""
    found = getattr(env_cls, method)
    return any(found is getattr(base, method, None) for base in BASES)


def _asynchronous(env_cls: type, label: str) -> bool:
    """Whether the env's methods are coroutines; EnvDefinitionError when they are mixed, or
    do not match the base class."""
    names = METHODS + (SEAT_METHODS if issubclass(env_cls, _Seated) else ())
    present = [m for m in names if callable(getattr(env_cls, m, None))]
    coroutines = [m for m in present if inspect.iscoroutinefunction(getattr(env_cls, m))]
    plain = [m for m in present if m not in coroutines]
    base = next((b for b in BASES if issubclass(env_cls, b)), Environment)
    plain_form, async_form = _TWINS[base]
    if issubclass(env_cls, AsyncEnvironment | _AsyncSeatedEnvironment):
        if plain:
            raise EnvDefinitionError(
                f"environment {label!r} is an {async_form}, but {_names(plain)} "
                f"{'is a plain function' if len(plain) == 1 else 'are plain functions'}: "
                f"write them as `async def` (or subclass ecotone.{plain_form}, all plain)"
            )
        return True
    if issubclass(env_cls, Environment | _SeatedEnvironment):
        if coroutines:
            raise EnvDefinitionError(
                f"environment {label!r} is a (plain) {plain_form}, but {_names(coroutines)} "
                f"{'is a coroutine' if len(coroutines) == 1 else 'are coroutines'}: subclass "
                f"ecotone.{async_form} and make every method `async def`, or make them plain"
            )
        return False
    if coroutines and plain:
        raise EnvDefinitionError(
            f"environment {label!r} mixes coroutines ({_names(coroutines)}) and plain functions "
            f"({_names(plain)}): make them all one or the other (ecotone.AsyncEnvironment or "
            "ecotone.Environment)"
        )
    return bool(coroutines)


def _call_timeout(env_cls: type, label: str) -> float | None:
    value = getattr(env_cls, "call_timeout", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EnvDefinitionError(
            f"environment {label!r}: call_timeout must be a number of seconds > 0 or None, "
            f"got {value!r}"
        )
    return float(value)


ISOLATIONS = ("process",)
"""What an env class may ask for as its `isolation` (None: none)."""


def _isolation(env_cls: type, label: str, seated: bool) -> str | None:
    value = getattr(env_cls, "isolation", None)
    if value is None:
        return None
    if value not in ISOLATIONS:
        raise EnvDefinitionError(
            f"environment {label!r}: isolation must be one of {', '.join(ISOLATIONS)} or None, "
            f"got {value!r}"
        )
    if seated:
        raise EnvDefinitionError(
            f"environment {label!r}: a multi-agent env cannot run in a process of its own "
            "(isolation = None)"
        )
    return str(value)


def _names(methods: list[str]) -> str:
    return ", ".join(f"{m}()" for m in methods)


def _readme(env_cls: type) -> str:
    """The env class's `readme`, or else its module's docstring and its own (not inherited)."""
    readme = getattr(env_cls, "readme", "")
    if isinstance(readme, str) and readme.strip():
        return inspect.cleandoc(readme)
    module = sys.modules.get(env_cls.__module__)
    parts = [
        inspect.cleandoc(doc)
        for doc in (getattr(module, "__doc__", None), env_cls.__dict__.get("__doc__"))
        if isinstance(doc, str) and doc.strip()
    ]
    return "\n\n".join(parts)


def _check_seated_render(env_cls: type, label: str) -> None:
    """A multi-agent env's `render`, if it has one, takes the seat it draws for."""
    render = getattr(env_cls, "render", None)
    if not callable(render):
        return
    try:
        inspect.signature(render).bind(None, None)  # self, seat
    except TypeError:
        raise EnvDefinitionError(
            f"environment {label!r}: a multi-agent env's render takes the seat it draws for: "
            "`def render(self, seat: str | None) -> str | bytes` (None: the public picture)"
        ) from None
    except ValueError:  # no signature to read (a builtin): it is called as it is
        return


def _seating(env_cls: type, label: str, types: list[Any]) -> dict[str, Any]:
    """A multi-agent env's seats, each seat's types and its rule for a seat lost, checked."""
    seats = getattr(env_cls, "seats", ())
    if (
        not isinstance(seats, tuple)
        or not seats
        or not all(isinstance(s, str) and s for s in seats)
        or len(set(seats)) != len(seats)
    ):
        raise EnvDefinitionError(
            f"environment {label!r}: `seats` must be a tuple of distinct names, got {seats!r}"
        )
    if getattr(env_cls, "rubric", None) is not None:
        raise EnvDefinitionError(f"environment {label!r}: a multi-agent env takes no rubric")
    rule = getattr(env_cls, "seat_lost", "wait")
    if rule not in ("wait", "truncate"):
        raise EnvDefinitionError(
            f"environment {label!r}: seat_lost must be 'wait' or 'truncate', got {rule!r}"
        )
    own: dict[str, dict[str, Any]] = {
        "action": dict(getattr(env_cls, "seat_action_types", {}) or {}),
        "observation": dict(getattr(env_cls, "seat_observation_types", {}) or {}),
    }
    for kind, table in own.items():
        unknown = sorted(set(table) - set(seats))
        if unknown:
            raise EnvDefinitionError(
                f"environment {label!r}: seat_{kind}_types names no seat {', '.join(unknown)}"
            )
        for t in table.values():
            try:
                msgspec.json.schema(t)
            except (TypeError, ValueError) as exc:
                raise EnvDefinitionError(
                    f"environment {label!r}: type {t!r} cannot be encoded by msgspec: {exc}"
                ) from exc
    seat_types = {
        seat: (own["action"].get(seat, types[0]), own["observation"].get(seat, types[1]))
        for seat in seats
    }
    seating: dict[str, Any] = {"seats": seats, "seat_types": seat_types, "seat_lost": rule}
    if issubclass(env_cls, SimultaneousEnvironment | AsyncSimultaneousEnvironment):
        deadline = getattr(env_cls, "move_deadline", None)
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0
        ):
            raise EnvDefinitionError(
                f"environment {label!r}: move_deadline must be a number of seconds > 0 or "
                f"None, got {deadline!r}"
            )
        seating["simultaneous"] = True
        seating["move_deadline"] = None if deadline is None else float(deadline)
    return seating


@attrs.frozen(slots=True)
class EnvSpec:
    """An environment class, validated, with everything the kernel needs to serve it."""

    name: str
    factory: Callable[[], Any]
    action_type: Any
    observation_type: Any
    state_type: Any
    description: str
    version: str
    inline: bool
    """Plain methods run on the event loop, not in a worker thread (`Environment.inline`)."""
    asynchronous: bool
    """The env's methods are coroutines (an `AsyncEnvironment`, or a class written so)."""
    reset_options: frozenset[str] | None
    """Keyword options `reset` accepts besides seed/episode_id; None when it takes **kwargs."""
    has_tools: bool
    """The env implements `list_tools()` and `call_tool(name, arguments)`."""
    readme: str = ""
    has_render: bool = False
    """The env implements `render()`: a custom view (text, markdown, HTML, SVG, or PNG
    bytes)."""
    render_kind: str = "text"
    """What a str from `render()` is: text, markdown, html or svg."""
    call_timeout: float | None = None
    """The env's own deadline for a call (None: the server's)."""
    tasks: TaskSet[Any] | None = None
    """The tasks the env publishes (`ecotone.TaskSet`), or those a server was told to use."""
    rubric: Rubric | None = None
    """The rubric that scores every step (`ecotone.rubrics`): the env's own, or a server's."""
    snapshots: str | None = None
    """How the env saves its episodes (`ecotone.kernel.snapshots`): `methods`, `state`, or
    None: it cannot (`snapshot_reason` says why)."""
    snapshot_reason: str = ""
    snapshot_schema: str = ""
    """The hash of the State's schema a snapshot names."""
    snapshot_identity: dict[str, str] = attrs.field(factory=dict)
    """What else a snapshot must match (the env class's `snapshot_identity`)."""
    seats: tuple[str, ...] = ()
    """A multi-agent env's seats (none: a single-agent env)."""
    seat_types: dict[str, tuple[Any, Any]] = attrs.field(factory=dict)
    """Each seat's action and observation types."""
    seat_lost: str = "wait"
    """A multi-agent env's rule for a seat lost (`MultiAgentEnvironment.seat_lost`)."""
    isolation: str | None = None
    """`process`: a server runs each session's env in a process of its own (the env class's
    `isolation`; `ecotone.server.isolation`), so a crash costs one session; None: in the
    server's process, unless the server isolates every env (`serve --isolate`)."""
    simultaneous: bool = False
    """Its seats move at once (`SimultaneousEnvironment`): a round, then one env step."""
    move_deadline: float | None = None
    """Seconds a simultaneous round waits for its silent seats after its first move."""
    mode: Mode = attrs.field(init=False)
    """How every method of the env runs (ecotone.kernel.calls): awaited, inline, or in a
    worker thread."""

    make: Callable[[], Any] = attrs.field(init=False)
    """Makes one instance for a session: `factory()`, wrapped to apply the rubric if any."""
    _info: list[EnvInfo] = attrs.field(init=False, factory=list, eq=False, repr=False)
    """`info()`, made once (schemas and field docs are read from source: not per request)."""

    def __attrs_post_init__(self) -> None:
        mode = mode_of(self.inline, self.asynchronous)
        make = self.factory
        if self.rubric is not None:
            make = scored_factory(self.factory, self.rubric, mode.value)
            mode = Mode(scored_mode(self.rubric, mode.value))
        if self.seats:
            make = seated_factory(make, self.seats, self.simultaneous, self.asynchronous)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "make", make)

    @classmethod
    def from_class(cls, env_cls: type, name: str | None = None) -> EnvSpec:
        """Inspect `env_cls` and return its spec; raise EnvDefinitionError if it is unusable."""
        label = name or getattr(env_cls, "name", "") or env_cls.__name__
        generic = _generic_types(env_cls)
        types: list[Any] = []
        for i, attr in enumerate(("action_type", "observation_type", "state_type")):
            t = getattr(env_cls, attr, None)
            if t is None and generic is not None:
                t = generic[i]
            if t is None:
                raise EnvDefinitionError(
                    f"environment {label!r} does not declare its {attr}: set the class attribute "
                    f"{attr} or subclass Environment[Action, Observation, State]"
                )
            types.append(t)
        state_attr = inspect.getattr_static(env_cls, "state", None)
        if isinstance(state_attr, property):
            state_name = getattr(types[2], "__name__", "State")
            raise EnvDefinitionError(
                f"environment {label!r}: `state` is a property; since ecotone 0.2 it is a "
                f"method: drop @property and write `def state(self) -> {state_name}:` "
                "(`async def` in an AsyncEnvironment)"
            )
        seated = isinstance(env_cls, type) and issubclass(env_cls, _Seated)
        simultaneous = seated and issubclass(
            env_cls, SimultaneousEnvironment | AsyncSimultaneousEnvironment
        )
        methods: tuple[str, ...] = ("reset", "step", "state", "close")
        if seated:
            methods += ("live_seats" if simultaneous else "current_seat", "observe")
        for method in methods:
            if not callable(getattr(env_cls, method, None)) or (
                method != "close" and _inherited(env_cls, method)
            ):
                raise EnvDefinitionError(f"environment {label!r} does not implement {method}()")
        asynchronous = _asynchronous(env_cls, label)
        for t in types:
            try:
                msgspec.json.schema(t)
            except (TypeError, ValueError) as exc:
                raise EnvDefinitionError(
                    f"environment {label!r}: type {t!r} cannot be encoded by msgspec: {exc}"
                ) from exc
        doc = getattr(env_cls, "description", "") or inspect.getdoc(env_cls) or ""
        try:
            tasks = task_set_of(env_cls)
        except (TypeError, TaskError) as exc:
            raise EnvDefinitionError(f"environment {label!r}: {exc}") from exc
        reset_options = _reset_options(env_cls.reset)  # type: ignore[attr-defined]
        rubric = getattr(env_cls, "rubric", None)
        if rubric is not None:
            try:
                check_rubric(rubric, f"environment {label!r}")
            except (TypeError, ValueError) as exc:
                raise EnvDefinitionError(str(exc)) from exc
        if tasks is not None and reset_options is not None and "task" not in reset_options:
            raise EnvDefinitionError(
                f"environment {label!r} publishes tasks, but its reset() takes no `task`: add "
                "`task: YourTask | None = None` to reset's keyword arguments"
            )
        seating = _seating(env_cls, label, types) if seated else {}
        if seated:
            _check_seated_render(env_cls, label)
        render_kind = getattr(env_cls, "render_kind", "text")
        if render_kind not in TEXT_RENDER_KINDS:
            raise EnvDefinitionError(
                f"environment {label!r}: render_kind must be one of "
                f"{', '.join(TEXT_RENDER_KINDS)}, got {render_kind!r}"
            )
        return cls(
            name=label,
            factory=env_cls,
            action_type=types[0],
            observation_type=types[1],
            state_type=types[2],
            description=doc.strip().split("\n\n")[0].replace("\n", " "),
            version=str(getattr(env_cls, "version", "") or "0"),
            inline=bool(getattr(env_cls, "inline", False)) and not asynchronous,
            asynchronous=asynchronous,
            reset_options=reset_options,
            has_tools=callable(getattr(env_cls, "list_tools", None))
            and callable(getattr(env_cls, "call_tool", None)),
            readme=_readme(env_cls),
            has_render=callable(getattr(env_cls, "render", None)),
            render_kind=render_kind,
            call_timeout=_call_timeout(env_cls, label),
            tasks=tasks,
            rubric=rubric,
            snapshots=snapshot_kind(env_cls),
            snapshot_reason=unsupported_reason(env_cls, label) or "",
            snapshot_schema=schema_hash(types[2]),
            snapshot_identity={
                str(k): str(v)
                for k, v in (getattr(env_cls, "snapshot_identity", None) or {}).items()
            },
            isolation=_isolation(env_cls, label, seated),
            **seating,
        )

    def with_rubric(self, rubric: Rubric) -> EnvSpec:
        """This spec scoring its steps with `rubric` instead of its own (a server's
        `--rubric`)."""
        return attrs.evolve(self, rubric=check_rubric(rubric, f"environment {self.name!r}"))

    def with_task_files(self, sources: Mapping[str, str]) -> EnvSpec:
        """This spec serving the tasks in these files (split -> path, `TaskSet.from_file`)
        instead of its own, read as records of the env's task type: a server's `--tasks`."""
        if self.reset_options is not None and "task" not in self.reset_options:
            raise EnvDefinitionError(
                f"environment {self.name!r} takes no `task` in reset(), so it cannot be given tasks"
            )
        base = self.tasks if self.tasks is not None else TaskSet([])
        return attrs.evolve(self, tasks=base.reading(sources))

    def info(self) -> EnvInfo:
        """The description clients get from `describe` (made once per spec)."""
        if not self._info:
            self._info.append(self._describe())
        return self._info[0]

    def _describe(self) -> EnvInfo:
        return EnvInfo(
            name=self.name,
            description=self.description,
            version=self.version,
            action_schema=_schema(self.action_type),
            observation_schema=_schema(self.observation_type),
            state_schema=_schema(self.state_type),
            readme=self.readme,
            tasks={} if self.tasks is None else self.tasks.counts(),
            task_schema={} if self.tasks is None else self.tasks.schema(),
            seats=list(self.seats),
            seat_schemas={
                seat: {"action": _schema(action), "observation": _schema(observation)}
                for seat, (action, observation) in self.seat_types.items()
                if (action, observation) != (self.action_type, self.observation_type)
            },
            simultaneous=self.simultaneous,
            move_deadline=self.move_deadline,
        )
