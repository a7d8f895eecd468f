"""What a vector env opened with `resume=True` keeps of each sub-env's episode, to resume it.

The I/O that uses it is `ecotone/client/_async/vector_resuming.py`. A `Trail` is one sub-env's:
its session's resume key, how its episode began (to replay it from its reset when no
checkpoint was written), the actions since the last checkpoint known (each with its step
number), and where that checkpoint stands. It holds no socket and makes no decision about
frames: `Trails.record` reads a finished call's outcomes into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ecotone.client._vector.failures import Failure, FailureCode
from ecotone.client._vector.subenvs import Sub, Tally
from ecotone.specs import ErrorCode

GONE_CODES = frozenset({FailureCode.CONNECTION_LOST, ErrorCode.SHUTTING_DOWN})
"""A failure with one of these codes says the sub-env's server is gone or going: resume."""


def gone(failure: Failure | None) -> bool:
    """Tell whether a failure says the sub-env's server is gone or going (resume elsewhere).

    Args:
        failure: A sub-env's failure in a call, or None.

    Returns:
        True for a dropped connection or a server that is shutting down.
    """
    return failure is not None and failure.code in GONE_CODES


class Trail:
    """One sub-env's episode as a resume needs it."""

    __slots__ = (
        "checkpointed",
        "episode_id",
        "key",
        "log",
        "past",
        "replayable",
        "seed",
        "steps",
    )

    def __init__(self) -> None:
        self.key: str | None = None
        """The session's resume key (its server's `opened` gave it)."""
        self.seed: int | None = None
        self.replayable = False
        """The episode can be replayed from its reset (it was seeded, or the env has no
        randomness the client cannot give it again): false for automatic resets."""
        self.log: list[tuple[int, Any]] = []
        """The actions since the last checkpoint known, each with its step number."""
        self.steps = 0
        """Steps of the episode so far (-1: no episode to resume, the sub-env needs a reset)."""
        self.checkpointed: int | None = None
        """The step number the last checkpoint known holds (None: none of this episode)."""
        self.episode_id: str | None = None
        """The episode that checkpoint holds (a checkpoint of another episode is stale)."""
        self.past: str | None = None
        """The episode the last checkpoint before this episode's held: stale from now on."""

    def begin(self, seed: int | None, *, replayable: bool) -> None:
        """A new episode began (a reset answered).

        Args:
            seed: Its reset's seed.
            replayable: Whether a reset with `seed` gives the same episode again.
        """
        self.seed, self.replayable = seed, replayable
        self.past = self.episode_id or self.past
        self.log.clear()
        self.steps = 0
        self.checkpointed = self.episode_id = None

    def stepped(self, action: Any) -> None:
        """A step answered.

        Args:
            action: Its action, logged until a checkpoint holds it.
        """
        self.log.append((self.steps, action))
        self.steps += 1

    def moved(self, step_count: int, episode_id: str | None) -> None:
        """The sub-env now runs another episode where it stands (`fork` restored it).

        Args:
            step_count: That episode's steps so far.
            episode_id: Its id.
        """
        self.past = self.episode_id or self.past
        self.log.clear()
        self.replayable = False
        self.steps = step_count
        self.checkpointed, self.episode_id = None, episode_id

    def lose(self) -> None:
        """The episode is over without a way back (lost, or never begun): nothing to resume."""
        self.past = self.episode_id or self.past
        self.log.clear()
        self.steps = -1
        self.checkpointed = self.episode_id = None

    def holds(self, episode_id: str | None) -> bool:
        """Tell whether a checkpoint of `episode_id` is of this episode.

        Args:
            episode_id: The episode a restored checkpoint holds.

        Returns:
            False for another episode's (this one's is not written yet, or was not kept).
        """
        if self.episode_id is not None:
            return episode_id == self.episode_id
        return episode_id is None or episode_id != self.past

    @property
    def running(self) -> bool:
        """Whether there is an episode to resume."""
        return self.steps >= 0

    def saved(self, episode_id: str | None) -> None:
        """A checkpoint of the episode where it stands was written.

        Args:
            episode_id: The episode it holds.
        """
        self.checkpointed, self.episode_id = self.steps, episode_id
        self.log.clear()

    def due(self, every: int | None) -> bool:
        """Tell whether a checkpoint should be asked for now.

        Args:
            every: Ask every this many steps (None: only once per episode, at its start).

        Returns:
            True for an episode with no checkpoint yet, or `every` steps past the last.
        """
        if not self.running:
            return False
        if self.checkpointed is None:
            return True
        return every is not None and self.steps - self.checkpointed >= every

    def replay(self, start: int) -> list[Any]:
        """The logged actions from step `start` to where the episode stands.

        Args:
            start: The step number the restored episode stands at.

        Returns:
            The actions to step again, in order.

        Raises:
            LookupError: The log does not reach back to `start` (a checkpoint older than the
                log, which `saved` never leaves).
        """
        actions = [action for index, action in self.log if index >= start]
        if len(actions) != self.steps - start:
            raise LookupError(f"the log holds steps from {self.log[0][0] if self.log else '-'}")
        return actions


class Trails:
    """Every sub-env's `Trail`, and how a finished call updates them.

    Args:
        num_envs: How many sub-envs.
        checkpoint_every: Ask for a checkpoint every this many steps (None: once per episode).
    """

    def __init__(self, num_envs: int, checkpoint_every: int | None) -> None:
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        self.of = [Trail() for _ in range(num_envs)]
        self.every = checkpoint_every
        self.savable = True
        """The env can be checkpointed (else a resume replays seeded episodes from their
        reset, and loses the others)."""
        self.resumes = 0
        """How many times a server's sub-envs were moved to a new connection."""

    def keys(self, subs: Iterable[Sub]) -> None:
        """Take each sub-env's resume key from its (new) session.

        Args:
            subs: Sub-envs whose sessions were just opened.
        """
        for sub in subs:
            self.of[sub.index].key = sub.resume_key

    def record(
        self,
        tally: Tally,
        subs: Sequence[Sub],
        actions: Sequence[Any] | None,
        resets: Sequence[bool],
        seeds: Sequence[int | None] | None = None,
    ) -> list[int]:
        """Read a finished call's results into the trails; return the sub-envs to resume.

        Args:
            tally: The call's tally, complete.
            subs: The sub-envs it asked something of.
            actions: Their actions (a step), or None (a reset of each).
            resets: Per sub-env, whether the call reset it rather than stepped it (a reset,
                or a step's automatic reset of a finished episode).
            seeds: A reset's seeds (None: automatic resets, which carry none).

        Returns:
            The indices of those whose server is gone or going: their part of the call is to
            be made again once they are resumed (their trails are left as they were).
        """
        outcomes = tally.outcomes
        again: list[int] = []
        for j, sub in enumerate(subs):
            trail = self.of[sub.index]
            outcome = outcomes.get(sub.index)
            if outcome is not None and outcome.failure is not None:
                if gone(outcome.failure):
                    again.append(sub.index)
                elif outcome.failure.ends_episode:
                    trail.lose()
                continue
            if resets[j]:
                seed = None if seeds is None else seeds[j]
                trail.begin(seed, replayable=seed is not None)
                continue
            assert actions is not None
            trail.stepped(actions[j])
            if outcome is not None and outcome.reset is not None:  # same_step's reset
                trail.begin(None, replayable=False)
            elif sub.needs_reset:  # the episode ended: nothing left to resume
                trail.lose()
        return again
