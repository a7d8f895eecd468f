"""Gymnasium, both ways: `ecotone.gym.make(url)` is a `gymnasium.Env` backed by a remote
session; `ecotone serve gymnasium:ID` serves any Gymnasium env (`ecotone.plugins.gymnasium`).

    import ecotone.gym

    env = ecotone.gym.make("ws://127.0.0.1:8765")        # or "inproc://gymnasium:CartPole-v1"
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    env.close()

    envs = ecotone.gym.make_vec("ws://127.0.0.1:8765", num_envs=16)  # a gymnasium VectorEnv

Needs the `gymnasium` extra (`ecotone[gymnasium]`). `ecotone.gym.spaces` is the space codec
both sides share (how spaces are described in schemas and rebuilt from them); the client side
(`make`, `make_vec`, `RemoteEnv`, `RemoteVectorEnv`) is imported on first use, so the
server-side bridge loads no client code.
"""

from typing import TYPE_CHECKING, Any

from ecotone.gym.spaces import (
    GYM_SPACE_KEY,
    INT_BOUND,
    TEXT_MAX_LENGTH,
    FreeText,
    SpaceError,
    describe_space,
    from_wire,
    space_from_description,
    spaces_for,
    to_jsonable,
    to_wire,
)

if TYPE_CHECKING:
    from ecotone.gym.batched import BatchedRemoteVectorEnv
    from ecotone.gym.env import RemoteEnv, RemoteEnvState, make
    from ecotone.gym.vector import RemoteVectorEnv, make_vec

_LAZY = {
    "BatchedRemoteVectorEnv": "ecotone.gym.batched",
    "RemoteEnv": "ecotone.gym.env",
    "RemoteEnvState": "ecotone.gym.env",
    "make": "ecotone.gym.env",
    "RemoteVectorEnv": "ecotone.gym.vector",
    "make_vec": "ecotone.gym.vector",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ecotone.gym' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


__all__ = [
    "GYM_SPACE_KEY",
    "INT_BOUND",
    "TEXT_MAX_LENGTH",
    "BatchedRemoteVectorEnv",
    "FreeText",
    "RemoteEnv",
    "RemoteEnvState",
    "RemoteVectorEnv",
    "SpaceError",
    "describe_space",
    "from_wire",
    "make",
    "make_vec",
    "space_from_description",
    "spaces_for",
    "to_jsonable",
    "to_wire",
]
