"""`probe`: the env the protocol checks use to see inside a server.

Serve it (`ecotone serve probe --transport NAME`) and point `ecotone validate --url` at the
server: the checks that need to know what happened inside the env (`no_overlapping_calls`,
`close_waits_for_step`) then run instead of being skipped.

Each step sleeps for the action's `sleep` seconds in a worker thread (it is a plain, blocking
env: not inline) and reports in its observation whether another call on the same instance
was running when it started or ended (`overlapped`: a server must never let that happen), and
whether `close()` was called while it ran (`closed_during`: a close must wait for the step).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

import ecotone


class ProbeAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    sleep: Annotated[float, msgspec.Meta(ge=0.0, le=0.25)] = 0.0
    """Seconds the step blocks."""
    tag: str = ""
    """Echoed back, so an answer can be matched to its request."""


class ProbeObservation(ecotone.Observation, kw_only=True):
    tag: str = ""
    steps: int = 0
    """Steps taken in this episode, this one included."""
    overlapped: bool = False
    """Another call on this env instance was running during this one."""
    closed_during: bool = False
    """`close()` was called while this call ran."""


class ProbeState(ecotone.State, kw_only=True):
    max_steps: int = 10
    overlaps: int = 0
    """Calls that found another one running, since the instance was made."""


class ProbeEnv(ecotone.Environment[ProbeAction, ProbeObservation, ProbeState]):
    """Sleeps in step as asked and reports overlapping calls: the protocol checks' probe."""

    name = "probe"

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._inside = 0
        self._closed = False
        self._state = ProbeState()

    def _enter(self) -> bool:
        with self._guard:
            self._inside += 1
            return self._inside > 1

    def _leave(self) -> bool:
        with self._guard:
            self._inside -= 1
            return self._inside > 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 10
    ) -> ProbeObservation:
        """A new episode, truncated after `max_steps` steps."""
        overlapped = self._enter()
        try:
            self._state = ProbeState(
                episode_id=episode_id or uuid.uuid4().hex,
                max_steps=max_steps,
                overlaps=self._state.overlaps,
            )
            return ProbeObservation()
        finally:
            overlapped = self._leave() or overlapped
            self._state.overlaps += overlapped

    def step(self, action: ProbeAction) -> ProbeObservation:
        overlapped = self._enter()
        closed_before = self._closed
        try:
            time.sleep(action.sleep)
            self._state.step_count += 1
            steps = self._state.step_count
        finally:
            overlapped = self._leave() or overlapped
            self._state.overlaps += overlapped
        return ProbeObservation(
            tag=action.tag,
            steps=steps,
            reward=1.0,
            overlapped=overlapped,
            closed_during=self._closed and not closed_before,
            truncated=steps >= self._state.max_steps,
        )

    def sample_action(self, rng: random.Random) -> ProbeAction:
        return ProbeAction(tag=str(rng.randrange(1000)))

    def state(self) -> ProbeState:
        return self._state

    def close(self) -> None:
        self._closed = True


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"probe": ProbeEnv}
