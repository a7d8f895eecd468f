"""Exceptions a client raises. Server errors keep the protocol's stable code and details."""

from __future__ import annotations

from typing import Any

from ecotone.specs import Error, ErrorCode


class EcotoneError(Exception):
    """Base of the errors of ecotone's own that its clients raise.

    Besides these, a client call may raise `TimeoutError` (no answer in time), `ValueError`
    (a URL no installed transport handles) and `TypeError` (an option it does not take).
    """


class ServerError(EcotoneError):
    """The server answered a request with an error frame.

    Raised as the subclass its code has, if any (`InvalidActionError`, `CapacityError`,
    `EnvError`, `AccessDenied`); the other codes (`unknown_session`, `episode_done`,
    `timeout`...) raise a ServerError itself: compare `code` with `ecotone.ErrorCode`.

    Args:
        code: The stable error code (an `ErrorCode` value).
        message: The server's message, for people.
        details: Its structured details: for `invalid_action`, `details["field"]` names the
            bad field; for `env_error`, `type` and `message` are the exception's.
        session: The session concerned, if any.
    """

    def __init__(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        session: str | None = None,
    ) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.details = details or {}
        self.session = session

    @classmethod
    def from_frame(cls, frame: Error) -> ServerError:
        """Make the error an error frame says, as the subclass its code has.

        Args:
            frame: The server's `error` frame.

        Returns:
            The ServerError (or subclass) for the frame's code, with its message, details and
            session.
        """
        kind = _BY_CODE.get(frame.code, ServerError)
        return kind(str(frame.code), frame.message, dict(frame.details), frame.session)


class InvalidActionError(ServerError, ValueError):
    """The action failed validation, or the env refused it (`invalid_action`).

    The step did not happen and the episode goes on. A `ValueError` too.
    """

    @property
    def field(self) -> str:
        """The bad field's dotted name (`""`: the action as a whole)."""
        return str(self.details.get("field", ""))


class CapacityError(ServerError):
    """The server holds as many sessions as it allows (`capacity`); details say how many."""


class EnvError(ServerError):
    """The environment raised (`env_error`); the session stays open and can be reset.

    `details["type"]` and `details["message"]` are the exception's.
    """


class AccessDenied(ServerError):
    """The server refused this client.

    `unauthorized`: no token, or a wrong one (pass `token=`, put `?token=` in the URL or set
    ECOTONE_TOKEN); `forbidden`: the request's Host or Origin is not one the server allows.
    """


class ConnectionLost(EcotoneError, ConnectionError):
    """The connection closed or broke, or nothing answered; requests in flight have no answer.

    The server closes the connection's sessions when it goes; a new connection opens new
    ones. A `ConnectionError` too.
    """


_BY_CODE: dict[str, type[ServerError]] = {
    ErrorCode.INVALID_ACTION: InvalidActionError,
    ErrorCode.CAPACITY: CapacityError,
    ErrorCode.ENV_ERROR: EnvError,
    ErrorCode.UNAUTHORIZED: AccessDenied,
    ErrorCode.FORBIDDEN: AccessDenied,
}


def refused(status: int, what: str, sent_token: bool = False) -> EcotoneError:
    """Make the error for an HTTP refusal of a handshake or a request.

    Args:
        status: The HTTP status of the refusal.
        what: Which handshake or request was refused, for the message.
        sent_token: Whether the request carried a token.

    Returns:
        `AccessDenied` for 401 (`unauthorized`) and 403 (`forbidden`), else an
        `EcotoneError` naming the status.
    """
    if status == 401:
        return AccessDenied(
            str(ErrorCode.UNAUTHORIZED),
            f"{what}: the token given is wrong"
            if sent_token
            else f"{what}: the server requires a token (pass token=, put ?token= in the URL, "
            "or set ECOTONE_TOKEN)",
        )
    if status == 403:
        return AccessDenied(
            str(ErrorCode.FORBIDDEN), f"{what}: refused (HTTP 403: Host or Origin not allowed)"
        )
    return EcotoneError(f"{what}: refused with HTTP {status}")
