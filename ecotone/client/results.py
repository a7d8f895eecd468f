"""What a client hands back from `reset` and `step`."""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

ObsT = TypeVar("ObsT")


class StepResult(msgspec.Struct, Generic[ObsT], frozen=True, kw_only=True):
    """What a client returns from `reset` and `step`: the observation and its reward/flags.

    `observation` is the env's Observation type when the client knows it, else plain data.
    """

    observation: ObsT
    reward: float | None = None
    done: bool = False
    truncated: bool = False

    @property
    def finished(self) -> bool:
        """The episode is over, either way (`done or truncated`)."""
        return self.done or self.truncated
