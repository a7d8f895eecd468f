"""Exceptions a client raises. Server errors keep the protocol's stable code and details."""

from __future__ import annotations

from typing import Any

from ecotone.wire import Error, ErrorCode


class EcotoneError(Exception):
    """Base of everything ecotone's clients raise."""


class ServerError(EcotoneError):
    """The server answered a request with an error frame.

    `code` is the stable error code (`ErrorCode`), `details` its structured details: for
    `invalid_action`, `details["field"]` names the bad field.
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
        kind = _BY_CODE.get(frame.code, ServerError)
        return kind(str(frame.code), frame.message, dict(frame.details), frame.session)


class InvalidActionError(ServerError, ValueError):
    """The action failed validation; `field` names the bad field."""

    @property
    def field(self) -> str:
        return str(self.details.get("field", ""))


class CapacityError(ServerError):
    """The server holds as many sessions as it allows."""


class EnvError(ServerError):
    """The environment raised; the session stays open and can be reset."""


class ConnectionLost(EcotoneError, ConnectionError):
    """The connection closed or broke; requests in flight have no answer."""


_BY_CODE: dict[str, type[ServerError]] = {
    ErrorCode.INVALID_ACTION: InvalidActionError,
    ErrorCode.CAPACITY: CapacityError,
    ErrorCode.ENV_ERROR: EnvError,
}
