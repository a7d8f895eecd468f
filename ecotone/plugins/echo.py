"""`echo`: repeats the agent's message back; a readable first env and the demo's.

Action `{"message": str}`; observation `{"echoed": str, "length": int}`; reward is
`len(message) / 10`. The episode ends (done) when the agent sends an empty message, and is
truncated after `max_steps` steps (reset option, default 10).
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Mapping
from typing import Any

import ecotone


class EchoAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    message: str
    """The text to echo back."""


class EchoObservation(ecotone.Observation, kw_only=True):
    echoed: str = ""
    length: int = 0


class EchoState(ecotone.State, kw_only=True):
    max_steps: int = 10
    last_message: str = ""


class EchoEnv(ecotone.Environment[EchoAction, EchoObservation, EchoState]):
    """Echoes each message back; an empty message ends the episode."""

    name = "echo"
    version = "1"
    inline = True

    def __init__(self) -> None:
        self._state = EchoState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 10
    ) -> EchoObservation:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self._state = EchoState(episode_id=episode_id or uuid.uuid4().hex, max_steps=max_steps)
        return EchoObservation()

    def step(self, action: EchoAction) -> EchoObservation:
        st = self._state
        st.step_count += 1
        st.last_message = action.message
        done = action.message == ""
        return EchoObservation(
            echoed=action.message,
            length=len(action.message),
            reward=len(action.message) / 10,
            done=done,
            truncated=not done and st.step_count >= st.max_steps,
        )

    def state(self) -> EchoState:
        return self._state

    def load_state(self, state: EchoState) -> None:
        """Put a saved episode back (its State holds all of it: snapshots, forks)."""
        self._state = state

    def sample_action(self, rng: random.Random) -> EchoAction:
        """A short random word, or one time in five the empty message that ends the episode."""
        if rng.random() < 0.2:
            return EchoAction(message="")
        size = rng.randint(1, 8)
        return EchoAction(message="".join(rng.choice(string.ascii_lowercase) for _ in range(size)))

    def close(self) -> None:
        pass

    # Tools (served over MCP too): a side channel that does not advance the episode.

    def list_tools(self) -> list[ecotone.ToolInfo]:
        return [
            ecotone.ToolInfo(
                name="shout",
                description="Return the message in capitals.",
                input_schema={
                    "type": "object",
                    "properties": {"message": {"type": "string"}},
                    "required": ["message"],
                },
            )
        ]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if name != "shout":
            raise LookupError(f"unknown tool {name!r}; tools: shout")
        message = arguments.get("message")
        if not isinstance(message, str):
            raise LookupError("argument `message` must be a string")
        return message.upper()


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"echo": EchoEnv}
