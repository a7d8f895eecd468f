"""The `websocket` transport's client end: ws:// and wss:// URLs.

`ws://HOST:PORT/PATH` (PATH `/` by default) opens one WebSocket that carries every session of
the connection; the codec is offered as a subprotocol and the token sent as a bearer header.
The channels themselves (`ecotone.client.websocket`) are the client core's: the OpenEnv
profile's client end opens them too.
"""

from __future__ import annotations

from ecotone.client._core import parse_url
from ecotone.client.websocket import WsAsyncChannel, WsSyncChannel


class WebSocketChannels:
    """Opens ws:// (or, with `tls`, wss://) channels."""

    def __init__(self, *, tls: bool) -> None:
        self.tls = tls

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> WsSyncChannel:
        ep = parse_url(url)
        return WsSyncChannel(
            ep.host, ep.port, ep.path, codec, connect_timeout, token=token, tls=self.tls
        )

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> WsAsyncChannel:
        ep = parse_url(url)
        return await WsAsyncChannel.open(
            ep.host, ep.port, ep.path, codec, connect_timeout, token=token, tls=self.tls
        )
