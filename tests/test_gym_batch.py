"""`ecotone.gym.batch`: whole-batch conversions, held to the per-item ones they replace
(`from_wire` per sub-env then Gymnasium's `concatenate`; `iterate` then `to_wire`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ecotone.gym import batch
from ecotone.gym import spaces as gspaces
from tests.arrays import same

N = 5


def _leaf(space: spaces.Space[Any]) -> Any:
    return gspaces._SpaceNode(space, "test")


BIG = 2**40
NODES: dict[str, Any] = {
    "box": gspaces._FieldNode("obs", _leaf(spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32))),
    "box-int-2d": gspaces._FieldNode("obs", _leaf(spaces.Box(0, 9, shape=(2, 3), dtype=np.int64))),
    "box-scalar": gspaces._FieldNode("n", _leaf(spaces.Box(-BIG, BIG, shape=(), dtype=np.int64))),
    "discrete-start": gspaces._FieldNode("action", _leaf(spaces.Discrete(5, start=2))),
    "multidiscrete": gspaces._FieldNode("obs", _leaf(spaces.MultiDiscrete([3, 4]))),
    "multibinary": gspaces._FieldNode("obs", _leaf(spaces.MultiBinary(3))),
    "object": gspaces._ObjectNode(
        {
            "pos": _leaf(spaces.Box(-5.0, 5.0, shape=(2,), dtype=np.float64)),
            "flag": gspaces._BoolNode(),
            "pair": gspaces._TupleNode([_leaf(spaces.Discrete(3)), _leaf(spaces.Discrete(2))]),
        }
    ),
}  # fmt: skip


def _per_item(node: Any, wire: list[Any]) -> Any:
    items = [node.from_wire(w) for w in wire]
    out: Any = create_empty_array(node.space, n=len(wire))
    return concatenate(node.space, items, out)


@pytest.mark.parametrize("name", sorted(NODES))
def test_a_batch_read_whole_is_what_the_per_item_path_gives(name: str) -> None:
    node = NODES[name]
    node.space.seed(1)
    values = [node.space.sample() for _ in range(N)]
    wire = [node.to_wire(v) for v in values]
    read = batch.reader(node)
    assert read is not None
    same(read(wire), _per_item(node, wire))


@pytest.mark.parametrize("name", ["box", "box-int-2d", "discrete-start", "multibinary"])
def test_a_batch_of_actions_written_whole_is_what_the_per_item_path_gives(name: str) -> None:
    node = NODES[name]
    batched = batch_space(node.space, N)
    batched.seed(2)
    actions = batched.sample()
    write = batch.writer(node)
    assert write is not None
    assert write(actions, N) == [node.to_wire(a) for a in iterate(batched, actions)]


def test_a_discrete_action_batch_of_floats_is_truncated_as_int_would() -> None:
    write = batch.writer(NODES["discrete-start"])
    assert write is not None
    assert write(np.array([2.0, 3.7, 6.2]), 3) == [{"action": v} for v in (2, 3, 6)]


def test_nulls_for_nan_and_bad_shapes_fall_back_to_the_per_item_path() -> None:
    read = batch.reader(NODES["box"])
    assert read is not None
    nulls = [{"obs": [0.0, None, 0.5, 1.0]}]  # JSON has no nan: it arrives as null
    same(read(nulls), _per_item(NODES["box"], nulls))
    assert math.isnan(read(nulls)[0, 1])
    integers = batch.reader(NODES["box-int-2d"])
    assert integers is not None
    with pytest.raises(batch.Unbatchable):
        integers([{"obs": [[0, None, 1], [1, 2, 3]]}])
    with pytest.raises(batch.Unbatchable):
        read([{"obs": [0.0, 0.5]}])
    with pytest.raises(batch.Unbatchable):
        read([{"obs": [0.0, 0.5, 0.1, 0.2]}, {"obs": [0.0]}])
    write = batch.writer(NODES["box"])
    assert write is not None
    with pytest.raises(batch.Unbatchable):
        write(np.zeros((3, 4)), 4)


def test_spaces_with_no_batched_form_have_no_batch_functions() -> None:
    text = gspaces._FieldNode("text", gspaces._TextNode(0, 8))
    union = gspaces._UnionNode([_leaf(spaces.Discrete(2)), gspaces._NullNode()], "u")
    assert batch.reader(text) is None and batch.writer(text) is None
    assert batch.reader(union) is None
    assert batch.writer(NODES["object"]) is None  # several fields: per item
