"""What a client hands back from `reset` and `step`."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from ecotone.specs import TaskRef

ObsT = TypeVar("ObsT")


class StepResult(msgspec.Struct, Generic[ObsT], frozen=True, kw_only=True, gc=False):
    """What a client returns from `reset` and `step`: the observation and its reward/flags.

    Decoded wire data, so not tracked by the cyclic garbage collector (as `Observation`).

    Args:
        observation: The env's Observation type when the client knows it (`observation_type`),
            else plain data (a dict).
        reward: The transition's reward (None after a reset).
        done: The episode reached a terminal state.
        truncated: The episode was cut short (a step limit, say).
        task: After a reset of an env that publishes tasks: which task the episode runs.

    Example:
        >>> with ecotone.connect("inproc://counter") as env:
        ...     result = env.reset(seed=0)
        ...     result = env.step({"delta": 3})
        >>> result.observation["count"], result.reward, result.finished
        (3, 3.0, False)
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


class SnapshotInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What `snapshot()` returns: the id of a snapshot kept on the server, and what it holds.

    Args:
        id: The snapshot's id (`restore` and `export_snapshot` take it).
        size: Its size in bytes, as the server's store counts it.
        episode_id: The episode it saved.
        step_count: Steps that episode had taken.
    """

    id: str
    size: int
    episode_id: str | None = None
    step_count: int = 0


class Resumed(msgspec.Struct, Generic[ObsT], frozen=True, kw_only=True):
    """What `restore()` returns: where the episode put back into the session stands.

    Args:
        result: Its last observation, as its last `step` (or `reset`) answered it; `finished`
            when the episode had ended.
        episode_id: The episode's id.
        step_count: Steps it had taken.
        forked_from: The episode it was forked from, if it was.
    """

    result: StepResult[ObsT]
    episode_id: str | None = None
    step_count: int = 0
    forked_from: str | None = None


class Tasks(msgspec.Struct, frozen=True, kw_only=True):
    """What `list_tasks` returns: every split's size, and a page of one split's tasks.

    Args:
        splits: Every split's name mapped to its number of tasks (empty: the env publishes
            none).
        split: The split the page is of.
        offset: The page's first task's position in the split.
        total: How many tasks the split holds.
        tasks: The page's task records, as plain data (without the fields the env hides).
        ids: Each listed task's id, in the order of `tasks` (empty from a server that does
            not send them).
    """

    splits: dict[str, int]
    split: str | None = None
    offset: int = 0
    total: int = 0
    tasks: list[Any] = []
    ids: list[str] = []


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """What `get_task` returns: one task record and where it is.

    Args:
        ref: The task's id, split and index.
        task: The task record, as plain data (without the fields the env hides).
    """

    ref: TaskRef
    task: Any

    @property
    def id(self) -> str:
        """The task's id (`ref.id`)."""
        return self.ref.id


class SeatResult(msgspec.Struct, Generic[ObsT], frozen=True, kw_only=True):
    """A seat's view in a multi-agent session (a `play`'s or an `observe`'s answer).

    Args:
        result: The view, as a step's result: `observation` (a dict, or the client's
            `observation_type`), the seat's own `reward`, `done` and `truncated`.
        seat: Whose view it is (None: the public view).
        turn: Whose turn it is now (None: nobody's: the episode is over, or the seats move
            at once).
        lost: The seats released after their connection dropped, when that ended the episode.
        acting: The seats whose move the episode waits for now (whose turn it is; in a
            simultaneous env, the live seats that have not moved in this round).
    """

    result: StepResult[ObsT]
    seat: str | None = None
    turn: str | None = None
    lost: list[str] = []
    acting: list[str] = []


class SeatKeys(msgspec.Struct, frozen=True, kw_only=True):
    """A multi-agent session's keys (`seat_keys()`): keep them secret.

    Args:
        keys: Each seat's key, by seat: `join` with one to play that seat.
        spectate: The spectator key: `join` with it to read the public view.
    """

    keys: dict[str, str]
    spectate: str
