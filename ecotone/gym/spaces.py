"""The space codec both sides share: Gymnasium spaces to and from JSON Schemas and wire data.

The server-side bridge (`ecotone.plugins.gymnasium`) describes a served env's spaces in its
schemas; the client side (`ecotone.gym.make`, `make_vec`) rebuilds them (`spaces_for`):

* Envs served by the Gymnasium bridge (`gymnasium:ID`, see `ecotone.plugins.gymnasium`) carry
  the exact space in an `x-gym-space` key of the `action` and `obs` field schemas, so the
  spaces equal the original env's (same class, shape, dtype, bounds, n, start, charset).
  A native env may give any field its exact space the same way (`chess-duel-indexed`'s move
  index and planes: `msgspec.Meta(extra_json_schema={"x-gym-space": {...}})`, the
  description `describe_space` writes).
* Native ecotone envs get spaces derived from their JSON Schemas, field by field (the base
  fields `metadata`, `reward`, `done`, `truncated` are left out; one field is unwrapped, several
  make a `Dict`):

  | schema                                  | space                                         |
  |-----------------------------------------|-----------------------------------------------|
  | schema                                  | space                                          |
  |-----------------------------------------|------------------------------------------------|
  | integer with minimum and maximum        | Discrete(max - min + 1, start=min)             |
  | integer, unbounded or half-bounded      | Box((), int64), a missing bound = +-2**53      |
  | number                                  | Box((), float64), a missing bound = +-inf      |
  | boolean                                 | Discrete(2) (0 = false)                        |
  | enum / Literal (any JSON values)        | Discrete(len), the index of the value          |
  | string (free-form)                      | FreeText(minLength, maxLength or 65,536)       |
  | null                                    | Discrete(1)                                    |
  | union / optional (`anyOf`, `oneOf`)     | OneOf(branches): values are (branch, value)    |
  | fixed-length (nested) array of numbers  | Box of that shape: float64 (int64 if all int)  |
  | other fixed-length array / tuple        | Tuple                                          |
  | variable-length array                   | Sequence(item space): values are tuples        |
  | object (Struct)                         | Dict                                           |
  | object with free-form keys (a dict)     | SpaceError naming the field                    |

`FreeText` is a `gymnasium.spaces.Text` that holds any string of its lengths (JSON strings may
use any character) and samples printable ASCII. The bound of an unbounded integer, 2**53, is
the largest integer every JSON reader keeps exact; a value the server sends beyond int64 is a
SpaceError naming the field, not an OverflowError. An optional value `X | None` is
`OneOf([X, Discrete(1)])`: `(0, x)` or `(1, 0)`; an env author who wants plainer spaces gives
fields bounds (`msgspec.Meta(ge=, le=, max_length=)`) and defaults instead of None.

Observations come back as numpy values of the space's dtype (Box, MultiDiscrete and
MultiBinary as arrays, Discrete as `np.int64`, Dict as dict, Tuple and Sequence as tuples,
Text as str). The info dict is the observation's `info` (bridge) or its `metadata` (native
envs), as JSON data. Rendering is not available remotely (`render_mode` is None).
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ecotone.specs import EnvInfo

try:
    import numpy as np
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ecotone.gym needs gymnasium and numpy: install the extra, `pip install "
        f"'ecotone[gymnasium]'` ({exc})"
    ) from exc

GYM_SPACE_KEY = "x-gym-space"
"""The JSON Schema key under which the bridge records a field's exact Gymnasium space."""

INT_BOUND = 2**53
"""The bound given to an integer field with no minimum (maximum): +-2**53."""
TEXT_MAX_LENGTH = 65_536
"""The max_length of a free-form string field with no `maxLength`."""
ACTION_BASE_FIELDS = frozenset({"metadata"})
OBSERVATION_BASE_FIELDS = frozenset({"reward", "done", "truncated", "metadata"})
RESERVED_RESET_OPTIONS = frozenset({"seed", "episode_id", "timeout", "call_timeout"})


class SpaceError(ValueError):
    """A Gymnasium space with no schema counterpart, or a schema field with no space."""


# --- spaces <-> JSON descriptions ------------------------------------------------------------


def _number(value: Any) -> Any:
    """A numpy or Python number as JSON: non-finite floats become "inf", "-inf", "nan"."""
    item = value.item() if isinstance(value, np.generic | np.ndarray) else value
    if isinstance(item, float) and not math.isfinite(item):
        return "nan" if math.isnan(item) else ("inf" if item > 0 else "-inf")
    return item


def _numbers(array: np.ndarray[Any, Any]) -> Any:
    """An array of bounds as JSON: one number when all are equal, else nested lists."""
    flat = array.reshape(-1)
    if flat.size and bool(np.all(flat == flat[0])):
        return _number(flat[0])
    return _nested(array)


def _nested(array: Any) -> Any:
    if isinstance(array, np.ndarray) and array.ndim:
        return [_nested(sub) for sub in array]
    return _number(array)


def _unnumbers(data: Any) -> Any:
    if isinstance(data, str):
        return float(data)
    if isinstance(data, list):
        return [_unnumbers(x) for x in data]
    return data


def _bound(data: Any, dtype: np.dtype[Any]) -> Any:
    """A Box bound for the constructor: a scalar as is (Gymnasium maps +-inf to the integer
    limits, keeping the side unbounded), an array in `dtype`; an integer array's infinite
    items become the dtype's limits (Gymnasium cannot cast those)."""
    value = _unnumbers(data)
    if not isinstance(value, list):
        return value
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        array = np.asarray(value, dtype=object)
        array[array == math.inf] = int(info.max)
        array[array == -math.inf] = int(info.min)
        return array.astype(dtype)
    return np.asarray(value, dtype=dtype)


def box(shape: tuple[int, ...], dtype: np.dtype[Any], low: Any, high: Any) -> spaces.Box:
    """A Box from JSON bounds: numbers or nested lists, "inf"/"-inf" (or floats) unbounded."""
    lo, hi = _bound(low, dtype), _bound(high, dtype)
    if dtype.kind == "b":  # Gymnasium takes a bool Box's bounds as arrays only
        lo, hi = (np.broadcast_to(np.asarray(b, dtype=dtype), shape).copy() for b in (lo, hi))
    return spaces.Box(low=lo, high=hi, shape=shape, dtype=dtype)


def describe_space(space: spaces.Space[Any], where: str = "space") -> dict[str, Any]:
    """A JSON-safe description of `space` that `space_from_description` turns back into an
    equal space. Raises SpaceError (naming `where`) for spaces it cannot describe."""
    if isinstance(space, spaces.Box):
        assert space.dtype is not None
        low = np.where(space.bounded_below, space.low.astype(object), -math.inf)
        high = np.where(space.bounded_above, space.high.astype(object), math.inf)
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.name,
            "low": _numbers(low),
            "high": _numbers(high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": space.dtype.name,
        }
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {
            "type": "MultiBinary",
            "n": [int(x) for x in n] if isinstance(n, Sequence | np.ndarray) else int(n),
        }
    if isinstance(space, spaces.Text):
        return {
            "type": "Text",
            "min_length": int(space.min_length),
            "max_length": int(space.max_length),
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, spaces.Dict):
        for key in space.spaces:
            if not isinstance(key, str):
                raise SpaceError(f"{where}: Dict space key {key!r} is not a string")
        return {
            "type": "Dict",
            "spaces": [[k, describe_space(s, f"{where}[{k!r}]")] for k, s in space.spaces.items()],
        }
    if isinstance(space, spaces.Tuple):
        return {
            "type": "Tuple",
            "spaces": [describe_space(s, f"{where}[{i}]") for i, s in enumerate(space.spaces)],
        }
    raise SpaceError(
        f"{where}: {type(space).__name__} spaces are not supported (supported: Box, Discrete, "
        "MultiDiscrete, MultiBinary, Text, Dict, Tuple)"
    )


def space_from_description(desc: Mapping[str, Any]) -> spaces.Space[Any]:
    """The space `describe_space` described."""
    kind = desc.get("type")
    if kind == "Box":
        shape = tuple(int(n) for n in desc["shape"])
        return box(shape, np.dtype(desc["dtype"]), desc["low"], desc["high"])
    if kind == "Discrete":
        return spaces.Discrete(int(desc["n"]), start=int(desc.get("start", 0)))
    if kind == "MultiDiscrete":
        dtype = np.dtype(desc.get("dtype", "int64"))
        return spaces.MultiDiscrete(
            np.asarray(desc["nvec"], dtype=dtype),
            dtype=dtype,
            start=np.asarray(desc.get("start", 0), dtype=dtype),
        )
    if kind == "MultiBinary":
        n = desc["n"]
        return spaces.MultiBinary(tuple(n) if isinstance(n, list) else int(n))
    if kind == "Text":
        return spaces.Text(
            int(desc["max_length"]), min_length=int(desc["min_length"]), charset=desc["charset"]
        )
    if kind == "Dict":
        return spaces.Dict({k: space_from_description(s) for k, s in desc["spaces"]})
    if kind == "Tuple":
        return spaces.Tuple([space_from_description(s) for s in desc["spaces"]])
    raise SpaceError(f"unknown space description {dict(desc)!r}")


# --- values <-> wire data -----------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """`value` as JSON data: arrays to (nested) lists, numpy scalars to Python, mappings to
    dicts with string keys, tuples and sets to lists; anything else to its repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


def _tolist(value: Any) -> Any:
    if type(value) is np.ndarray:
        return value.tolist()
    return np.asarray(value).tolist()


def _jsonable_info(value: Any) -> Any:
    return to_jsonable(value) if value else {}


def wire_writer(space: spaces.Space[Any]) -> Callable[[Any], Any]:
    """`to_wire` for one space, decided once: the function a hot loop calls per value."""
    if isinstance(space, spaces.Discrete):
        return int
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        return _tolist
    if isinstance(space, spaces.Text):
        return str
    return functools.partial(to_wire, space)


def wire_reader(space: spaces.Space[Any]) -> Callable[[Any], Any]:
    """`from_wire` for one space, decided once."""
    if isinstance(space, spaces.Discrete):
        return np.int64
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        assert space.dtype is not None
        return functools.partial(_array, dtype=space.dtype)
    if isinstance(space, spaces.Text):
        return str
    return functools.partial(from_wire, space)


def info_writer() -> Callable[[Any], Any]:
    """`to_jsonable` for an info dict, with the usual empty one taken at once."""
    return _jsonable_info


def to_wire(space: spaces.Space[Any], value: Any) -> Any:
    """A value of `space` as the data the bridge's schemas describe."""
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        return np.asarray(value).tolist()
    if isinstance(space, spaces.Text):
        return str(value)
    if isinstance(space, spaces.Dict):
        return {k: to_wire(s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return [to_wire(s, v) for s, v in zip(space.spaces, value, strict=True)]
    return to_jsonable(value)


def _array(data: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    try:
        return np.asarray(data, dtype=dtype)
    except TypeError:  # JSON has no inf/nan: msgspec writes them as null
        return np.asarray(_nulls_to_nan(data), dtype=dtype)


def _nulls_to_nan(data: Any) -> Any:
    if data is None:
        return math.nan
    if isinstance(data, list):
        return [_nulls_to_nan(x) for x in data]
    return data


def from_wire(space: spaces.Space[Any], data: Any) -> Any:
    """Wire data back to a value of `space`, with the space's numpy dtype."""
    if isinstance(space, spaces.Discrete):
        return np.int64(data)
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        assert space.dtype is not None
        return _array(data, space.dtype)
    if isinstance(space, spaces.Text):
        return str(data)
    if isinstance(space, spaces.Dict):
        return {k: from_wire(s, data[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(from_wire(s, d) for s, d in zip(space.spaces, data, strict=True))
    return data


# --- schemas -> spaces (native envs) ----------------------------------------------------------


class FreeText(spaces.Text):
    """A Text space of any characters (a JSON string's): `contains` checks only the type and
    the length; `sample` draws printable ASCII."""

    def __init__(self, max_length: int = TEXT_MAX_LENGTH, *, min_length: int = 0) -> None:
        super().__init__(max_length, min_length=min_length, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText({self.min_length}, {self.max_length})"


class _Node(Protocol):
    """A space plus the conversions between its values and an env's wire data."""

    space: spaces.Space[Any]

    def to_wire(self, value: Any) -> Any: ...
    def from_wire(self, data: Any) -> Any: ...
    def accepts(self, data: Any) -> bool:
        """Whether `data` has this node's JSON shape (picks a union's branch)."""
        ...


def _is_number(data: Any) -> bool:
    return isinstance(data, int | float) and not isinstance(data, bool)


class _SpaceNode:
    def __init__(self, space: spaces.Space[Any], where: str = "") -> None:
        self.space = space
        self.where = where

    def to_wire(self, value: Any) -> Any:
        return to_wire(self.space, value)

    def from_wire(self, data: Any) -> Any:
        try:
            return from_wire(self.space, data)
        except OverflowError:
            raise SpaceError(
                f"{self.where}: {data!r} does not fit the space's dtype ({self.space})"
            ) from None

    def accepts(self, data: Any) -> bool:
        space = self.space
        if isinstance(space, spaces.Discrete):
            return isinstance(data, int) and not isinstance(data, bool)
        if isinstance(space, spaces.Box):
            return isinstance(data, list) if space.shape else _is_number(data)
        if isinstance(space, spaces.Text):
            return isinstance(data, str)
        if isinstance(space, spaces.Dict):
            return isinstance(data, dict)
        if isinstance(space, spaces.Tuple | spaces.MultiDiscrete | spaces.MultiBinary):
            return isinstance(data, list)
        return True


class _TextNode:
    def __init__(self, min_length: int, max_length: int) -> None:
        self.space: spaces.Space[Any] = FreeText(max_length, min_length=min_length)

    def to_wire(self, value: Any) -> Any:
        return str(value)

    def from_wire(self, data: Any) -> Any:
        return str(data)

    def accepts(self, data: Any) -> bool:
        return isinstance(data, str)


class _NullNode:
    def __init__(self) -> None:
        self.space: spaces.Space[Any] = spaces.Discrete(1)

    def to_wire(self, value: Any) -> Any:
        return None

    def from_wire(self, data: Any) -> Any:
        return np.int64(0)

    def accepts(self, data: Any) -> bool:
        return data is None


class _UnionNode:
    """`anyOf` / `oneOf`: a OneOf space whose values are (branch index, branch value)."""

    def __init__(self, branches: Sequence[_Node], where: str) -> None:
        self.branches = list(branches)
        self.where = where
        self.space: spaces.Space[Any] = spaces.OneOf([b.space for b in self.branches])

    def to_wire(self, value: Any) -> Any:
        index, inner = value
        return self.branches[int(index)].to_wire(inner)

    def from_wire(self, data: Any) -> Any:
        for index, branch in enumerate(self.branches):
            if branch.accepts(data):
                return np.int64(index), branch.from_wire(data)
        raise SpaceError(f"{self.where}: {data!r} matches none of the union's branches")

    def accepts(self, data: Any) -> bool:
        return any(b.accepts(data) for b in self.branches)


class _SequenceNode:
    """A variable-length array: a Sequence space whose values are tuples."""

    def __init__(self, item: _Node) -> None:
        self.item = item
        self.space: spaces.Space[Any] = spaces.Sequence(item.space)

    def to_wire(self, value: Any) -> Any:
        return [self.item.to_wire(v) for v in value]

    def from_wire(self, data: Any) -> Any:
        return tuple(self.item.from_wire(d) for d in data)

    def accepts(self, data: Any) -> bool:
        return isinstance(data, list)


class _EnumNode:
    def __init__(self, values: Sequence[Any]) -> None:
        self.values = list(values)
        self.space: spaces.Space[Any] = spaces.Discrete(len(self.values))

    def to_wire(self, value: Any) -> Any:
        return self.values[int(value)]

    def from_wire(self, data: Any) -> Any:
        return np.int64(self.values.index(data))

    def accepts(self, data: Any) -> bool:
        return data in self.values


class _BoolNode:
    def __init__(self) -> None:
        self.space: spaces.Space[Any] = spaces.Discrete(2)

    def to_wire(self, value: Any) -> Any:
        return bool(value)

    def from_wire(self, data: Any) -> Any:
        return np.int64(bool(data))

    def accepts(self, data: Any) -> bool:
        return isinstance(data, bool)


class _ObjectNode:
    def __init__(self, fields: Mapping[str, _Node]) -> None:
        self.fields = dict(fields)
        self.space: spaces.Space[Any] = spaces.Dict({k: n.space for k, n in self.fields.items()})

    def to_wire(self, value: Any) -> Any:
        return {k: n.to_wire(value[k]) for k, n in self.fields.items()}

    def from_wire(self, data: Any) -> Any:
        return {k: n.from_wire(data[k]) for k, n in self.fields.items()}

    def accepts(self, data: Any) -> bool:
        return isinstance(data, dict) and all(k in data for k in self.fields)


class _TupleNode:
    def __init__(self, items: Sequence[_Node]) -> None:
        self.items = list(items)
        self.space: spaces.Space[Any] = spaces.Tuple([n.space for n in self.items])

    def to_wire(self, value: Any) -> Any:
        return [n.to_wire(v) for n, v in zip(self.items, value, strict=True)]

    def from_wire(self, data: Any) -> Any:
        return tuple(n.from_wire(d) for n, d in zip(self.items, data, strict=True))

    def accepts(self, data: Any) -> bool:
        return isinstance(data, list) and len(data) == len(self.items)


class _FieldNode:
    """The one field of an action or observation, unwrapped: the space is the field's."""

    def __init__(self, name: str, child: _Node) -> None:
        self.name = name
        self.child = child
        self.space = child.space

    def to_wire(self, value: Any) -> Any:
        return {self.name: self.child.to_wire(value)}

    def from_wire(self, data: Any) -> Any:
        return self.child.from_wire(data[self.name])

    def accepts(self, data: Any) -> bool:
        return isinstance(data, dict) and self.name in data


_REF = re.compile(r"^#/\$defs/(?P<name>.+)$")


class _SchemaReader:
    def __init__(self, schema: Mapping[str, Any], env: str, what: str) -> None:
        self.defs: Mapping[str, Any] = schema.get("$defs", {})
        self.env = env
        self.what = what

    def where(self, field: str) -> str:
        return f"env {self.env!r}: {self.what} field `{field}`"

    def fail(self, field: str, why: str) -> SpaceError:
        return SpaceError(
            f"env {self.env!r}: {self.what} field `{field}` ({why}) cannot be a Gymnasium space"
        )

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema
        match = _REF.match(ref)
        if match is None or match["name"] not in self.defs:
            raise SpaceError(f"env {self.env!r}: unresolvable $ref {ref!r} in its schema")
        merged = dict(self.resolve(self.defs[match["name"]]))
        merged.update((k, v) for k, v in schema.items() if k != "$ref")
        return merged

    def scalar(self, schema: Mapping[str, Any]) -> tuple[str, float, float] | None:
        """(kind, low, high) of a number or integer schema, with +-inf for missing bounds."""
        kind = schema.get("type")
        if kind not in ("integer", "number") or "enum" in schema or "const" in schema:
            return None
        low, high = -math.inf, math.inf
        if "minimum" in schema:
            low = float(schema["minimum"])
        if "maximum" in schema:
            high = float(schema["maximum"])
        step = 1 if kind == "integer" else 0
        if "exclusiveMinimum" in schema:
            low = float(schema["exclusiveMinimum"]) + step
        if "exclusiveMaximum" in schema:
            high = float(schema["exclusiveMaximum"]) - step
        return str(kind), low, high

    def fixed_items(self, schema: Mapping[str, Any], field: str) -> list[Mapping[str, Any]] | None:
        """The item schemas of a fixed-length array schema, or None for another schema (a
        variable-length array included)."""
        if schema.get("type") != "array":
            return None
        if "prefixItems" in schema:
            if schema.get("items") is not False:
                raise self.fail(field, "a tuple with extra items")
            return [self.resolve(s) for s in schema["prefixItems"]]
        n, m = schema.get("minItems"), schema.get("maxItems")
        if n is None or n != m or not isinstance(schema.get("items"), Mapping):
            return None
        return [self.resolve(schema["items"])] * int(n)

    def numeric_array(
        self, schema: Mapping[str, Any], field: str
    ) -> tuple[tuple[int, ...], list[tuple[str, float, float]]] | None:
        """Shape and per-element (kind, low, high) of a (nested) fixed array of numbers."""
        items = self.fixed_items(schema, field)
        if items is None:
            one = self.scalar(schema)
            return None if one is None else ((), [one])
        parts = [self.numeric_array(s, field) for s in items]
        if not parts or any(p is None for p in parts):
            return None
        shapes = {p[0] for p in parts if p is not None}
        if len(shapes) != 1:
            return None
        (inner,) = shapes
        return (len(items), *inner), [e for p in parts if p is not None for e in p[1]]

    def node(self, raw: Mapping[str, Any], field: str) -> _Node:
        schema = self.resolve(raw)
        if GYM_SPACE_KEY in schema:
            return _SpaceNode(space_from_description(schema[GYM_SPACE_KEY]), self.where(field))
        branches = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(branches, list) and branches:
            return _UnionNode(
                [self.node(b, f"{field}|{i}") for i, b in enumerate(branches)],
                f"env {self.env!r}: {self.what} field `{field}`",
            )
        if "enum" in schema:
            return _EnumNode(schema["enum"])
        if "const" in schema:
            return _EnumNode([schema["const"]])
        kind = schema.get("type")
        one = self.scalar(schema)
        if one is not None:
            _, low, high = one
            if kind == "integer" and math.isfinite(low) and math.isfinite(high):
                return _SpaceNode(
                    spaces.Discrete(int(high - low + 1), start=int(low)), self.where(field)
                )
            return _SpaceNode(_box((), [one]), self.where(field))
        if kind == "boolean":
            return _BoolNode()
        if kind == "null":
            return _NullNode()
        if kind == "string":
            length = schema.get("maxLength", TEXT_MAX_LENGTH)
            return _TextNode(int(schema.get("minLength", 0)), int(length))
        if kind == "array":
            numeric = self.numeric_array(schema, field)
            if numeric is not None:
                return _SpaceNode(_box(*numeric), self.where(field))
            items = self.fixed_items(schema, field)
            if items is None:
                item = schema.get("items")
                if not isinstance(item, Mapping):
                    raise self.fail(field, "an array of items of no one schema")
                return _SequenceNode(self.node(item, f"{field}[]"))
            return _TupleNode([self.node(s, f"{field}.{i}") for i, s in enumerate(items)])
        if kind == "object" and isinstance(schema.get("properties"), Mapping):
            return _ObjectNode(
                {k: self.node(s, f"{field}.{k}") for k, s in schema["properties"].items()}
            )
        if kind == "object":
            raise self.fail(field, "an object with free-form keys")
        raise self.fail(field, f"schema {dict(schema)!r}")

    def top(self, schema: Mapping[str, Any], skip: frozenset[str]) -> _Node:
        schema = self.resolve(schema)
        props: Mapping[str, Any] = schema.get("properties", {})
        fields = {k: v for k, v in props.items() if k not in skip}
        if not fields:
            raise SpaceError(f"env {self.env!r}: its {self.what} has no fields to make a space of")
        if len(fields) == 1:
            ((name, sub),) = fields.items()
            return _FieldNode(name, self.node(sub, name))
        return _ObjectNode({k: self.node(v, k) for k, v in fields.items()})


def _box(shape: tuple[int, ...], elements: Sequence[tuple[str, float, float]]) -> spaces.Box:
    integers = all(kind == "integer" for kind, _, _ in elements)
    if integers:  # an unbounded integer gets the documented bound, not int64's limits
        elements = [
            (kind, max(low, -INT_BOUND), min(high, INT_BOUND)) for kind, low, high in elements
        ]
    dtype: np.dtype[Any] = np.dtype(np.int64 if integers else np.float64)

    def bounds(values: list[float]) -> Any:
        items = [int(v) if integers and math.isfinite(v) else v for v in values]
        if len(set(values)) == 1:
            return items[0]
        return np.asarray(items, dtype=object).reshape(shape).tolist()

    low = bounds([lo for _, lo, _ in elements])
    high = bounds([hi for _, _, hi in elements])
    return box(shape, dtype, low, high)


def _nodes(info: EnvInfo) -> tuple[_Node, _Node, bool]:
    """(action node, observation node, served by the bridge) for an env's schemas."""
    obs_props: Mapping[str, Any] = info.observation_schema.get("properties", {})
    bridged = GYM_SPACE_KEY in obs_props.get("obs", {})
    obs_skip = OBSERVATION_BASE_FIELDS | {"info"} if bridged else OBSERVATION_BASE_FIELDS
    action = _SchemaReader(info.action_schema, info.name, "action").top(
        info.action_schema, ACTION_BASE_FIELDS
    )
    observation = _SchemaReader(info.observation_schema, info.name, "observation").top(
        info.observation_schema, obs_skip
    )
    return action, observation, bridged


def spaces_for(info: EnvInfo) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """(action_space, observation_space) of an env, from its `describe()` answer."""
    action, observation, _ = _nodes(info)
    return action.space, observation.space


__all__ = [
    "GYM_SPACE_KEY",
    "INT_BOUND",
    "TEXT_MAX_LENGTH",
    "FreeText",
    "SpaceError",
    "describe_space",
    "from_wire",
    "space_from_description",
    "spaces_for",
    "to_jsonable",
    "to_wire",
]
