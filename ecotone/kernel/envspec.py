"""EnvSpec: what the kernel knows about an environment class, worked out once.

Resolves the Action/Observation/State types (class attributes or generic arguments), which
methods are coroutines, and the JSON Schemas clients and tools see. Building it validates the
class, so a broken env fails when it is registered, not at its first step.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, get_args, get_origin

import attrs
import msgspec

from ecotone.kernel.calls import Mode, mode_of
from ecotone.kernel.contract import Environment
from ecotone.wire import EnvInfo


class EnvDefinitionError(TypeError):
    """An environment class breaks the contract (missing types, missing methods...)."""


def _generic_types(cls: type) -> tuple[Any, Any, Any] | None:
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Environment):
                args = get_args(base)
                if len(args) == 3 and not any(isinstance(a, type(Any)) for a in args):
                    return args
    return None


def _schema(type_: Any) -> dict[str, Any]:
    _, components = msgspec.json.schema_components([type_], ref_template="#/$defs/{name}")
    name = getattr(type_, "__name__", "")
    schema = dict(components.get(name, {}))
    others = {k: v for k, v in components.items() if k != name}
    if others:
        schema["$defs"] = others
    return schema


def _reset_options(reset: Callable[..., Any]) -> frozenset[str] | None:
    try:
        params = inspect.signature(reset).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in ("self", "seed", "episode_id")
    )


TEXT_RENDER_KINDS = ("text", "markdown", "html")


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
    async_reset: bool
    async_step: bool
    async_close: bool
    state_is_method: bool
    async_state: bool
    reset_options: frozenset[str] | None
    has_tools: bool
    """The env implements `list_tools()` and `call_tool(name, arguments)`."""
    async_tools: bool
    """Keyword options `reset` accepts besides seed/episode_id; None when it takes **kwargs."""
    readme: str = ""
    has_render: bool = False
    """The env implements `render()`: a custom view (text, markdown, HTML, or PNG bytes)."""
    async_render: bool = False
    render_kind: str = "text"
    """What a str from `render()` is: text, markdown or html."""
    # How each method runs (ecotone.kernel.calls), worked out once from the flags above.
    reset_mode: Mode = attrs.field(init=False)
    step_mode: Mode = attrs.field(init=False)
    state_mode: Mode = attrs.field(init=False)
    close_mode: Mode = attrs.field(init=False)
    tools_mode: Mode = attrs.field(init=False)
    render_mode: Mode = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        inline = self.inline
        modes = {
            "reset_mode": mode_of(inline, self.async_reset),
            "step_mode": mode_of(inline, self.async_step),
            "state_mode": mode_of(inline, self.async_state),
            "close_mode": mode_of(inline, self.async_close),
            "tools_mode": mode_of(inline, self.async_tools),
            "render_mode": mode_of(inline, self.async_render),
        }
        for name, mode in modes.items():
            object.__setattr__(self, name, mode)

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
        for method in ("reset", "step", "close"):
            if not callable(getattr(env_cls, method, None)):
                raise EnvDefinitionError(f"environment {label!r} has no {method}() method")
        state_attr = inspect.getattr_static(env_cls, "state", None)
        if state_attr is None:
            raise EnvDefinitionError(
                f"environment {label!r} does not implement state (a property or a method)"
            )
        state_is_method = not isinstance(state_attr, property)
        state_fn = state_attr.fget if isinstance(state_attr, property) else state_attr
        for t in types:
            try:
                msgspec.json.schema(t)
            except (TypeError, ValueError) as exc:
                raise EnvDefinitionError(
                    f"environment {label!r}: type {t!r} cannot be encoded by msgspec: {exc}"
                ) from exc
        doc = getattr(env_cls, "description", "") or inspect.getdoc(env_cls) or ""
        render_kind = getattr(env_cls, "render_kind", "text")
        if render_kind not in TEXT_RENDER_KINDS:
            raise EnvDefinitionError(
                f"environment {label!r}: render_kind must be one of "
                f"{', '.join(TEXT_RENDER_KINDS)}, got {render_kind!r}"
            )
        render = getattr(env_cls, "render", None)
        return cls(
            name=label,
            factory=env_cls,
            action_type=types[0],
            observation_type=types[1],
            state_type=types[2],
            description=doc.strip().split("\n\n")[0].replace("\n", " "),
            version=str(getattr(env_cls, "version", "") or "0"),
            inline=bool(getattr(env_cls, "inline", False)),
            async_reset=inspect.iscoroutinefunction(env_cls.reset),  # type: ignore[attr-defined]
            async_step=inspect.iscoroutinefunction(env_cls.step),  # type: ignore[attr-defined]
            async_close=inspect.iscoroutinefunction(env_cls.close),  # type: ignore[attr-defined]
            state_is_method=state_is_method,
            async_state=inspect.iscoroutinefunction(state_fn),
            reset_options=_reset_options(env_cls.reset),  # type: ignore[attr-defined]
            has_tools=callable(getattr(env_cls, "list_tools", None))
            and callable(getattr(env_cls, "call_tool", None)),
            async_tools=inspect.iscoroutinefunction(getattr(env_cls, "call_tool", None)),
            readme=_readme(env_cls),
            has_render=callable(render),
            async_render=inspect.iscoroutinefunction(render),
            render_kind=render_kind,
        )

    def info(self) -> EnvInfo:
        """The description clients get from `describe`."""
        return EnvInfo(
            name=self.name,
            description=self.description,
            version=self.version,
            action_schema=_schema(self.action_type),
            observation_schema=_schema(self.observation_type),
            state_schema=_schema(self.state_type),
            readme=self.readme,
        )
