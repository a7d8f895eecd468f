"""`reverse`: an env from outside ecotone, found through the `ecotone` entry-point group.

Action `{"text": str}`; observation `{"reversed": str}`; reward is the text's length. An empty
text ends the episode; it is truncated after `max_steps` steps (reset option, default 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ecotone


class ReverseAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    text: str


class ReverseObservation(ecotone.Observation, kw_only=True):
    reversed: str = ""


class ReverseState(ecotone.State, kw_only=True):
    max_steps: int = 3
    last_text: str = ""


class ReverseEnv(ecotone.Environment[ReverseAction, ReverseObservation, ReverseState]):
    """Reverses each text it is given."""

    name = "reverse"
    version = "0.0.1"
    inline = True

    def __init__(self) -> None:
        self._state = ReverseState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 3
    ) -> ReverseObservation:
        self._state = ReverseState(episode_id=episode_id, max_steps=max_steps)
        return ReverseObservation()

    def step(self, action: ReverseAction) -> ReverseObservation:
        st = self._state
        st.step_count += 1
        st.last_text = action.text
        done = action.text == ""
        return ReverseObservation(
            reversed=action.text[::-1],
            reward=float(len(action.text)),
            done=done,
            truncated=not done and st.step_count >= st.max_steps,
        )

    def state(self) -> ReverseState:
        return self._state


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"reverse": ReverseEnv}
