"""The `stdio` transport's client end: `stdio:ENV` serves ENV in a subprocess of this Python,
`stdio:COMMAND ARGS` runs COMMAND (`podman run -i --rm IMAGE`, say), and frames go over its
pipes on the client core's framed channel (`ecotone.client.framed`). The subprocess ends
when the channel closes.
"""

from __future__ import annotations

from ecotone.client.framed import FramedAsyncChannel, FramedSyncChannel


class StdioChannels:
    """Opens stdio: channels (a child process per channel)."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> FramedSyncChannel:
        return FramedSyncChannel(url, connect_timeout)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> FramedAsyncChannel:
        return await FramedAsyncChannel.open(url, connect_timeout)
