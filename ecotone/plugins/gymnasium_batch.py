"""The batch a `gymnasium-vector:` session steps: Gymnasium's `SyncVectorEnv`, its step lean.

`SyncVectorEnv.step` handles three autoreset modes, writes each sub-env's reward and flags
into numpy arrays one element at a time, merges every sub-env's info dict (empty ones too)
and deep-copies the batch's observations. The vector form autoresets as NEXT_STEP only and
turns the arrays into bytes at once, so `NextStepBatch.step` does the same steps in the same
order with none of that per-item work: Python lists turned into arrays once, infos merged
only where a sub-env has some, the observations put into Gymnasium's own buffer (stacked in C
where they have a dimension, not by `np.stack`'s Python loop) and not copied (the flags are,
as Gymnasium's are). Everything else (making the
sub-envs, reset and its seeding, close) is Gymnasium's. What it returns equals what
`SyncVectorEnv(..., autoreset_mode=NEXT_STEP)` returns for the same calls: values, dtypes
and infos (tests/test_gym_vector_form.py pins that over envs with infos, Box actions, ends
of episodes and a partial reset).

Imported by the vector form when it makes a batch, so that gymnasium is imported only then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.spaces import Box, MultiBinary, MultiDiscrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate

_STATE = ("_env_obs", "_observations", "_autoreset_envs", "_add_info", "_rewards")
"""What the lean step uses of `SyncVectorEnv`'s own (Gymnasium 1.x); without it, its step."""


class NextStepBatch(SyncVectorEnv):
    """`SyncVectorEnv` with NEXT_STEP autoreset and no copy of the observations (callers
    take them at once), stepped without per-item array writes."""

    def __init__(self, env_fns: Sequence[Callable[[], Env[Any, Any]]]) -> None:
        super().__init__(env_fns, copy=False, autoreset_mode=AutoresetMode.NEXT_STEP)
        self._lean = all(hasattr(self, name) for name in _STATE)
        space = self.single_observation_space
        self._joins = isinstance(space, Box | MultiDiscrete | MultiBinary) and len(space.shape) >= 1
        """Observations of at least one dimension: stacked into the buffer in two C calls,
        where Gymnasium's `concatenate` (`np.stack`) handles each in Python (about a fifth
        of the batch's own time at 32 CartPoles)."""

    def _join(self, env_obs: list[Any]) -> Any:
        """The sub-envs' observations in the batch's buffer, as `concatenate` puts them there.
        Only what stacks into the buffer's own shape and dtype (what an env of this space
        returns) takes the short way; anything else (another shape, another dtype, mixed
        ones that numpy would promote) goes to `concatenate`, which casts each item as
        Gymnasium does, or says what is wrong."""
        out = self._observations
        if self._joins:
            try:
                joined = np.array(env_obs)
            except ValueError:  # shapes that do not stack
                joined = None
            if joined is not None and joined.shape == out.shape and joined.dtype == out.dtype:
                np.copyto(out, joined)
                return out
        return concatenate(self.single_observation_space, env_obs, out)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if not self._lean:  # pragma: no cover - a Gymnasium without the state it uses
            return super().step(actions)
        envs = self.envs
        n = len(envs)
        if len(actions) != n:
            raise ValueError(f"{len(actions)} actions for {n} sub-envs")
        autoreset = self._autoreset_envs.tolist()
        env_obs = self._env_obs
        rewards: list[Any] = [0.0] * n
        terminations: list[Any] = [False] * n
        truncations: list[Any] = [False] * n
        infos: dict[str, Any] = {}
        add_info = self._add_info
        for i in range(n):
            if autoreset[i]:
                env_obs[i], info = envs[i].reset()
            else:
                env_obs[i], rewards[i], terminations[i], truncations[i], info = envs[i].step(
                    actions[i]
                )
            if info:
                infos = add_info(infos, info, i)
        self._rewards = np.array(rewards, dtype=np.float64)
        self._terminations = np.array(terminations, dtype=np.bool_)
        self._truncations = np.array(truncations, dtype=np.bool_)
        self._observations = self._join(env_obs)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        # the flags as copies, as Gymnasium returns them: a reset with a reset_mask changes
        # them in place (the rewards are a new array each step, which nothing else writes)
        return (
            self._observations,
            self._rewards,
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )
