"""Whole batches between wire data and Gymnasium's batched spaces, without a Python object per
sub-env where the space allows it.

`ecotone.gym.make_vec` steps N sub-envs at once: the N observations arrive as N wire values
(decoded by msgspec, in C), and the N actions leave as N wire values. Converting them one by
one (`from_wire` per sub-env, then `gymnasium.vector.utils.concatenate`) costs more than the
network. Here a node of the space tree (`ecotone.gym.spaces._nodes`) is compiled once into a
function over a whole batch:

* observations: `reader(node)` takes the list of N wire values and returns the batched value
  (an array of shape `(N, *shape)` for a Box, a dict of batched values for a Dict space, ...)
  built by one `numpy.asarray` per leaf;
* actions: `writer(node)` takes a batched action and returns the N wire values, by one
  `tolist()` per leaf.

Nodes with no batched form (Text, Sequence, unions, enums) give None: the caller converts item
by item as before. A batch whose data does not have the space's shape is also handed back to
the per-item path (`Unbatchable`), which reports what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from ecotone.gym import spaces as gspaces

Reader = Callable[[list[Any]], Any]
Writer = Callable[[Any, int], list[Any]]


class Unbatchable(ValueError):
    """This batch cannot be converted whole (a value of the wrong shape, a null where the
    dtype has no nan): convert it item by item instead."""


def _leaf_reader(space: spaces.Space[Any]) -> Reader | None:
    if isinstance(space, spaces.Discrete):
        dtype: np.dtype[Any] = np.dtype(space.dtype or np.int64)

        def discrete(column: list[Any]) -> Any:
            try:
                return np.asarray(column, dtype=dtype)
            except (TypeError, ValueError, OverflowError) as exc:
                raise Unbatchable(str(exc)) from None

        return discrete
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        assert space.dtype is not None
        dtype = np.dtype(space.dtype)
        shape = tuple(space.shape)

        def box(column: list[Any]) -> Any:
            try:
                array = np.asarray(column, dtype=dtype)
            except (TypeError, ValueError, OverflowError) as exc:
                raise Unbatchable(str(exc)) from None  # nulls for nan, ragged lists, ...
            if array.shape[1:] != shape:
                raise Unbatchable(f"a value of shape {array.shape[1:]} for {shape}")
            return array

        return box
    return None


def reader(node: Any) -> Reader | None:
    """A function from N wire values of `node` to its batched value, or None."""
    if isinstance(node, gspaces._FieldNode):
        child = reader(node.child)
        if child is None:
            return None
        name = node.name
        return lambda batch: child([data[name] for data in batch])
    if isinstance(node, gspaces._SpaceNode):
        return _leaf_reader(node.space)
    if isinstance(node, gspaces._BoolNode):
        return lambda batch: np.asarray(batch, dtype=bool).astype(np.int64)
    if isinstance(node, gspaces._ObjectNode):
        fields = {k: reader(n) for k, n in node.fields.items()}
        if any(r is None for r in fields.values()):
            return None

        def obj(batch: list[Any]) -> Any:
            return {k: r([data[k] for data in batch]) for k, r in fields.items()}  # type: ignore[misc]

        return obj
    if isinstance(node, gspaces._TupleNode):
        items = [reader(n) for n in node.items]
        if any(r is None for r in items):
            return None

        def tup(batch: list[Any]) -> Any:
            return tuple(r([data[i] for data in batch]) for i, r in enumerate(items))  # type: ignore[misc]

        return tup
    return None


def _leaf_writer(space: spaces.Space[Any]) -> Writer | None:
    if isinstance(space, spaces.Discrete):

        def discrete(batch: Any, n: int) -> list[Any]:
            array = np.asarray(batch)
            if array.shape != (n,):
                raise Unbatchable(f"actions of shape {array.shape} for {n} sub-envs")
            if array.dtype.kind != "i":
                array = array.astype(np.int64)  # as `int(value)` does per item
            out: list[Any] = array.tolist()
            return out

        return discrete
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        shape = tuple(space.shape)

        def box(batch: Any, n: int) -> list[Any]:
            array = np.asarray(batch)
            if array.shape != (n, *shape):
                raise Unbatchable(f"actions of shape {array.shape} for {(n, *shape)}")
            out: list[Any] = array.tolist()
            return out

        return box
    return None


def writer(node: Any) -> Writer | None:
    """A function from a batched action of `node` (and N) to the N wire values, or None."""
    if isinstance(node, gspaces._FieldNode):
        child = _leaf_writer(node.space) if isinstance(node.child, gspaces._SpaceNode) else None
        if child is None:
            return None
        name = node.name
        return lambda batch, n: [{name: value} for value in child(batch, n)]
    return None
