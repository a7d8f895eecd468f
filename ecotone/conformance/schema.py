"""A small JSON Schema validator: the subset msgspec (and pydantic) schemas use.

Keywords understood: `type` (a name or a list), `properties`, `required`,
`additionalProperties`, `items`, `prefixItems`, `minItems`/`maxItems`, `uniqueItems`, `enum`,
`const`, `anyOf`, `oneOf`, `allOf`, `$ref` (local JSON pointers, such as `#/$defs/Name`),
`minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`, `minLength`/`maxLength` and
`pattern`. Annotations (`title`, `default`, `description`, `format`, `discriminator`...) are
ignored, as the standard allows. Data is what a JSON (or MessagePack) decoder gives: dicts,
lists, str, int, float, bool and None.

    errors = validate(observation, info.observation_schema)   # [] when it matches
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

Schema = Mapping[str, Any] | bool
"""A JSON Schema: an object, or `true` (anything) / `false` (nothing)."""


@attrs.frozen(slots=True)
class SchemaError:
    """One way the data fails the schema: where (`$.a[0].b`) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SchemaDefinitionError(ValueError):
    """The schema itself is unusable (a `$ref` that resolves to nothing)."""


def resolve(ref: str, root: Schema) -> Schema:
    """The schema a local `$ref` (`#/$defs/Name`, any JSON pointer into `root`) points at."""
    if not ref.startswith("#"):
        raise SchemaDefinitionError(f"$ref {ref!r} is not local to the schema (only #/... is)")
    node: Any = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            raise SchemaDefinitionError(f"$ref {ref!r} points at nothing in the schema")
        node = node[part]
    if not isinstance(node, Mapping | bool):
        raise SchemaDefinitionError(f"$ref {ref!r} points at a {type(node).__name__}")
    return node


def refs(schema: Schema) -> Iterator[str]:
    """Every `$ref` string anywhere in `schema`."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif isinstance(value, Mapping):
                yield from refs(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, Mapping):
                        yield from refs(item)


def type_of(value: Any) -> str:
    """The JSON type name of a decoded value (`integer` for whole floats too)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    kind = type_of(value)
    return kind == name or (name == "number" and kind == "integer")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type_of(a) == type_of(b) and a == b


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate(instance: Any, schema: Schema, *, root: Schema | None = None) -> list[SchemaError]:
    """Every way `instance` fails `schema` (empty when it matches). `root` resolves `$ref`s
    (default: `schema` itself). Raises SchemaDefinitionError for a `$ref` to nothing."""
    return list(_check(instance, schema, schema if root is None else root, "$"))


def _check(value: Any, schema: Schema, root: Schema, path: str) -> Iterator[SchemaError]:
    if schema is True:
        return
    if schema is False:
        yield SchemaError(path, "no value is allowed here")
        return
    if "$ref" in schema:
        yield from _check(value, resolve(str(schema["$ref"]), root), root, path)
    if "type" in schema:
        wanted = schema["type"]
        names = [wanted] if isinstance(wanted, str) else list(wanted)
        if not any(_is_type(value, n) for n in names):
            yield SchemaError(
                path, f"expected {' or '.join(names)}, got {type_of(value)} {_show(value)}"
            )
            return  # the other keywords would only repeat the type mismatch
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        yield SchemaError(path, f"{_show(value)} is not one of {_show(schema['enum'])}")
    if "const" in schema and not _same(value, schema["const"]):
        yield SchemaError(path, f"expected {_show(schema['const'])}, got {_show(value)}")
    for sub in schema.get("allOf", ()):
        yield from _check(value, sub, root, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            yield from _alternatives(value, schema[key], root, path, exactly_one=key == "oneOf")
    kind = type_of(value)
    if kind in ("integer", "number"):
        yield from _number(value, schema, path)
    elif kind == "string":
        yield from _string(value, schema, path)
    elif kind == "array":
        yield from _array(value, schema, root, path)
    elif kind == "object":
        yield from _object(value, schema, root, path)


def _alternatives(
    value: Any, options: list[Schema], root: Schema, path: str, *, exactly_one: bool
) -> Iterator[SchemaError]:
    failures = [list(_check(value, option, root, path)) for option in options]
    matched = sum(1 for f in failures if not f)
    if matched == 0:
        if len(options) == 1:
            yield from failures[0]
            return
        reasons = "; ".join(str(f[0].message) for f in failures if f)
        yield SchemaError(path, f"{_show(value)} matches none of the alternatives ({reasons})")
    elif exactly_one and matched > 1:
        yield SchemaError(path, f"{_show(value)} matches {matched} of the oneOf alternatives")


def _number(value: float, schema: Mapping[str, Any], path: str) -> Iterator[SchemaError]:
    if isinstance(value, float) and not math.isfinite(value):
        yield SchemaError(path, f"{value} is not a JSON number")
        return
    if "minimum" in schema and value < schema["minimum"]:
        yield SchemaError(path, f"{value} is below the minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        yield SchemaError(path, f"{value} is above the maximum {schema['maximum']}")
    low = schema.get("exclusiveMinimum")
    if isinstance(low, int | float) and not isinstance(low, bool) and value <= low:
        yield SchemaError(path, f"{value} is not above the exclusive minimum {low}")
    high = schema.get("exclusiveMaximum")
    if isinstance(high, int | float) and not isinstance(high, bool) and value >= high:
        yield SchemaError(path, f"{value} is not below the exclusive maximum {high}")
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and step > 0 and not _multiple(value, step):
        yield SchemaError(path, f"{value} is not a multiple of {step}")


def _multiple(value: float, step: float) -> bool:
    quotient = value / step
    return math.isclose(quotient, round(quotient), rel_tol=1e-9, abs_tol=1e-9)


def _string(value: str, schema: Mapping[str, Any], path: str) -> Iterator[SchemaError]:
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield SchemaError(path, f"{_show(value)} is shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        yield SchemaError(path, f"{_show(value)} is longer than {schema['maxLength']}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        yield SchemaError(path, f"{_show(value)} does not match the pattern {pattern!r}")


def _array(
    value: list[Any], schema: Mapping[str, Any], root: Schema, path: str
) -> Iterator[SchemaError]:
    if "minItems" in schema and len(value) < schema["minItems"]:
        yield SchemaError(path, f"{len(value)} items, fewer than {schema['minItems']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        yield SchemaError(path, f"{len(value)} items, more than {schema['maxItems']}")
    prefix = schema.get("prefixItems", [])
    for i, (item, sub) in enumerate(zip(value, prefix, strict=False)):
        yield from _check(item, sub, root, f"{path}[{i}]")
    rest = schema.get("items")
    if rest is not None:
        for i in range(len(prefix), len(value)):
            yield from _check(value[i], rest, root, f"{path}[{i}]")
    if schema.get("uniqueItems"):
        for i, item in enumerate(value):
            if any(_same(item, other) for other in value[:i]):
                yield SchemaError(f"{path}[{i}]", f"{_show(item)} repeats an earlier item")
                break


def _key(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{name!r}]"


def _object(
    value: Mapping[str, Any], schema: Mapping[str, Any], root: Schema, path: str
) -> Iterator[SchemaError]:
    for name in schema.get("required", ()):
        if name not in value:
            yield SchemaError(_key(path, name), "required property is missing")
    properties: Mapping[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            yield from _check(item, properties[name], root, _key(path, str(name)))
        elif extra is False:
            yield SchemaError(_key(path, str(name)), "property is not in the schema")
        elif isinstance(extra, Mapping):
            yield from _check(item, extra, root, _key(path, str(name)))
