"""The `tcp` and `unix` transports' client end: tcp://HOST:PORT, tcp+tls://HOST:PORT and
unix:///PATH URLs, length-prefixed frames on the client core's framed channel
(`ecotone.client.framed`). These channels have no headers: a token goes in `hello`.
"""

from __future__ import annotations

from ecotone.client.framed import FramedAsyncChannel, FramedSyncChannel


class FramedChannels:
    """Opens framed channels for tcp://, tcp+tls:// and unix:// (and stdio:) URLs."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> FramedSyncChannel:
        return FramedSyncChannel(url, connect_timeout)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> FramedAsyncChannel:
        return await FramedAsyncChannel.open(url, connect_timeout)
