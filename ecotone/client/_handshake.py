"""WebSocket client framing shared by the blocking and async clients (wsproto, sans-IO)."""

from __future__ import annotations

from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.specs import SUBPROTOCOLS


class WsClientProtocol:
    """Client side of one WebSocket: handshake, message framing, control frames."""

    def __init__(
        self, host: str, port: int, path: str, codec: str, *, negotiate: bool = True
    ) -> None:
        """`negotiate=False` offers no subprotocol (OpenEnv's `/ws` speaks plain JSON)."""
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.subprotocol = next(k for k, v in SUBPROTOCOLS.items() if v == codec)
        self.binary = codec == "msgpack"
        offered = [self.subprotocol] if negotiate else []
        self._request = Request(host=f"{host}:{port}", target=path, subprotocols=offered)
        self._parts: list[Any] = []
        self.accepted = False
        self.closed = False
        self.outgoing = b""

    def opening(self) -> bytes:
        return self.ws.send(self._request)

    def message(self, data: bytes) -> bytes:
        if self.binary:
            return self.ws.send(BytesMessage(data=data))
        return self.ws.send(TextMessage(data=data.decode()))

    def close(self) -> bytes:
        if self.closed or not self.accepted:
            return b""
        self.closed = True
        try:
            return self.ws.send(CloseConnection(code=1000))
        except Exception:
            return b""

    def feed(self, data: bytes) -> list[bytes | str]:
        """Feed received bytes; return complete messages. Control-frame replies to send are
        left in `outgoing`."""
        if not data:
            self.closed = True
            raise ConnectionLost("the server closed the connection")
        self.ws.receive_data(data)
        messages: list[bytes | str] = []
        for event in self.ws.events():
            if isinstance(event, Message):
                if event.message_finished and not self._parts:
                    messages.append(event.data)
                else:
                    self._parts.append(event.data)
                    if event.message_finished:
                        joined: Any = ("" if isinstance(event, TextMessage) else b"").join(
                            self._parts
                        )
                        messages.append(joined)
                        self._parts = []
            elif isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, Ping):
                self.outgoing += self.ws.send(event.response())
            elif isinstance(event, CloseConnection):
                if not self.closed:
                    self.outgoing += self.ws.send(event.response())
                self.closed = True
                raise ConnectionLost(
                    f"the server closed the connection ({event.code}: {event.reason})"
                )
            elif isinstance(event, RejectConnection):
                self.closed = True
                raise EcotoneError(f"the server refused the WebSocket: HTTP {event.status_code}")
            elif isinstance(event, RejectData):
                pass
        return messages

    def take_outgoing(self) -> bytes:
        data, self.outgoing = self.outgoing, b""
        return data
