"""Channels: how a client moves frame bytes to a server and back.

A channel knows nothing of frames: it sends one message and returns the messages that have
arrived. Each transport's client end contributes a `ChannelFactory` for its URL schemes
through the `ecotone_channels` hook (`ecotone/transports/*/client*` for the bundled ones:
`Faces` of a channel module written once, as async source, and its generated blocking face),
and `open_sync_channel` / `open_async_channel` pick one by the URL's scheme. The table is
read from the plugins once per process (and again for a scheme it does not know, so a
transport installed meanwhile is found).
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import Any, Protocol


class SyncChannel(Protocol):
    def send(self, data: bytes) -> None: ...
    def receive(self, deadline: float | None) -> list[bytes | str]: ...
    def close(self) -> None: ...


class AsyncChannel(Protocol):
    async def send(self, data: bytes) -> None: ...
    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        """The messages that arrived (waiting for some). The caller bounds the wait with a
        cancel scope; `deadline` is there so both faces' channels take the same call."""
        ...

    async def aclose(self) -> None: ...


class ChannelFactory(Protocol):
    """What a transport's client end registers for its URL schemes (`ecotone_channels`).

    Both methods connect to `url` and return a channel, or raise `ConnectionLost` (nothing
    answers), `EcotoneError` (something answered that is not this transport's server) or
    `ValueError` (the URL is malformed). `token`: shown where the transport has headers; a
    channel without them sets `needs_hello = True` and the connection sends it in `hello`."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> SyncChannel: ...

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> AsyncChannel: ...


_lock = threading.Lock()
_factories: dict[str, Any] | None = None


def channel_factory(url: str) -> ChannelFactory:
    """The factory registered for `url`'s scheme. ValueError names the schemes installed."""
    global _factories
    scheme = url.split(":", 1)[0]
    factories = _factories
    if factories is None or scheme not in factories:
        from ecotone.kernel.registry import Registry

        with _lock:
            factories = _factories = {
                name: entry.value for name, entry in Registry.discover().channels().items()
            }
    factory = factories.get(scheme)
    if factory is None:
        known = ", ".join(f"{name}://" for name in sorted(factories)) or "none"
        raise ValueError(f"no installed transport handles {scheme}:// URLs (installed: {known})")
    return factory


def open_sync_channel(
    url: str, codec: str, connect_timeout: float, token: str | None = None
) -> SyncChannel:
    """A blocking channel for `url`, from the transport that registered its scheme."""
    return channel_factory(url).open(url, codec, connect_timeout, token)


async def open_async_channel(
    url: str, codec: str, connect_timeout: float, token: str | None = None
) -> AsyncChannel:
    """An async channel for `url`, from the transport that registered its scheme."""
    return await channel_factory(url).aopen(url, codec, connect_timeout, token)


class Faces:
    """A `ChannelFactory` made of one channel module written once: `source`, the async face
    (a module path with `._async` in it), and the blocking face scripts/unasync.py generates
    from it (`._sync` in its place). Each face's `open_channel(url, codec, connect_timeout,
    token)` opens the channels; its module is imported when it first opens one, so a process
    that uses one face never imports the other."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.blocking = re.sub(r"\._async\b", "._sync", source)
        if self.blocking == source:
            raise ValueError(f"{source!r} is no async source: its path has no `._async`")

    def open(self, url: str, codec: str, connect_timeout: float, token: str | None) -> SyncChannel:
        face = importlib.import_module(self.blocking)
        return face.open_channel(url, codec, connect_timeout, token)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> AsyncChannel:
        face = importlib.import_module(self.source)
        return await face.open_channel(url, codec, connect_timeout, token)
