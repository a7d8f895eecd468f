"""JSON Schemas to Python signatures and Google-style docstrings, as TRL reads tools.

TRL builds each tool's schema from the method's type hints and docstring
(`transformers.utils.get_json_schema`): every argument needs a hint it understands (str, int,
float, bool, `Literal`, `list[...]`, `dict`, unions with None) and an `Args:` line. This
module makes such a function from an action's (or a tool's) JSON Schema.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, Optional

from ecotone.client.llm import identifier

_REF = re.compile(r"^#/\$defs/(?P<name>.+)$")
_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        match = _REF.match(ref)
        if match and match["name"] in defs:
            return _resolve(defs[match["name"]], defs)
    return schema


def python_type(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> Any:
    """The type hint for values of `schema` (objects and anything unusual become `dict` or
    `str` rather than a hint transformers cannot read)."""
    defs = defs or {}
    schema = _resolve(schema, defs)
    if schema.get("enum"):
        values = tuple(schema["enum"])
        if all(isinstance(v, str | int | float | bool) for v in values):
            return Literal[values]  # type: ignore[valid-type,unused-ignore]
    if "const" in schema and isinstance(schema["const"], str | int | float | bool):
        return Literal[schema["const"]]  # type: ignore[valid-type,unused-ignore]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        nullable = any(_resolve(b, defs).get("type") == "null" for b in branches)
        rest = [b for b in branches if _resolve(b, defs).get("type") != "null"]
        hints = [python_type(b, defs) for b in rest]
        hint: Any = hints[0] if len(hints) == 1 else _union(hints)
        return Optional[hint] if nullable else hint  # noqa: UP045 - a runtime hint
    kind = schema.get("type")
    if isinstance(kind, list):
        hints = [python_type({"type": k}, defs) for k in kind if k != "null"]
        hint = hints[0] if len(hints) == 1 else _union(hints)
        return Optional[hint] if "null" in kind else hint  # noqa: UP045
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping):
            return list[python_type(items, defs)]  # type: ignore[misc]
        return list
    if kind == "object":
        return dict
    return str


def _union(hints: list[Any]) -> Any:
    out = hints[0]
    for hint in hints[1:]:
        out = out | hint
    return out


def _describe(schema: Mapping[str, Any], defs: Mapping[str, Any], name: str) -> str:
    schema_r = _resolve(schema, defs)
    text = str(schema.get("description") or schema_r.get("description") or "").strip()
    text = " ".join(text.split())
    if not text:
        text = f"the `{name}` field"
    notes = []
    for key, word in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >=")):
        if key in schema_r:
            notes.append(f"{word} {schema_r[key]}")
    if "maxLength" in schema_r:
        notes.append(f"length <= {schema_r['maxLength']}")
    if notes:
        text += f" ({', '.join(notes)})"
    return text


def make_method(
    name: str,
    description: str,
    schema: Mapping[str, Any],
    body: Callable[[Any, dict[str, Any]], str],
    *,
    skip: frozenset[str] = frozenset(),
) -> Callable[..., str]:
    """A method `name(self, <the schema's properties>) -> str` whose docstring and hints are
    what TRL turns into the tool's schema; calling it runs `body(self, arguments)`, the
    arguments under their schema names (defaults left out unless given)."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    props: Mapping[str, Any] = _resolve(schema, defs).get("properties", {})
    required = set(_resolve(schema, defs).get("required", []))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    names: dict[str, str] = {}
    lines = []
    ordered = sorted(
        ((k, v) for k, v in props.items() if k not in skip), key=lambda kv: kv[0] not in required
    )
    for field, sub in ordered:
        arg = identifier(field)
        if arg == "self":
            arg = "self_"
        while arg in names:  # `a-b` beside `a_b`: both stay callable
            arg += "_"
        names[arg] = field
        hint = python_type(sub, defs)
        default: Any = inspect.Parameter.empty
        if field not in required:
            default = _resolve(sub, defs).get("default", sub.get("default"))
            if default is not None and not isinstance(default, str | int | float | bool):
                default = None
            if default is None:
                hint = Optional[hint]  # noqa: UP045
        params.append(
            inspect.Parameter(
                arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hint
            )
        )
        annotations[arg] = hint
        lines.append(f"    {arg}: {_describe(sub, defs, field)}")
    annotations["return"] = str

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        arguments = {names[k]: v for k, v in bound.arguments.items() if k != "self"}
        return body(self, arguments)

    signature = inspect.Signature(params, return_annotation=str)
    doc = " ".join((description or f"Call {name}.").split())
    if lines:
        doc += "\n\nArgs:\n" + "\n".join(lines)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


__all__ = ["make_method", "python_type"]
