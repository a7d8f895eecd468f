"""The client end: ws+unix:///PATH opens a unix connection with the client core's streams and
shakes hands over it with ecotone's WebSocket channel, in both faces."""

from __future__ import annotations

from urllib.parse import urlsplit

from ecotone.client._async import net as async_net
from ecotone.client._async.websocket import AsyncWsChannel
from ecotone.client._core import Endpoint
from ecotone.client._handshake import WsClientProtocol
from ecotone.client._sync import net
from ecotone.client._sync.websocket import WsChannel


def _path(url: str) -> str:
    path = urlsplit(url).path
    if not path:
        raise ValueError(f"{url!r} names no socket: use ws+unix:///path/to.sock")
    return path


def _protocol(codec: str, token: str | None) -> WsClientProtocol:
    return WsClientProtocol(Endpoint("ws", "localhost", 80, "/"), codec, token=token)


class WsUnixChannels:
    """Opens ws+unix:// channels."""

    def open(self, url: str, codec: str, connect_timeout: float, token: str | None) -> WsChannel:
        stream = net.connect_unix(_path(url), timeout=connect_timeout, label=url)
        return WsChannel.over(stream, _protocol(codec, token), url, connect_timeout)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> AsyncWsChannel:
        stream = await async_net.connect_unix(_path(url), timeout=connect_timeout, label=url)
        return await AsyncWsChannel.over(stream, _protocol(codec, token), url, connect_timeout)
