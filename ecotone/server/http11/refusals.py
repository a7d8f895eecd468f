"""Every answer the HTTP front door gives on its own, before or instead of a route: each an
`HttpResponse` with `close=True`, since after it the connection's framing cannot be trusted
(a body left unread, a head cut short, bytes that are not HTTP) or the client may not go on.

Error frames (`error_response`) are ecotone's `Error` in JSON, with the status of its code
(`ecotone.specs.errors.HTTP_STATUS`), so a refusal reads like any other error of the API.
"""

from __future__ import annotations

from typing import Any

import h11
import msgspec

from ecotone.server.admission import Refusal
from ecotone.specs import Error, ErrorCode
from ecotone.specs.errors import HTTP_STATUS
from ecotone.specs.http import HttpResponse, json_response


def error_response(code: ErrorCode, message: str, **details: Any) -> HttpResponse:
    """An `Error` frame (id null) as an HTTP answer, with its code's status (400 if none)."""
    frame = Error(id=None, code=code, message=message, details=details)
    return HttpResponse(HTTP_STATUS.get(code, 400), msgspec.json.encode(frame))


def refused(refusal: Refusal) -> HttpResponse:
    """Admission said no (Host, Origin, token): 403, or 401 with `WWW-Authenticate: Bearer`
    (RFC 9110 §11.6.1: a 401 names the scheme that would do)."""
    answer = error_response(refusal.code, refusal.message)
    if refusal.status == 401:
        answer.headers.append(("www-authenticate", "Bearer"))
    answer.close = True
    return answer


def too_large(limit: int, size: int | None = None) -> HttpResponse:
    """413 for a body over `limit` bytes: `size` is the length it declared, None when it is
    sent in chunks (it is not read to its end to learn it)."""
    if size is None:
        answer = error_response(
            ErrorCode.TOO_LARGE, f"body over the limit of {limit} bytes", limit=limit
        )
    else:
        answer = error_response(
            ErrorCode.TOO_LARGE,
            f"body of {size} bytes is over the limit of {limit} bytes",
            size=size,
            limit=limit,
        )
    answer.close = True
    return answer


def head_too_large(limit: int) -> HttpResponse:
    """431: a request head (target and headers) over `limit` bytes."""
    answer = json_response(431, {"detail": f"request head over {limit} bytes"})
    answer.close = True
    return answer


def timed_out(seconds: float) -> HttpResponse:
    """408: the request did not arrive whole within `seconds` of its first byte."""
    answer = json_response(
        408, {"detail": f"request timed out: send the whole request within {seconds}s"}
    )
    answer.close = True
    return answer


def bad_request(exc: h11.RemoteProtocolError) -> HttpResponse:
    """What h11 refused to parse: 400, or the status it hints (431 for a head that grew past
    its limit while arriving in pieces)."""
    answer = json_response(exc.error_status_hint, {"detail": f"bad request: {exc}"})
    answer.close = True
    return answer


def at_capacity(message: str) -> HttpResponse:
    """503 from the connection gate (`ecotone.server.admission.ConnectionGate`), written
    before the request is read: a `capacity` error frame."""
    frame: dict[str, Any] = {
        "op": "error",
        "id": None,
        "code": "capacity",
        "message": message,
        "details": {},
    }
    answer = json_response(503, frame)
    answer.close = True
    return answer
