"""`ecotone.gym.make_vec`: a `gymnasium.vector.VectorEnv` over remote sub-envs.

The Gymnasium face of `ecotone.VectorEnv`: batched spaces (`single_observation_space`,
`observation_space`, ...) rebuilt from the env's schemas as `ecotone.gym.make` does, batched
numpy observations, Gymnasium's autoreset modes (`metadata["autoreset_mode"]`), and one
`step_many` round trip per server underneath. Existing Gymnasium vector training code runs
against remote envs unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ecotone.client.sync import Connection
from ecotone.client.vector import VectorEnv
from ecotone.gym.spaces import _nodes


class RemoteVectorEnv(gymnasium.vector.VectorEnv[Any, Any, Any]):
    """`num_envs` remote sub-envs as one `gymnasium.vector.VectorEnv`. Build with `make_vec`."""

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        env: str | None = None,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        **vector_kwargs: Any,
    ) -> None:
        first = urls if isinstance(urls, str) else urls[0]
        probe = Connection(first, codec=vector_kwargs.get("codec", "json"))
        try:
            self.env_info = probe.describe(env)
        finally:
            probe.close()
        self._action, self._observation, self._bridged = _nodes(self.env_info)
        mode = AutoresetMode(autoreset_mode)
        self.num_envs = num_envs
        self.single_action_space = self._action.space
        self.single_observation_space = self._observation.space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": mode}
        self.render_mode = None
        self._buffer: Any = create_empty_array(self.single_observation_space, n=num_envs)
        self.vector = VectorEnv(urls, num_envs, env, autoreset_mode=mode.value, **vector_kwargs)

    def _batch(self, observations: Sequence[Any]) -> Any:
        items = [self._observation.from_wire(o) for o in observations]
        return copy.deepcopy(concatenate(self.single_observation_space, items, self._buffer))

    def _infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        final = infos.get("final_obs")
        if final is not None:  # wire observations: give them back as space values
            converted = np.empty(self.num_envs, dtype=object)
            for i, obs in enumerate(final):
                converted[i] = None if obs is None else self._observation.from_wire(obs)
            infos = {**infos, "final_obs": converted}
        return infos

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        observations, infos = self.vector.reset(seed=seed, options=options)
        return self._batch(observations), self._infos(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        wire = [self._action.to_wire(a) for a in iterate(self.action_space, actions)]
        observations, rewards, terminated, truncated, infos = self.vector.step(wire)
        return self._batch(observations), rewards, terminated, truncated, self._infos(infos)

    def close_extras(self, **kwargs: Any) -> None:
        self.vector.close()


def make_vec(
    urls: str | Sequence[str],
    num_envs: int,
    env: str | None = None,
    *,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    **vector_kwargs: Any,
) -> RemoteVectorEnv:
    """A `gymnasium.vector.VectorEnv` of `num_envs` sessions spread over `urls`.

    `vector_kwargs` go to `ecotone.VectorEnv` (`errors=`, `step_timeout=`, `codec=`, ...).
    """
    return RemoteVectorEnv(urls, num_envs, env, autoreset_mode=autoreset_mode, **vector_kwargs)
