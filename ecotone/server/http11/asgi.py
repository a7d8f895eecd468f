"""One HTTP/1.1 request handed to an ASGI application, on the front door's connection.

The front door parses the request itself (`reader.py`: limits, admission, body) and then, for a
route served by an ASGI app (the MCP SDK's streamable-HTTP manager at `/mcp`), runs the app
with a scope built from the parsed request and writes what it sends: with a Content-Length
when the app sends its body in one piece, chunked when it streams (Server-Sent Events).

`receive()` gives the body once; called again, it waits until the client goes away (end of
file on the socket, seen by a task of this request that reads while the app runs) and says
`http.disconnect`, which is how a streaming app learns its listener left. Bytes the client
sends meanwhile (a pipelined request) are kept for the connection's next cycle, up to a
bound. Writes are serialized: an app may send from two tasks at once. The scope's `state`
holds `ecotone.principal`: the number of the token the request showed, as admission found it
(None: none, or none needed), so the app need not check the token again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlencode

import attrs
import h11
import trio

from ecotone.specs.http import HttpRequest, HttpResponse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

PRINCIPAL: Final = "ecotone.principal"
"""The scope's `state` key for the number of the token the request showed."""
RECEIVE_SIZE = 65536
KEPT_BYTES = 1 << 20
"""Bytes of a next request kept while an app streams; a client sending more is dropped."""


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


@attrs.define
class Streamed:
    """A route's answer that is an ASGI app to run (see `serve_asgi`)."""

    app: App


async def serve_asgi(
    app: App,
    request: HttpRequest,
    stream: trio.abc.Stream,
    conn: h11.Connection,
    client: tuple[str, int] | None = None,
) -> bool:
    """Run `app` for `request` and write its answer on `conn`. Returns whether the
    connection can carry another request (False: the client went, or the answer was cut)."""
    gone = trio.Event()
    body_given = False

    async def watch() -> None:
        # Until end of file: a pipelined next request is left in h11's buffer; a client that
        # sends more than KEPT_BYTES while its answer streams is treated as gone.
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data or len(conn.trailing_data[0]) + len(data) > KEPT_BYTES:
                gone.set()
                return
            conn.receive_data(bytes(data))

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    status: int | None = None
    headers: list[tuple[bytes, bytes]] = []
    head_sent = False
    ended = False

    writing = trio.Lock()  # an app may send from two tasks at once (SSE data and pings)

    async def send(message: Message) -> None:
        async with writing:
            await write(message)

    async def write(message: Message) -> None:
        nonlocal status, headers, head_sent, ended
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            return
        if kind != "http.response.body" or ended:
            return
        if status is None:
            raise RuntimeError("an ASGI app sent a body before http.response.start")
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        data = b""
        if not head_sent:
            head_sent = True
            names = {k.lower() for k, _ in headers}
            if not more and b"content-length" not in names:
                headers.append((b"content-length", str(len(body)).encode()))
            if request.must_close:  # framed two ways at once (RFC 9112 §6.1): answer, close
                headers = [(k, v) for k, v in headers if k.lower() != b"connection"]
                headers.append((b"connection", b"close"))
            data += conn.send(
                h11.Response(status_code=status, headers=headers, reason=_reason(status))
            )
        if body and request.method != "HEAD":
            data += conn.send(h11.Data(data=body))
        if not more:
            data += conn.send(h11.EndOfMessage())
            ended = True
        await stream.send_all(data)

    path = request.path
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": urlencode(request.query).encode(),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()],
        "client": client,
        "server": None,
        "state": {PRINCIPAL: request.principal},
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)  # reads only after the body: h11 has consumed it already
        await app(scope, receive, send)
        nursery.cancel_scope.cancel()
    if not head_sent:  # the app answered nothing: a bug of its, told as one
        await stream.send_all(HttpResponse(500).serialize(close=request.must_close))
        return not request.must_close
    if not ended or request.must_close:  # cut short, or framed two ways: close
        return False
    return not gone.is_set() and conn.our_state is not h11.MUST_CLOSE
