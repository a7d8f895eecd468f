"""Plain HTTP request/response records passed between the HTTP front door and route handlers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    """The connection closes after the answer (a request framed two ways at once)."""
    peer: str = ""
    """The client's address (what per-client limits count by)."""
    principal: int | None = None
    """Which of the server's tokens the request showed (None: none, or none needed)."""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    def cookie(self, name: str) -> str | None:
        return cookie(self.headers, name)


def cookie(headers: Mapping[str, str], name: str) -> str | None:
    """The value of cookie `name` in a request's (lower-cased) `headers`."""
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


@attrs.define(slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = JSON
    headers: list[tuple[str, str]] = attrs.field(factory=list)


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
