"""WebSocket client protocol shared by the blocking and async clients, sans-IO.

The opening handshake is parsed with h11 (so bytes that follow the 101 response in the same
read, such as a frame the server sends at once, are kept); frames are read and written with
`ecotone.specs.wsframing`, which costs far less per message than a general event machine.
"""

from __future__ import annotations

import h11

from ecotone.client._core import Endpoint
from ecotone.client.errors import ConnectionLost, EcotoneError, refused
from ecotone.specs import SUBPROTOCOLS
from ecotone.specs import wsframing as wsf

MAX_MESSAGE = 1 << 31  # the client trusts its server; the server enforces its own limit


class WsClientProtocol:
    """Client side of one WebSocket: handshake, message framing, control frames."""

    def __init__(
        self, endpoint: Endpoint, codec: str, *, negotiate: bool = True, token: str | None = None
    ) -> None:
        """The WebSocket at `endpoint`. `negotiate=False` offers no subprotocol (OpenEnv's
        `/ws` speaks plain JSON); `token`: sent as `Authorization: Bearer`."""
        host, port = endpoint.host, endpoint.port
        self.subprotocol = next(k for k, v in SUBPROTOCOLS.items() if v == codec)
        self.binary = codec == "msgpack"
        self._opcode = wsf.BINARY if self.binary else wsf.TEXT
        self._offered = [self.subprotocol] if negotiate else []
        self._key = wsf.new_key()
        self._host = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6: brackets
        self._path = endpoint.path or "/"
        self._token = token
        self._h11: h11.Connection | None = h11.Connection(h11.CLIENT)
        # The server's text is JSON the client decodes (and so checks) anyway.
        self._reader = wsf.FrameReader(masked=False, max_message=MAX_MESSAGE, check_text=False)
        self.accepted = False
        self.closed = False
        self.outgoing = b""
        self._close_reason = ""

    def opening(self) -> bytes:
        headers = [
            ("host", self._host),
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", self._key),
            ("sec-websocket-version", "13"),
        ]
        if self._offered:
            headers.append(("sec-websocket-protocol", ", ".join(self._offered)))
        if self._token:
            headers.append(("authorization", f"Bearer {self._token}"))
        assert self._h11 is not None
        return self._h11.send(h11.Request(method="GET", target=self._path, headers=headers))

    def message(self, data: bytes) -> bytes:
        return wsf.encode(self._opcode, data, mask=True)

    def close(self) -> bytes:
        if self.closed or not self.accepted:
            return b""
        self.closed = True
        return wsf.encode(wsf.CLOSE, wsf.close_payload(1000), mask=True)

    def _handshake(self, data: bytes) -> bytes:
        """Feed handshake bytes; return what follows the 101 response once it is complete."""
        conn = self._h11
        assert conn is not None
        conn.receive_data(data)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return b""
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                headers = {k.lower(): v for k, v in event.headers}
                if headers.get(b"sec-websocket-accept", b"").decode() != wsf.accept_key(self._key):
                    raise EcotoneError("the server's WebSocket handshake has a wrong accept key")
                chosen = headers.get(b"sec-websocket-protocol", b"").decode()
                if chosen and chosen not in self._offered:
                    raise EcotoneError(f"the server chose a subprotocol never offered: {chosen}")
                self.accepted = True
                trailing = bytes(conn.trailing_data[0])
                self._h11 = None
                return trailing
            if isinstance(event, h11.Response):
                self.closed = True
                if event.status_code in (401, 403):
                    raise refused(
                        event.status_code, "the server refused the WebSocket", bool(self._token)
                    )
                raise EcotoneError(
                    f"the server refused the WebSocket: HTTP {event.status_code} "
                    f"{event.reason.decode(errors='replace')}"
                )
            if isinstance(event, h11.ConnectionClosed):
                raise ConnectionLost("the server closed the connection during the handshake")

    def feed(self, data: bytes) -> list[bytes | str]:
        """Feed received bytes; return complete messages. Replies to control frames (pong,
        close) are left in `outgoing`."""
        if self._close_reason:
            raise ConnectionLost(self._close_reason)
        if not data:
            self.closed = True
            raise ConnectionLost("the server closed the connection")
        if not self.accepted:
            try:
                data = self._handshake(data)
            except h11.ProtocolError as exc:
                raise EcotoneError(f"not a WebSocket server: {exc}") from exc
            if not data:
                return []
        try:
            events = self._reader.feed(data)
        except wsf.ProtocolError as exc:
            self.closed = True
            raise ConnectionLost(f"the server broke the WebSocket protocol: {exc}") from exc
        messages: list[bytes | str] = []
        for event in events:
            if isinstance(event, wsf.Message):
                messages.append(event.data)
            elif isinstance(event, wsf.Control):
                if event.opcode == wsf.PING:
                    self.outgoing += wsf.encode(wsf.PONG, event.payload, mask=True)
                elif event.opcode == wsf.CLOSE:
                    if not self.closed:
                        self.outgoing += wsf.encode(wsf.CLOSE, event.payload[:2], mask=True)
                    self.closed = True
                    reason = event.payload[2:].decode(errors="replace")
                    self._close_reason = (
                        f"the server closed the connection ({event.close_code}: {reason})"
                    )
                    if not messages:  # else hand over what came first; raise on the next read
                        raise ConnectionLost(self._close_reason)
                    break
        return messages

    def take_outgoing(self) -> bytes:
        data, self.outgoing = self.outgoing, b""
        return data
