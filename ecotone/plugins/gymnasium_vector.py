"""`gymnasium-vector:ID`: a Gymnasium env served as a batch, one `SyncVectorEnv` per session.

    ecotone serve gymnasium-vector:CartPole-v1
    envs = ecotone.gym.make_vec(["ws://127.0.0.1:8765", "ws://127.0.0.1:8766"], 64)

`gymnasium:ID` serves one env per session, and `ecotone.gym.make_vec` steps N of them with
one `step_many`: every sub-env costs the server a session's bookkeeping and an observation of
its own. Here a session is a whole batch: its first reset makes Gymnasium's own
`SyncVectorEnv` of `num_envs` copies (a reset option), each step takes the batch's actions and
answers the batch's observations, `rewards`, `terminations` and `truncations` (Gymnasium's
vector names: `done` and `truncated` are the session's own, always false; `reward` is the
batch's sum) as binary arrays (C-order bytes: a MessagePack bin, a base64 string in JSON).
`make_vec` sees the form in the env's schema and
gives each server one session holding its share of the sub-envs, so N sub-envs over S servers
cost S requests per step, and each server steps its batch in one tight loop (EnvPool's
design). The batch autoresets as Gymnasium's NEXT_STEP does, inside the session; the
session's own episode never ends.

Reset options: `num_envs` (1-1024; a change makes a new batch), `seeds` (one per sub-env, as
Gymnasium's `reset(seed=[...])`; or `seed` for seed+i), `options` (the batch's reset options,
`reset_mask` excluded). Observation spaces must batch into one array (Box, Discrete,
MultiDiscrete, MultiBinary); action spaces are those `gymnasium:` takes but Dict and Tuple.
A wrong number of actions, or one outside the space, is `invalid_action` for the whole batch
(the field names the sub-env: `actions.3`).
"""

from __future__ import annotations

import functools
import itertools
import os
import random
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import msgspec

import ecotone
from ecotone.plugins.gymnasium import (
    GymnasiumBridgeError,
    _inline,
    _space_type,
    _stem,
    loaded_episode,
    make_probe,
    parse_name,
    saved_episode,
    snapshot_identity,
)

if TYPE_CHECKING:
    from gymnasium import spaces

PREFIX = "gymnasium-vector:"
MAX_NUM_ENVS = 1024
GYM_VECTOR_KEY = "x-gym-vector"
"""Schema key of the vector form: on the observation's `obs` field, the single observation
and action spaces (`ecotone.gym.spaces.describe_space`) and the arrays' dtypes."""


def _array_space(space: spaces.Space[Any]) -> bool:
    from gymnasium import spaces

    return isinstance(
        space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary
    )


class GymnasiumVectorEnv(ecotone.Environment[Any, Any, Any]):
    """Base of the classes the vector form builds: one `SyncVectorEnv` per session (its
    lean NEXT_STEP form, `ecotone.plugins.gymnasium_batch.NextStepBatch`)."""

    gym_id: ClassVar[str] = ""
    make_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self._venv: Any = None
        self._state: Any = self.state_type()

    def _batch(self, num_envs: int) -> Any:
        import gymnasium

        from ecotone.plugins.gymnasium_batch import NextStepBatch

        if self._venv is not None and self._venv.num_envs == num_envs:
            return self._venv
        if self._venv is not None:
            self._venv.close()
            self._venv = None
        make = functools.partial(gymnasium.make, self.gym_id, **self.make_kwargs)
        self._venv = NextStepBatch([make] * num_envs)
        return self._venv

    def _observation(
        self, obs: Any, rewards: Any, terminated: Any, truncated: Any, infos: Any, reward: Any
    ) -> Any:
        import numpy as np

        from ecotone.gym.spaces import to_jsonable

        return self.observation_type(
            reward=reward,
            obs=np.ascontiguousarray(obs).tobytes(),
            rewards=np.ascontiguousarray(rewards, dtype=np.float64).tobytes(),
            terminations=np.ascontiguousarray(terminated, dtype=np.bool_).tobytes(),
            truncations=np.ascontiguousarray(truncated, dtype=np.bool_).tobytes(),
            infos=to_jsonable(infos) if infos else {},
        )

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        num_envs: int = 1,
        seeds: list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> Any:
        import numpy as np

        if not isinstance(num_envs, int) or not 1 <= num_envs <= MAX_NUM_ENVS:
            raise ValueError(f"num_envs must be an int from 1 to {MAX_NUM_ENVS}, not {num_envs!r}")
        if seeds is not None and len(seeds) != num_envs:
            raise ValueError(f"{len(seeds)} seeds given for {num_envs} sub-envs")
        if options and "reset_mask" in options:
            raise ValueError("the vector form resets its whole batch: no reset_mask")
        venv = self._batch(num_envs)
        obs, infos = venv.reset(seed=seeds if seeds is not None else seed, options=options)
        self._state = self.state_type(episode_id=episode_id or os.urandom(16).hex())
        zeros = np.zeros(num_envs)
        return self._observation(obs, zeros, zeros, zeros, infos, None)

    def step(self, action: Any) -> Any:
        import numpy as np

        venv = self._venv
        actions = action.actions
        if venv is None:  # pragma: no cover - the kernel steps only after a reset
            raise ecotone.InvalidAction("reset first", field="actions")
        if len(actions) != venv.num_envs:
            raise ecotone.InvalidAction(
                f"{len(actions)} actions for a batch of {venv.num_envs} sub-envs",
                field="actions",
                given=len(actions),
                num_envs=venv.num_envs,
            )
        batch = np.asarray(actions, dtype=venv.single_action_space.dtype)
        obs, rewards, terminated, truncated, infos = venv.step(batch)
        self._state.step_count += 1
        total = float(np.sum(rewards))  # the session's reward: the batch's
        return self._observation(obs, rewards, terminated, truncated, infos, total)

    def sample_action(self, rng: random.Random) -> Any:
        """A random valid action: one per sub-env of the batch, drawn from the action space
        seeded from `rng`."""
        from ecotone.gym.spaces import to_wire

        space = self._venv.single_action_space if self._venv is not None else None
        if space is None:  # before the first reset: a batch of one
            import gymnasium

            probe = gymnasium.make(self.gym_id, **self.make_kwargs)
            space = probe.action_space
            probe.close()
        space.seed(rng.getrandbits(32))
        count = self._venv.num_envs if self._venv is not None else 1
        actions = [to_wire(space, space.sample()) for _ in range(count)]
        return msgspec.convert({"actions": actions}, self.action_type)

    def state(self) -> Any:
        return self._state

    def snapshot(self) -> bytes:
        """The batch (every sub-env as `gymnasium.make` wrapped it, random generators and
        wrappers' state included) and the State, pickled: the server keeps it, and seals
        what leaves it."""
        return saved_episode(self._venv, self._state)

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id` (the batch it replaces is closed)."""
        venv, self._state = loaded_episode(data, self.state_type, episode_id)
        old, self._venv = self._venv, venv
        if old is not None:
            old.close()

    def close(self) -> None:
        if self._venv is not None:
            self._venv.close()
            self._venv = None


def build_vector_env_class(name: str) -> type[GymnasiumVectorEnv]:
    """The env class serving `gymnasium-vector:ID[?kwargs]` (uncached)."""
    if not name.startswith(PREFIX):
        raise GymnasiumBridgeError(f"{name!r} does not start with {PREFIX!r}")
    single = "gymnasium:" + name[len(PREFIX) :]
    gym_id, kwargs = parse_name(single)
    probe = make_probe(name, gym_id, kwargs)
    import numpy as np

    from ecotone.gym.spaces import SpaceError, describe_space

    try:
        action_space, obs_space, spec = probe.action_space, probe.observation_space, probe.spec
        sample = np.asarray(probe.observation_space.sample())
    finally:
        probe.close()
    if not _array_space(obs_space):
        raise GymnasiumBridgeError(
            f"{name}: a {type(obs_space).__name__} observation space does not batch into one "
            f"array; serve {single} instead"
        )
    if not _array_space(action_space):
        raise GymnasiumBridgeError(
            f"{name}: a {type(action_space).__name__} action space has no batch form; "
            f"serve {single} instead"
        )
    stem = _stem(gym_id) + "Vector"
    names = (f"{stem}{i}" for i in itertools.count(1))
    action_t = _space_type(action_space, f"{name}: action space", names)
    try:
        marker = {
            "observation_space": describe_space(obs_space, f"{name}: observation space"),
            "action_space": describe_space(action_space, f"{name}: action space"),
            "obs_dtype": sample.dtype.str,
        }
    except SpaceError as exc:
        raise GymnasiumBridgeError(str(exc)) from exc
    action_type = msgspec.defstruct(
        f"{stem}Action",
        [("actions", list[action_t])],  # type: ignore[valid-type]
        bases=(ecotone.Action,),
        kw_only=True,
        forbid_unknown_fields=True,
    )
    observation_type = msgspec.defstruct(
        f"{stem}Observation",
        [
            ("obs", Annotated[bytes, msgspec.Meta(extra_json_schema={GYM_VECTOR_KEY: marker})]),
            ("rewards", bytes),
            ("terminations", bytes),
            ("truncations", bytes),
            ("infos", dict[str, Any], msgspec.field(default_factory=dict)),
        ],
        bases=(ecotone.Observation,),
        kw_only=True,
    )
    entry_point = spec.entry_point if spec is not None else None
    namespace: dict[str, Any] = {
        "__doc__": f"Gymnasium's {gym_id}, a SyncVectorEnv of it per session, served by ecotone.",
        "__module__": __name__,
        "gym_id": gym_id,
        "snapshot_identity": snapshot_identity(gym_id, kwargs),
        "make_kwargs": kwargs,
        "name": name,
        "description": f"Gymnasium's {gym_id} served as batches (a SyncVectorEnv per session)",
        "version": str(spec.version) if spec is not None and spec.version is not None else "0",
        "inline": _inline(entry_point, kwargs),
        "action_type": action_type,
        "observation_type": observation_type,
        "state_type": ecotone.State,
    }
    return type(f"{stem}Env", (GymnasiumVectorEnv,), namespace)


@functools.cache
def vector_env_class(name: str) -> type[GymnasiumVectorEnv]:
    """The env class for `gymnasium-vector:ID[?kwargs]`, built once per name."""
    return build_vector_env_class(name)


@ecotone.hookimpl
def ecotone_environment_patterns() -> dict[str, str]:
    return {
        f"{PREFIX}ID[?kw=...]": "a Gymnasium env as batches, one SyncVectorEnv per session: "
        "what ecotone.gym.make_vec steps fastest (needs gymnasium)",
    }


@ecotone.hookimpl
def ecotone_resolve_environment(name: str) -> type | None:
    return vector_env_class(name) if name.startswith(PREFIX) else None


__all__ = ["GYM_VECTOR_KEY", "PREFIX", "GymnasiumVectorEnv", "build_vector_env_class"]
