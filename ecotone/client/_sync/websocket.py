# Generated from ecotone/client/_async/websocket.py by scripts/unasync.py: do not edit.
"""WebSocket channels: ecotone's frames (or OpenEnv's messages) as WebSocket messages.

Written once, here, on the face's streams (`net`) and the sans-IO protocol (`_handshake`):
scripts/unasync.py makes the blocking face from it line for line, where a call costs one
`sendall` and one `recv` on a plain blocking socket (no event loop, no thread); in the async
face (trio or asyncio) what tasks send in one scheduling pass goes out in one write. The
`websocket` transport's client end opens these for ws:// and wss:// (`open_channel`), the
`openenv` transport's one per session.
"""

from __future__ import annotations

import time

from ecotone.client._sync import io, net
from ecotone.client._core import parse_url
from ecotone.client._handshake import WsClientProtocol
from ecotone.client.errors import ConnectionLost, EcotoneError

RECEIVE_SIZE = 65536


class WsChannel:
    """One WebSocket: the opening handshake in `open`, then messages both ways.

    `receive` returns what one read brought: messages, or none (a ping, answered at once; a
    late part of a message). A control frame's answer is written on the spot, shielded, so
    what was read is never lost to a cancellation."""

    def __init__(self, stream: net.Stream, proto: WsClientProtocol) -> None:
        self.stream = stream
        self.proto = proto
        self._early: list[bytes | str] = []

    @classmethod
    def open(
        cls,
        url: str,
        codec: str,
        connect_timeout: float,
        *,
        negotiate: bool = True,
        token: str | None = None,
    ) -> WsChannel:
        """Connect to `url` (ws:// or wss://) and shake hands, each within `connect_timeout`
        seconds. `negotiate=False` offers no subprotocol (OpenEnv's `/ws`); `token` goes in
        an `Authorization` header. Raises ConnectionLost (nothing answers, or the connection
        broke), AccessDenied (the token was refused) or EcotoneError (not a WebSocket server,
        or no handshake in time); the connection is closed then."""
        ep = parse_url(url)
        proto = WsClientProtocol(ep, codec, negotiate=negotiate, token=token)
        host, port, tls = ep.host, ep.port, ep.scheme.endswith(("wss", "https"))
        stream = net.connect_tcp(host, port, tls=tls, timeout=connect_timeout, label=url)
        return cls.over(stream, proto, url, connect_timeout)

    @classmethod
    def over(
        cls, stream: net.Stream, proto: WsClientProtocol, label: str, timeout: float
    ) -> WsChannel:
        """The opening handshake on a connected `stream` (a TCP connection, or any other a
        transport opened: a unix socket, a pipe), within `timeout` seconds; `label` names the
        server in errors. Raises as `open` does; `stream` is closed then."""
        channel = cls(stream, proto)
        deadline = time.monotonic() + timeout
        try:
            with io.bounded(deadline):
                stream.send(proto.opening())
                while not proto.accepted:
                    channel._early += channel.receive(deadline)
        except TimeoutError:
            stream.close()
            raise EcotoneError(
                f"{label} did not complete the WebSocket handshake within {timeout}s"
            ) from None
        except BaseException:  # refused, reset or closed while shaking hands, or cancelled
            stream.close()
            raise
        return channel

    @property
    def ready(self) -> bool:
        """Whether messages wait here already (they came with the handshake): the next
        `receive` returns them without reading."""
        return bool(self._early)

    def send(self, data: bytes) -> None:
        self.stream.send(self.proto.message(data))

    def receive(self, deadline: float | None = None) -> list[bytes | str]:
        if self._early:
            early, self._early = self._early, []
            return early
        messages = self.proto.feed(self.stream.receive(RECEIVE_SIZE, deadline))
        if self.proto.outgoing:  # a pong, or the answer to a close
            with io.shielded():
                try:
                    self.stream.send(self.proto.take_outgoing())
                except ConnectionLost:  # the next read says so, after what this one brought
                    pass
        return messages

    def fileno(self) -> int | None:
        return self.stream.fileno()

    def close(self) -> None:
        """Close the WebSocket (a close frame, if it is still open) and the connection."""
        self.stream.close(self.proto.close())


def open_channel(
    url: str,
    codec: str,
    connect_timeout: float,
    token: str | None,
) -> WsChannel:
    """A channel for a ws:// or wss:// URL: the `websocket` transport's client end."""
    return WsChannel.open(url, codec, connect_timeout, token=token)
