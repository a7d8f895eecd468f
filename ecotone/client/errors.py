"""Exceptions a client raises. Server errors keep the protocol's stable code and details."""

from __future__ import annotations

from typing import Any

from ecotone.specs import Error, ErrorCode


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


class AccessDenied(ServerError):
    """The server refused this client: `unauthorized` (no token, or a wrong one: pass
    `token=`, put `?token=` in the URL or set ECOTONE_TOKEN) or `forbidden` (the request's
    Host or Origin is not one the server allows)."""


class ConnectionLost(EcotoneError, ConnectionError):
    """The connection closed or broke; requests in flight have no answer."""


_BY_CODE: dict[str, type[ServerError]] = {
    ErrorCode.INVALID_ACTION: InvalidActionError,
    ErrorCode.CAPACITY: CapacityError,
    ErrorCode.ENV_ERROR: EnvError,
    ErrorCode.UNAUTHORIZED: AccessDenied,
    ErrorCode.FORBIDDEN: AccessDenied,
}


def refused(status: int, what: str, sent_token: bool = False) -> EcotoneError:
    """The error for an HTTP refusal of a handshake or request (`what`: which;
    `sent_token`: whether the request carried one)."""
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
