"""How a sub-env fails: the failure codes, the errors raised, and `Failure`, one sub-env's
failure in one call."""

from __future__ import annotations

import enum
from typing import Any

from ecotone.client.errors import EcotoneError, ServerError
from ecotone.specs import Error, ErrorCode


class FailureCode(enum.StrEnum):
    """A sub-env's failure code when the server did not answer with one (`infos["error_code"]`
    is the value; a server's error gives its `ErrorCode`)."""

    CONNECTION_LOST = "connection_lost"
    """Its connection dropped: its session is gone."""
    TIMEOUT = "timeout"
    """No answer within `step_timeout`."""
    CANCELLED = "cancelled"
    """The caller gave up waiting."""
    BAD_OBSERVATION = "bad_observation"
    """The server's observation does not fit `observation_type`."""


class SubEnvError(EcotoneError):
    """One or more sub-envs failed (with `errors="raise"`).

    `env_index` is the first failed sub-env and `cause` its exception (a `ServerError`,
    `ConnectionLost` or `TimeoutError`); `errors` maps every failed sub-env to its exception.
    `result` is what the call would have returned with `errors="info"` (the other sub-envs'
    results are in it: they did step), or None.
    """

    def __init__(self, errors: dict[int, BaseException], result: Any = None) -> None:
        self.errors = dict(sorted(errors.items()))
        self.env_index = next(iter(self.errors))
        self.cause = self.errors[self.env_index]
        self.result = result
        others = [str(i) for i in self.errors if i != self.env_index]
        more = (
            f" (and sub-env{'s' if len(others) > 1 else ''} {', '.join(others)})" if others else ""
        )
        super().__init__(f"sub-env {self.env_index} failed: {self.cause}{more if others else ''}")


class ObservationMismatch(EcotoneError, ValueError):
    """The server answered a sub-env with an observation that does not fit the vector env's
    `observation_type` (the message says where). Its episode is lost, as a failed step's is,
    and is reset as the autoreset mode says (`next_step`: by the next step; `same_step`:
    within the call; `disabled`: by the caller)."""


class EpisodeLost(SubEnvError):
    """A sub-env's episode is over without a final observation: its connection dropped, its
    step passed the deadline, its env raised, or its observation did not fit. Its observation
    is stale; it needs a reset (`restart` when its session is gone)."""


class Failure:
    """What went wrong for one sub-env in one call."""

    __slots__ = ("code", "ends_episode", "error", "session_lost")

    def __init__(
        self, code: str, error: BaseException, *, ends_episode: bool, session_lost: bool
    ) -> None:
        self.code = code
        self.error = error
        self.ends_episode = ends_episode
        self.session_lost = session_lost

    @classmethod
    def from_server(cls, error: ServerError) -> Failure:
        """A server's error: the episode goes on after an invalid action only, the session
        is gone only when the server does not know it."""
        code = error.code
        return cls(
            code,
            error,
            ends_episode=code != ErrorCode.INVALID_ACTION,
            session_lost=code == ErrorCode.UNKNOWN_SESSION,
        )

    @classmethod
    def from_frame(cls, frame: Error) -> Failure:
        """A server's error frame (a whole answer's, or one item's of a batch)."""
        return cls.from_server(ServerError.from_frame(frame))

    @classmethod
    def lost(cls, error: BaseException) -> Failure:
        return cls(FailureCode.CONNECTION_LOST, error, ends_episode=True, session_lost=True)

    @classmethod
    def timed_out(cls, error: TimeoutError) -> Failure:
        """No answer within the step's deadline: the episode is lost, the session stays."""
        return cls(FailureCode.TIMEOUT, error, ends_episode=True, session_lost=False)

    @classmethod
    def cancelled(cls, error: TimeoutError) -> Failure:
        """The caller gave up waiting (cancelled, interrupted): what the env did is unknown,
        so the episode is lost; the session stays."""
        return cls(FailureCode.CANCELLED, error, ends_episode=True, session_lost=False)

    def info(self) -> dict[str, Any]:
        """How a sub-env's infos report it: `error`, `error_code`, `episode_lost`."""
        return {
            "error": f"[{self.code}] {self.error}",
            "error_code": str(self.code),
            "episode_lost": self.ends_episode,
        }

    @classmethod
    def mismatch(cls, error: Exception) -> Failure:
        """A sub-env's observation did not decode into the observation type."""
        return cls(
            FailureCode.BAD_OBSERVATION,
            ObservationMismatch(f"the observation does not fit observation_type: {error}"),
            ends_episode=True,
            session_lost=False,
        )


def raise_failures(failures: dict[int, Failure], result: Any) -> None:
    """`errors="raise"`: raise what `failures` (by sub-env) say, `result` attached: an
    EpisodeLost if any of them ended an episode, else a SubEnvError. Nothing when none."""
    if failures:
        kind = EpisodeLost if any(f.ends_episode for f in failures.values()) else SubEnvError
        error = kind({i: f.error for i, f in failures.items()}, result)
        raise error from error.cause
