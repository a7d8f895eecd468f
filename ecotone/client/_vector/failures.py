"""How a sub-env fails: the failure codes, the errors raised, and one sub-env's failure.

`Failure` is one sub-env's failure in one call; the policy (`errors="raise"` or `"info"`)
decides whether it is raised or reported in the infos.
"""

from __future__ import annotations

import enum
from typing import Any

from ecotone.client.errors import EcotoneError, ServerError
from ecotone.specs import Error, ErrorCode


class FailureCode(enum.StrEnum):
    """A sub-env's failure code when the server did not answer with one.

    `infos["error_code"]` is the value; a server's error gives its `ErrorCode` instead.
    """

    CONNECTION_LOST = "connection_lost"
    """Its connection dropped: its session is gone."""
    TIMEOUT = "timeout"
    """No answer within `step_timeout`."""
    CANCELLED = "cancelled"
    """The caller gave up waiting."""
    BAD_OBSERVATION = "bad_observation"
    """The server's observation does not fit `observation_type`."""
    NOT_RESUMED = "not_resumed"
    """`resume=True`: its server went, and its episode could be neither restored from a
    checkpoint nor replayed from a seeded reset (`restart` it)."""


class SubEnvError(EcotoneError):
    """One or more sub-envs failed (with `errors="raise"`).

    Raised from the failure of the first failed sub-env (`cause`), after every other sub-env
    of the call got its result.

    Args:
        errors: Every failed sub-env's index mapped to its exception.
        result: What the call would have returned with `errors="info"` (the other sub-envs'
            results are in it: they did step), or None.

    Attributes:
        errors: Every failed sub-env's index mapped to its exception, in index order.
        env_index: The first failed sub-env's index.
        cause: Its exception (a `ServerError`, `ConnectionLost`, `TimeoutError` or
            `ObservationMismatch`).
        result: As given.
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
    """A sub-env's observation does not fit the vector env's `observation_type`.

    The message says where. Its episode is lost, as a failed step's is, and is reset as the
    autoreset mode says (`next_step`: by the next step; `same_step`: within the call;
    `disabled`: by the caller). A `ValueError` too.
    """


class EpisodeLost(SubEnvError):
    """A sub-env's episode is over without a final observation (a `SubEnvError`).

    Its connection dropped, its step passed the deadline, its env raised, or its observation
    did not fit. Its observation is stale; it needs a reset (`restart` when its session is
    gone).
    """


class Failure:
    """What went wrong for one sub-env in one call.

    Args:
        code: The failure code: the server's `ErrorCode`, or a `FailureCode`.
        error: The exception to raise, or to report.
        ends_episode: The sub-env's episode is lost.
        session_lost: Its session is gone too (only `restart` helps).
    """

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
        """Make the failure of a server's error.

        The episode goes on after an invalid action only; the session is gone only when the
        server does not know it.

        Args:
            error: The server's error.

        Returns:
            The failure.
        """
        code = error.code
        return cls(
            code,
            error,
            ends_episode=code != ErrorCode.INVALID_ACTION,
            session_lost=code == ErrorCode.UNKNOWN_SESSION,
        )

    @classmethod
    def from_frame(cls, frame: Error) -> Failure:
        """Make the failure of a server's error frame.

        Args:
            frame: A whole answer's error frame, or one item's of a batch.

        Returns:
            The failure, as `from_server` makes it.
        """
        return cls.from_server(ServerError.from_frame(frame))

    @classmethod
    def lost(cls, error: BaseException) -> Failure:
        """Make the failure of a sub-env whose connection dropped.

        Args:
            error: Why (a `ConnectionLost`, usually).

        Returns:
            The failure: the episode is lost, and the session with it.
        """
        return cls(FailureCode.CONNECTION_LOST, error, ends_episode=True, session_lost=True)

    @classmethod
    def timed_out(cls, error: TimeoutError) -> Failure:
        """Make the failure of a sub-env that did not answer within the step's deadline.

        Args:
            error: The timeout.

        Returns:
            The failure: the episode is lost, the session stays.
        """
        return cls(FailureCode.TIMEOUT, error, ends_episode=True, session_lost=False)

    @classmethod
    def cancelled(cls, error: TimeoutError) -> Failure:
        """Make the failure of a sub-env the caller gave up waiting for (cancelled, interrupted).

        Args:
            error: What ended the wait.

        Returns:
            The failure: what the env did is unknown, so the episode is lost; the session
            stays.
        """
        return cls(FailureCode.CANCELLED, error, ends_episode=True, session_lost=False)

    def info(self) -> dict[str, Any]:
        """Report the failure as a sub-env's infos do.

        Returns:
            `error` (the code and the message), `error_code` and `episode_lost`.
        """
        text, code = str(self.error), f"[{self.code}]"
        return {
            "error": text if text.startswith(code) else f"{code} {text}",  # a ServerError's has it
            "error_code": str(self.code),
            "episode_lost": self.ends_episode,
        }

    @classmethod
    def mismatch(cls, error: Exception) -> Failure:
        """Make the failure of an observation that did not decode into the observation type.

        Args:
            error: The decoding error.

        Returns:
            The failure, its error an `ObservationMismatch`: the episode is lost, the session
            stays.
        """
        return cls(
            FailureCode.BAD_OBSERVATION,
            ObservationMismatch(f"the observation does not fit observation_type: {error}"),
            ends_episode=True,
            session_lost=False,
        )


def raise_failures(failures: dict[int, Failure], result: Any) -> None:
    """Raise what the failures of a call say, with `errors="raise"`; nothing when none.

    Args:
        failures: Each failed sub-env's index mapped to its failure.
        result: What the call returns with `errors="info"`, attached to the error.

    Raises:
        EpisodeLost: Any of the failures ended an episode.
        SubEnvError: Otherwise (invalid actions only).
    """
    if failures:
        kind = EpisodeLost if any(f.ends_episode for f in failures.values()) else SubEnvError
        error = kind({i: f.error for i, f in failures.items()}, result)
        raise error from error.cause
