"""Gymnasium, both ways: `ecotone.gym.make(url)` is a `gymnasium.Env` backed by a remote
session; `ecotone serve gymnasium:ID` serves any Gymnasium env (`ecotone.plugins.gymnasium`).

    import ecotone.gym

    env = ecotone.gym.make("ws://127.0.0.1:8765")        # or "inproc://gymnasium:CartPole-v1"
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    env.close()

    envs = ecotone.gym.make_vec("ws://127.0.0.1:8765", num_envs=16)  # a gymnasium VectorEnv

Needs the `gymnasium` extra (`ecotone[gymnasium]`). See `ecotone.client.gym` for how spaces are
rebuilt from schemas.
"""

from ecotone.client.gym import (
    GYM_SPACE_KEY,
    RemoteEnv,
    SpaceError,
    describe_space,
    from_wire,
    make,
    space_from_description,
    spaces_for,
    to_jsonable,
    to_wire,
)
from ecotone.client.gym_vector import RemoteVectorEnv, make_vec

__all__ = [
    "GYM_SPACE_KEY",
    "RemoteEnv",
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
