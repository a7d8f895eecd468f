"""What a client hands back from `reset` and `step`."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from ecotone.specs import TaskRef

ObsT = TypeVar("ObsT")


class StepResult(msgspec.Struct, Generic[ObsT], frozen=True, kw_only=True, gc=False):
    """What a client returns from `reset` and `step`: the observation and its reward/flags.

    `observation` is the env's Observation type when the client knows it, else plain data.
    Decoded wire data, so not tracked by the cyclic garbage collector (as `Observation`).
    """

    observation: ObsT
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    task: TaskRef | None = None
    """After a reset of an env that publishes tasks: which task the episode runs."""

    @property
    def finished(self) -> bool:
        """The episode is over, either way (`done or truncated`)."""
        return self.done or self.truncated


class Tasks(msgspec.Struct, frozen=True, kw_only=True):
    """What `list_tasks` returns: every split's size, and a page of one split's tasks (plain
    data, `total` in the split, starting at `offset`)."""

    splits: dict[str, int]
    split: str | None = None
    offset: int = 0
    total: int = 0
    tasks: list[Any] = []


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """What `get_task` returns: one task record (plain data) and where it is."""

    ref: TaskRef
    task: Any

    @property
    def id(self) -> str:
        return self.ref.id
