"""A small blocking WebSocket client for raw-protocol tests: wsproto over a plain socket.

Unlike ecotone's clients it sends whatever it is given (garbage, fragments, text on a binary
subprotocol) and returns replies exactly as they arrive. It answers server pings only while a
test reads (`recv`), so a test that stops reading behaves like a peer that stopped answering.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import Any, Self
from urllib.parse import urlsplit

import msgspec
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

JSON = "ecotone.v1.json"
MSGPACK = "ecotone.v1.msgpack"


class HandshakeRefused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class RawWebSocket:
    """One WebSocket connection, driven by hand."""

    def __init__(
        self,
        url: str,
        *,
        subprotocol: str | None = JSON,
        path: str = "/",
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.binary = subprotocol == MSGPACK
        self.timeout = timeout
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self._messages: list[bytes | str] = []
        self._parts: list[Any] = []
        self.closed_by_server = False
        self.close_code: int | None = None
        """The code of the server's close frame, once one arrived."""
        self._accepted: str | None = None
        self.pings_answered = 0
        request = Request(
            host=f"{parts.hostname}:{parts.port}",
            target=path,
            subprotocols=[subprotocol] if subprotocol else [],
            extra_headers=[(k.encode(), v.encode()) for k, v in (headers or {}).items()],
        )
        self.sock.sendall(self.ws.send(request))
        self.subprotocol: str | None = None
        deadline = time.monotonic() + timeout
        while True:
            self._pump(deadline)
            if self._accepted is not None:
                self.subprotocol = self._accepted
                break

    # --- sending --------------------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=text)))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def send_message(self, data: bytes) -> None:
        """Send encoded frame bytes in the connection's message kind (text or binary)."""
        if self.binary:
            self.send_bytes(data)
        else:
            self.send_text(data.decode())

    def send_fragments(self, chunks: list[bytes]) -> None:
        """Send one message split over several WebSocket frames."""
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            event: Message[Any] = (
                BytesMessage(data=chunk, message_finished=last)
                if self.binary
                else TextMessage(data=chunk.decode(), message_finished=last)
            )
            self.sock.sendall(self.ws.send(event))

    def encode(self, frame: dict[str, Any]) -> bytes:
        if self.binary:
            return msgspec.msgpack.encode(frame)
        return msgspec.json.encode(frame)

    def send(self, frame: dict[str, Any]) -> None:
        self.send_message(self.encode(frame))

    # --- receiving ------------------------------------------------------------------------

    def _pump(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no message from the server in time")
        self.sock.settimeout(remaining)
        data = self.sock.recv(65536)
        if not data:
            self.closed_by_server = True
            raise ConnectionError("the server closed the connection")
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self._accepted = event.subprotocol or ""
            elif isinstance(event, RejectConnection):
                raise HandshakeRefused(event.status_code)
            elif isinstance(event, Ping):
                self.pings_answered += 1
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                # Messages that came before the close in the same chunk stay readable.
                self.closed_by_server = True
                self.close_code = event.code
            elif isinstance(event, Message):
                self._parts.append(event.data)
                if event.message_finished:
                    joined: Any = ("" if isinstance(event, TextMessage) else b"").join(self._parts)
                    self._messages.append(joined)
                    self._parts = []

    def recv_raw(self, timeout: float | None = None) -> bytes | str:
        """The next complete message, as it came (str for text, bytes for binary)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._messages:
            if self.close_code is not None:
                raise ConnectionError(f"close frame from the server: {self.close_code}")
            self._pump(deadline)
        return self._messages.pop(0)

    def wait_closed(self, timeout: float | None = None) -> int:
        """Read until the server's close frame; return its code (unread messages are kept)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while self.close_code is None:
            self._pump(deadline)
        return self.close_code

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        raw = self.recv_raw(timeout)
        if isinstance(raw, str):
            assert not self.binary, "text message on a msgpack connection"
            return msgspec.json.decode(raw)
        assert self.binary, "binary message on a JSON connection"
        return msgspec.msgpack.decode(raw)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request with a fresh id and return its answer (which must carry the id)."""
        rid = self.next_id()
        self.send({"op": op, "id": rid, **fields})
        reply = self.recv()
        assert reply.get("id") == rid, reply
        return reply

    def open_session(self, env: str | None = None) -> str:
        reply = self.request("open", **({"env": env} if env else {}))
        assert reply["op"] == "opened", reply
        return str(reply["session"])

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        except Exception:
            pass
        self.sock.close()

    def abort(self) -> None:
        """Drop the TCP connection without a close frame (RST, as a crashed peer would)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
