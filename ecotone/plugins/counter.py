"""`counter`: the smallest useful env, used by benchmarks and tests.

Action `{"delta": int}`; observation `{"count": int}`; reward = delta. The episode never ends
unless reset options set `target` (done once count >= target) or `max_steps` (truncated after
that many steps). The count stays within +-2**53 (`COUNT_BOUND`): a step past it saturates
there, and a `start` beyond it is refused. That is the range every JSON reader keeps exact and
the bound `ecotone.gym` gives an integer field without one, so the observation never leaves
its Gymnasium space, however many random deltas (up to +-2**53 each) are summed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import ecotone

COUNT_BOUND = 2**53
"""The count is kept within +-COUNT_BOUND (the same bound as `ecotone.gym.INT_BOUND`)."""
_LOW, _HIGH = -COUNT_BOUND, COUNT_BOUND


class CounterAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    delta: int
    """How much to add to the count (negative to subtract)."""


class CounterObservation(ecotone.Observation, kw_only=True):
    count: int


class CounterState(ecotone.State, kw_only=True):
    count: int = 0
    target: int | None = None
    max_steps: int | None = None


class CounterEnv(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
    """Adds each action's delta to a count; the reward is the delta."""

    name = "counter"
    version = "1"
    inline = True  # pure arithmetic: never worth a thread hop

    def __init__(self) -> None:
        self._state = CounterState()

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        start: int = 0,
        target: int | None = None,
        max_steps: int | None = None,
    ) -> CounterObservation:
        if not _LOW <= start <= _HIGH:
            raise ValueError(f"start must be within +-2**53, got {start}")
        self._state = CounterState(
            episode_id=episode_id or uuid.uuid4().hex,
            count=start,
            target=target,
            max_steps=max_steps,
        )
        return CounterObservation(count=start)

    def step(self, action: CounterAction) -> CounterObservation:
        st = self._state
        st.step_count += 1
        count = st.count + action.delta
        # Saturate at +-2**53. The first test compares small (one-digit) ints, the cheap
        # case, so a step within +-2**30 pays a few nanoseconds for the bound.
        if (count > 0x3FFFFFFF or count < -0x3FFFFFFF) and not _LOW <= count <= _HIGH:
            count = _HIGH if count > 0 else _LOW
        st.count = count
        done = st.target is not None and count >= st.target
        truncated = not done and st.max_steps is not None and st.step_count >= st.max_steps
        return CounterObservation(
            count=count, reward=float(action.delta), done=done, truncated=truncated
        )

    def state(self) -> CounterState:
        return self._state

    def load_state(self, state: CounterState) -> None:
        """Put a saved episode back (its State holds all of it: snapshots, forks)."""
        self._state = state

    def close(self) -> None:
        pass


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"counter": CounterEnv}
