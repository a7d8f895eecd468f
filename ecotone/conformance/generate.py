"""Values from a JSON Schema: valid ones for playing an env, wrong ones for testing rejection.

`generate(schema, rng)` builds a value that matches `schema` (the subset msgspec and pydantic
schemas use: see `ecotone.conformance.schema`), choosing with `rng` only, so a seeded
`random.Random` gives the same values every time:

* integers and numbers within `minimum`/`maximum` (exclusive bounds and integer `multipleOf`
  too), in [-10, 10] when unbounded;
* strings of lowercase letters and digits within `minLength`/`maxLength` (0 to 8 when
  unbounded); for a `pattern`, strings built from the regular expression (literals, classes,
  repeats, groups, alternatives); `format` date-time, date, time and uuid, and base64
  `contentEncoding`;
* booleans, `null`, `enum` and `const` members;
* arrays within `minItems`/`maxItems` (0 to 3 when unbounded), `prefixItems` for tuples,
  distinct items for `uniqueItems`;
* objects with their required properties only (optional fields are omitted), and a few entries
  for maps (`additionalProperties` with a schema);
* one alternative of `anyOf`/`oneOf`, `allOf` merged, `$ref` resolved against the root.

The conformance suite plays envs that have no `sample_action` with these values.

    action = generate(info.action_schema, random.Random(0))

`wrong_value(schema)` and `invalid_action(schema, valid)` build values the schema rejects, for
checking that an env refuses them.
"""

from __future__ import annotations

import base64
import importlib
import math
import random
import re
import string
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ecotone.conformance.schema import Schema, resolve, type_of, validate

ALPHABET: Final = string.ascii_lowercase + string.digits
UNBOUNDED: Final = 10
"""Unbounded integers and numbers are drawn from [-UNBOUNDED, UNBOUNDED]."""
MAX_STRING: Final = 8
MAX_ITEMS: Final = 3
MAX_DEPTH: Final = 6
"""Past this depth arrays are empty when they may be and `anyOf` prefers `null`."""
PATTERN_TRIES: Final = 64
UNKNOWN_FIELD: Final = "conformance_unknown_field"


class GenerationError(ValueError):
    """The schema admits no value this generator can build (or is unusable)."""


def generate(schema: Schema, rng: random.Random, *, root: Schema | None = None) -> Any:
    """A value matching `schema`, chosen with `rng`. `root` resolves `$ref`s (default:
    `schema`). Raises GenerationError for a schema that admits nothing buildable."""
    return _Generator(rng, schema if root is None else root).value(schema, 0)


def object_schema(schema: Schema, root: Schema | None = None) -> Mapping[str, Any]:
    """`schema` with a top-level `$ref` / single `allOf` resolved: what an object type's
    properties and required fields are read from."""
    root = schema if root is None else root
    for _ in range(32):
        if not isinstance(schema, Mapping):
            return {}
        if "$ref" in schema:
            schema = _merged(resolve(str(schema["$ref"]), root), schema)
        elif "allOf" in schema:
            schema = _merge_all(schema)
        else:
            return schema
    raise GenerationError("schema $refs go round in a circle")


def _merged(target: Schema, siblings: Mapping[str, Any]) -> Schema:
    """A resolved `$ref` plus the keywords written next to it."""
    extra = {k: v for k, v in siblings.items() if k != "$ref"}
    if not extra:
        return target
    if not isinstance(target, Mapping):
        return target
    return {**target, **extra}


def _merge_all(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """`allOf` folded into one schema (properties and required lists joined)."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


class _Generator:
    def __init__(self, rng: random.Random, root: Schema) -> None:
        self.rng = rng
        self.root = root

    def value(self, schema: Schema, depth: int) -> Any:
        if depth > MAX_DEPTH + 16:
            raise GenerationError("the schema nests too deep (a required recursive field?)")
        if schema is True or schema == {}:
            return self.rng.randint(0, 9)
        if not isinstance(schema, Mapping):
            raise GenerationError("the schema `false` admits no value")
        if "$ref" in schema:
            return self.value(_merged(resolve(str(schema["$ref"]), self.root), schema), depth)
        if "allOf" in schema:
            return self.value(_merge_all(schema), depth)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            members = list(schema["enum"])
            if not members:
                raise GenerationError("an empty `enum` admits no value")
            return self.rng.choice(members)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.value(self._alternative(schema[key], depth), depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null" or depth > MAX_DEPTH] or kind
            kind = self.rng.choice(kinds) if kinds else None
        if kind is None:
            kind = self._implied_type(schema)
        make = getattr(self, f"_{kind}", None)
        if make is None:
            raise GenerationError(f"unknown JSON Schema type {kind!r}")
        return make(schema, depth)

    def _alternative(self, options: list[Schema], depth: int) -> Schema:
        if not options:
            raise GenerationError("an empty `anyOf` admits no value")
        if depth > MAX_DEPTH:
            for option in options:
                if isinstance(option, Mapping) and option.get("type") == "null":
                    return option
        return self.rng.choice(options)

    @staticmethod
    def _implied_type(schema: Mapping[str, Any]) -> str:
        if "properties" in schema or "additionalProperties" in schema or "required" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        if "minLength" in schema or "maxLength" in schema or "pattern" in schema:
            return "string"
        if "minimum" in schema or "maximum" in schema:
            return "number"
        return "integer"

    def _null(self, schema: Mapping[str, Any], depth: int) -> None:
        return None

    def _boolean(self, schema: Mapping[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _integer(self, schema: Mapping[str, Any], depth: int) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            first, last = math.ceil(low / step), math.floor(high / step)
            if first > last:
                raise GenerationError(f"no multiple of {step} lies in [{low}, {high}]")
            return self.rng.randint(first, last) * step
        if low > high:
            raise GenerationError(f"no integer lies in [{low}, {high}]")
        return self.rng.randint(int(low), int(high))

    def _number(self, schema: Mapping[str, Any], depth: int) -> float:
        low, high = _bounds(schema, integer=False)
        if low > high:
            raise GenerationError(f"no number lies in [{low}, {high}]")
        value = self.rng.uniform(low, high)
        if not validate(value, schema):
            return value
        return (low + high) / 2

    def _string(self, schema: Mapping[str, Any], depth: int) -> str:
        fmt = schema.get("format")
        if schema.get("contentEncoding") == "base64":
            size = self.rng.randint(0, MAX_STRING)
            return base64.b64encode(self.rng.randbytes(size)).decode("ascii")
        if fmt == "date-time":
            return f"2024-01-{self.rng.randint(1, 28):02d}T{self.rng.randint(0, 23):02d}:00:00Z"
        if fmt == "date":
            return f"2024-01-{self.rng.randint(1, 28):02d}"
        if fmt == "time":
            return f"{self.rng.randint(0, 23):02d}:{self.rng.randint(0, 59):02d}:00"
        if fmt == "uuid":
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", max(low, 0) + MAX_STRING))
        if low > high:
            raise GenerationError(f"no string is {low} to {high} characters long")
        pattern = schema.get("pattern")
        text = ""
        for attempt in range(PATTERN_TRIES if isinstance(pattern, str) else 1):
            made = from_pattern(pattern, self.rng) if isinstance(pattern, str) else None
            if made is None or attempt >= PATTERN_TRIES // 2:  # the pattern alone: no luck
                size = self.rng.randint(low, high)
                made = "".join(self.rng.choice(ALPHABET) for _ in range(size))
            text = made
            if not validate(text, schema):
                return text
        return text  # a pattern this generator cannot satisfy: the best it has

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = list(schema.get("prefixItems", []))
        rest = schema.get("items", True if not prefix else False)
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, len(prefix)) + MAX_ITEMS))
        if rest is False:
            high = min(high, len(prefix))
        if depth >= MAX_DEPTH:
            high = low
        if low > high:
            raise GenerationError(f"no array has {low} to {high} items")
        size = self.rng.randint(low, high)
        items: list[Any] = []
        for i in range(size):
            sub = prefix[i] if i < len(prefix) else rest
            item = self.value(sub, depth + 1)
            if schema.get("uniqueItems"):
                for _ in range(PATTERN_TRIES):
                    if not any(type_of(item) == type_of(o) and item == o for o in items):
                        break
                    item = self.value(sub, depth + 1)
            items.append(item)
        return items

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties: Mapping[str, Schema] = schema.get("properties", {})
        out: dict[str, Any] = {}
        extra = schema.get("additionalProperties", True)
        for name in schema.get("required", ()):
            sub = properties.get(name, extra if isinstance(extra, Mapping) else True)
            out[name] = self.value(sub, depth + 1)
        if not properties and isinstance(extra, Mapping) and depth < MAX_DEPTH:
            low = int(schema.get("minProperties", 0))
            for i in range(self.rng.randint(low, max(low, 2))):
                out.setdefault(f"key{i}", self.value(extra, depth + 1))
        return out


_PARSER: Any = importlib.import_module("re._parser")  # the stdlib's regex parser (no stubs)
_MAXREPEAT: Final = int(importlib.import_module("re._constants").MAXREPEAT)
_CATEGORIES: Final = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": " -.",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
}
_PRINTABLE: Final = string.ascii_letters + string.digits + " -_."


class _Unsupported(Exception):
    pass


def from_pattern(pattern: str, rng: random.Random) -> str | None:
    """A string the regular expression `pattern` matches, built from its parse tree, or None
    for a construct this does not build (lookarounds, say). Repeats are kept short."""
    try:
        parsed = _PARSER.parse(pattern)
    except (re.error, RecursionError, ValueError):
        return None
    out: list[str] = []
    try:
        _emit(parsed, rng, out, {})
    except _Unsupported:
        return None
    return "".join(out)


def _emit(items: Iterable[Any], rng: random.Random, out: list[str], groups: dict[int, str]) -> None:
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append(rng.choice([c for c in _PRINTABLE if c != chr(arg)]))
        elif name == "ANY":
            out.append(rng.choice(ALPHABET))
        elif name == "IN":
            out.append(_from_class(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            high = low + MAX_ITEMS if high >= _MAXREPEAT else min(high, low + MAX_ITEMS)
            for _ in range(rng.randint(low, high)):
                _emit(sub, rng, out, groups)
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            group, sub = (arg[0], arg[-1]) if name == "SUBPATTERN" else (None, arg)
            start = len(out)
            _emit(sub, rng, out, groups)
            if group is not None:
                groups[group] = "".join(out[start:])
        elif name == "BRANCH":
            _emit(rng.choice(arg[1]), rng, out, groups)
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORIES.get(str(arg), ALPHABET)))
        elif name != "AT":  # anchors need no characters
            raise _Unsupported(name)


def _from_class(items: list[tuple[Any, Any]], rng: random.Random) -> str:
    """One character of a `[...]` class."""
    pool: set[str] = set()
    negate = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            pool.add(chr(arg))
        elif name == "RANGE":
            pool.update(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 255) + 1))
        elif name == "CATEGORY":
            pool.update(_CATEGORIES.get(str(arg), ""))
        else:
            raise _Unsupported(name)
    choices = sorted(set(_PRINTABLE) - pool) if negate else sorted(pool)
    if not choices:
        raise _Unsupported("an empty character class")
    return rng.choice(choices)


def _bounds(schema: Mapping[str, Any], *, integer: bool) -> tuple[float, float]:
    low: float | None = schema.get("minimum")
    high: float | None = schema.get("maximum")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(xlow, int | float) and not isinstance(xlow, bool):
        nudged = math.floor(xlow) + 1 if integer else xlow
        low = nudged if low is None else max(low, nudged)
    if isinstance(xhigh, int | float) and not isinstance(xhigh, bool):
        nudged = math.ceil(xhigh) - 1 if integer else xhigh
        high = nudged if high is None else min(high, nudged)
    if low is None and high is None:
        low, high = -UNBOUNDED, UNBOUNDED
    elif low is None:
        assert high is not None
        low = high - 2 * UNBOUNDED
    elif high is None:
        high = low + 2 * UNBOUNDED
    if integer:
        return math.ceil(low), math.floor(high)
    return float(low), float(high)


WRONG_CANDIDATES: Final[tuple[Any, ...]] = (7, "not-a-valid-value", [], {}, True, None)
"""Tried in order: the first one of a type the schema does not allow is the wrong value; failing
that, the first one the schema rejects at all (a value out of bounds)."""

_VALUE_KEYWORDS: Final = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)


_SCHEMA_MAPS: Final = frozenset({"properties", "$defs", "definitions", "patternProperties"})
"""Keywords whose value maps names (field names, say) to schemas."""


def _types_only(schema: Any) -> Any:
    """`schema` without the keywords that constrain values rather than types."""
    if isinstance(schema, list):
        return [_types_only(v) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _types_only(sub) for name, sub in value.items()}
        elif key not in _VALUE_KEYWORDS:
            out[key] = _types_only(value)
    return out


def wrong_value(schema: Schema, *, root: Schema | None = None) -> Any:
    """A value `schema` rejects: of a wrong type when the schema constrains the type, else out
    of bounds. Raises LookupError when the schema accepts every candidate (a field typed
    `Any`)."""
    root = schema if root is None else root
    loose, loose_root = _types_only(schema), _types_only(root)
    for candidate in WRONG_CANDIDATES:
        if validate(candidate, loose, root=loose_root):
            return candidate
    for candidate in WRONG_CANDIDATES:
        if validate(candidate, schema, root=root):
            return candidate
    raise LookupError("the schema accepts any value")


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


@attrs.frozen(slots=True)
class InvalidCase:
    """An action the Action schema rejects, and the field an error should name."""

    action: dict[str, Any]
    field: str
    how: str
    """What was made wrong, for people: "`delta` set to 'not-a-valid-value' (a string)"."""


def invalid_action(action_schema: Schema, valid: Mapping[str, Any]) -> InvalidCase:
    """`valid` (an action as JSON data) with one thing wrong: a required field given a value of
    the wrong type, or, when no required field can be made wrong, an unknown field (for an
    Action type that forbids them, as ecotone's `Action` does). Raises LookupError when the
    schema rejects neither."""
    top = object_schema(action_schema)
    properties: Mapping[str, Schema] = top.get("properties", {})
    for name in top.get("required", ()):
        if name not in properties:
            continue
        try:
            bad = wrong_value(properties[name], root=action_schema)
        except LookupError:
            continue
        return InvalidCase(
            action={**valid, name: bad},
            field=name,
            how=f"required field `{name}` set to {bad!r} ({_article(type_of(bad))})",
        )
    if top.get("additionalProperties", True) is False:
        return InvalidCase(
            action={**valid, UNKNOWN_FIELD: 1},
            field=UNKNOWN_FIELD,
            how=f"unknown field `{UNKNOWN_FIELD}` added",
        )
    raise LookupError(
        "the Action schema has no required field that a wrong type breaks, and it allows "
        "unknown fields: no action can be made invalid by its schema"
    )
