"""Reading HTTP/1.1 requests off one connection (h11 on trio): every outcome is a value.

`RequestReader.next()` reads one request and says what to do with it:

* an `HttpRequest` to route (its body read, its URL and headers parsed once, admitted);
* an `Upgrade` (the request asks for a WebSocket: its head, and the bytes after it);
* an `HttpResponse` to send before closing (a refusal from `refusals`);
* None: the client left, or stayed idle past `KEEPALIVE_TIMEOUT`.

Each check is made once, in this order: the head within `REQUEST_TIMEOUT` and `MAX_HEAD`
bytes; admission (Host, Origin, token: `Admission.admit`); the upgrade; the declared size
(before any `100 Continue`, so a client is not invited to send what will be refused); the
size as the body arrives (chunked bodies declare none). Deadlines are per read
(`receive_within`), so no cancel scope wraps the logic and nothing has to raise to leave one.
h11's own errors stop here too: a `RemoteProtocolError` is answered `bad_request`.

Responses are not written through h11 (`HttpResponse.serialize` writes them), so h11 never
sees a cycle end; `next_cycle` starts a fresh `h11.Connection` with the bytes the old one
holds (a pipelined next request). Keep-alive is this module's rule, h11's own: a request not
in HTTP/1.1, or with `close` among its Connection tokens, closes the connection after its
answer (`HttpRequest.must_close`).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

import attrs
import h11
import trio

from ecotone.server.admission import Admission
from ecotone.server.http11 import refusals
from ecotone.server.sockets import receive_within
from ecotone.specs.http import CONTINUE, HttpRequest, HttpResponse

REQUEST_TIMEOUT = 10.0
"""Seconds a client has to send a whole request once it has started one."""
KEEPALIVE_TIMEOUT = 75.0
"""Seconds an idle keep-alive connection is kept open."""
MAX_HEAD = 16384
"""Bytes of a request's target and headers."""
RECEIVE_SIZE: Final = 65536


@attrs.frozen
class Upgrade:
    """A request asking to switch to WebSocket: what the front door hands the transport."""

    request: HttpRequest
    """Its head, parsed and admitted (path, query, headers, principal); no body."""
    pending: bytes
    """The bytes after the head: the first WebSocket frames, when sent with it."""


Outcome = HttpRequest | Upgrade | HttpResponse | None

_LATE: Final = object()
"""`_event`'s answer when the request's deadline passed."""


def is_websocket_upgrade(headers: dict[str, str]) -> bool:
    """Whether a request asks to switch to WebSocket (RFC 6455 §4.2.1: `Upgrade: websocket`
    and `upgrade` among the Connection tokens); the transport checks the rest."""
    return headers.get("upgrade", "").lower() == "websocket" and (
        "upgrade" in headers.get("connection", "").lower()
    )


def _closes(headers: dict[str, str], version: bytes) -> bool:
    """h11's keep-alive rule (`h11._connection._keep_alive`): not HTTP/1.1, or `close`
    among the Connection tokens."""
    if version < b"1.1":
        return True
    connection = headers.get("connection")
    return connection is not None and "close" in [
        token.strip() for token in connection.lower().split(",")
    ]


class RequestReader:
    """Reads the requests of one connection, one `next()` at a time."""

    def __init__(
        self, stream: trio.abc.Stream, admission: Admission, max_body: int, peer: str
    ) -> None:
        self.stream = stream
        self.admission = admission
        self.max_body = max_body
        """Bytes a body may hold (`limits.max_frame_bytes`)."""
        self.peer = peer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        """This cycle's parser; an ASGI answer is written through it (`serve_asgi`)."""
        self._deadline: float | None = None

    def next_cycle(self) -> None:
        """Be ready for the next request: a fresh parser holding what the last one had read
        past its request (and whether the client had closed)."""
        data, closed = self.conn.trailing_data
        self.conn = conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        if data:
            conn.receive_data(data)
        if closed:
            conn.receive_data(b"")

    def _over(self, size: int) -> bool:
        """The size rule, for the declared length and for the length read so far alike."""
        return size > self.max_body

    async def next(self) -> Outcome:
        """The next request of this connection, or what to do instead (module docstring)."""
        self._deadline = None
        try:
            return await self._next()
        except h11.RemoteProtocolError as exc:
            return refusals.bad_request(exc)

    async def _event(self) -> Any:
        """h11's next event, reading while it needs more: all within REQUEST_TIMEOUT of the
        first read this request waits for (_LATE when that passes)."""
        conn = self.conn
        event = conn.next_event()
        while event is h11.NEED_DATA:
            if self._deadline is None:
                self._deadline = trio.current_time() + REQUEST_TIMEOUT
            left = max(0.0, self._deadline - trio.current_time())
            data = await receive_within(self.stream, RECEIVE_SIZE, left)
            if data is None:
                return _LATE
            conn.receive_data(data)
            event = conn.next_event()
        return event

    async def _next(self) -> Outcome:
        conn = self.conn
        if not conn.trailing_data[0]:  # idle: wait (long) for the next request's first byte
            first = await receive_within(self.stream, RECEIVE_SIZE, KEEPALIVE_TIMEOUT)
            if not first:  # closed, or idle past the keep-alive timeout
                return None
            conn.receive_data(first)
        event = await self._event()
        if event is _LATE:
            return refusals.timed_out(REQUEST_TIMEOUT)
        if type(event) is not h11.Request:  # ConnectionClosed: nothing more will come
            return None
        head_size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
        if head_size > MAX_HEAD:  # h11 limits only a head that arrives in pieces
            return refusals.head_too_large(MAX_HEAD)
        headers: dict[str, str] = {}
        for name, value in event.headers:  # h11 gives the names lower-cased
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        method = event.method.decode("ascii")
        parts = urlsplit(event.target.decode("latin-1"))
        query = dict(parse_qsl(parts.query)) if parts.query else {}
        refusal, principal = self.admission.admit(headers, query, parts.path, method)
        if refusal is not None:  # Host, Origin, token: before anything else
            return refusals.refused(refusal)
        request = HttpRequest(
            method,
            parts.path or "/",
            query,
            headers,
            b"",
            # Framed two ways at once (RFC 9112 §6.1), or no keep-alive: answer, then close.
            must_close=("content-length" in headers and "transfer-encoding" in headers)
            or _closes(headers, event.http_version),
            peer=self.peer,
            principal=principal,
        )
        if is_websocket_upgrade(headers):
            return Upgrade(request, conn.trailing_data[0])
        declared = int(headers.get("content-length", "0") or 0)
        if self._over(declared):
            return refusals.too_large(self.max_body, declared)
        if conn.they_are_waiting_for_100_continue:  # RFC 9110 §10.1.1
            await self.stream.send_all(CONTINUE)
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self._event()
            kind = type(event)
            if kind is h11.Data:
                size += len(event.data)
                if self._over(size):
                    return refusals.too_large(self.max_body)
                chunks.append(bytes(event.data))
            elif kind is h11.EndOfMessage:
                break
            elif event is _LATE:
                return refusals.timed_out(REQUEST_TIMEOUT)
            else:  # ConnectionClosed
                return None
        request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return request
