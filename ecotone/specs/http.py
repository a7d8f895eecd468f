"""Plain HTTP request/response records passed between the HTTP front door and route handlers,
and the one writer of HTTP/1.1 responses (`HttpResponse.serialize`)."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

import attrs
import msgspec

JSON = "application/json"
MSGPACK = "application/msgpack"


@attrs.define(slots=True)
class HttpRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Lower-cased names; repeated headers joined with `, `."""
    body: bytes
    must_close: bool = False
    """The connection closes after the answer: a request framed two ways at once, or one
    that keeps no connection alive (HTTP/1.0, or `Connection: close`)."""
    peer: str = ""
    """The client's address (what per-client limits count by)."""
    principal: int | None = None
    """Which of the server's tokens the request showed (None: none, or none needed)."""
    content_type: str = attrs.field(
        default=attrs.Factory(lambda self: media_type(self.headers), takes_self=True)
    )
    """The body's media type, lower-cased, without parameters ("" when none is given):
    computed once, from `headers` unless given."""

    def cookie(self, name: str) -> str | None:
        return cookie(self.headers, name)


def media_type(headers: Mapping[str, str]) -> str:
    """`Content-Type` without its parameters, lower-cased: `application/json`."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def cookie(headers: Mapping[str, str], name: str) -> str | None:
    """The value of cookie `name` in a request's (lower-cased) `headers`."""
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


STATUS_LINES: Final[dict[int, bytes]] = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode("ascii"))
    for status in HTTPStatus
}
"""Every status line this server writes, built once (a code Python does not know is written
with an empty reason phrase, which RFC 9112 §4 allows)."""


@attrs.define(slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    """Sent in order after content-type and content-length, names as given."""
    close: bool = False
    """The connection ends after this answer (every refusal)."""

    def serialize(self, *, head: bool = False, close: bool = False) -> bytes:
        """The whole answer as bytes: the only writer of HTTP/1.1 responses (websockets'
        `Response.serialize`). The status line with its reason phrase; for 1xx, 204 and 304
        no content headers and no body (RFC 9110 §8.6, §15.2), else content-type and
        content-length (`head`: the GET's length and no body, RFC 9110 §9.3.2); then
        `headers` in order; then `connection: close` when `close` or `self.close`.

        Raises ValueError for a header holding CR or LF: a value must not be able to end its
        line and start a header, or an answer, of its own."""
        status = self.status
        line = STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status
        body = self.body
        if status < 200 or status == 204 or status == 304:
            text = ""
            body = b""
        else:
            text = f"content-type: {self.content_type}\r\ncontent-length: {len(body)}\r\n"
            if head:
                body = b""
        for name, value in self.headers:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise ValueError(f"header {name!r} holds a line break")
            text += f"{name}: {value}\r\n"
        if close or self.close:
            text += "connection: close\r\n"
        return line + (text + "\r\n").encode("latin-1") + body


CONTINUE: Final = HttpResponse(100).serialize()
"""The interim answer to `Expect: 100-continue` (RFC 9110 §10.1.1)."""


def json_response(
    status: int, value: Any, headers: list[tuple[str, str]] | None = None
) -> HttpResponse:
    return HttpResponse(status, msgspec.json.encode(value), JSON, headers or [])


def speaks_streamable_http(method: str, headers: Mapping[str, str]) -> bool:
    """Whether a request to `/mcp` is MCP's streamable-HTTP transport (not OpenEnv's plain
    JSON-RPC POSTs): such a client accepts `text/event-stream` on every POST (MCP spec,
    transports), sends `Mcp-Session-Id` / `MCP-Protocol-Version` once it has them, and GET
    and DELETE are the transport's too. `headers`: lower-cased names."""
    return (
        method in ("GET", "DELETE")
        or "mcp-session-id" in headers
        or "mcp-protocol-version" in headers
        or "text/event-stream" in headers.get("accept", "")
    )
