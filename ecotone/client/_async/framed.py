# unasync: the source of ecotone/client/_sync/framed.py
"""Channels for length-prefixed frames: tcp://, tcp+tls://, unix:// and stdio: (a subprocess's
pipes), the client ends of the `tcp`, `unix` and `stdio` transports.

Written once, here, on the face's streams (`net`); scripts/unasync.py makes the blocking face
from it line for line (a plain socket or pipe: no event loop, no thread).
"""

from __future__ import annotations

import shlex
import sys
from urllib.parse import urlsplit

from ecotone.client._async import net
from ecotone.client.errors import ConnectionLost
from ecotone.specs.framing import FrameDecoder, TooLarge, encode

RECEIVE_SIZE = 65536
MAX_INCOMING = 1 << 31  # the server enforces its own limit; the client trusts its server


class AsyncFramedChannel:
    """Frames over a stream: a socket, or a child process's stdin and stdout. `receive`
    returns at least one frame; the end of the stream is ConnectionLost, saying why."""

    needs_hello = True
    """No headers here: a token goes in the connection's first frame, `hello`."""

    def __init__(self, stream: net.AsyncStream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(MAX_INCOMING)

    async def send(self, data: bytes) -> None:
        await self.stream.send(encode(data))

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while True:
            data = await self.stream.receive(RECEIVE_SIZE, deadline)
            if not data:
                raise ConnectionLost(self.stream.gone())
            frames = [f for f in self._decoder.feed(data) if not isinstance(f, TooLarge)]
            if frames:
                return frames  # type: ignore[return-value]

    def fileno(self) -> int | None:
        return self.stream.fileno()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def open_channel(
    url: str,
    codec: str,
    connect_timeout: float,
    token: str | None,
) -> AsyncFramedChannel:
    """A channel for tcp://HOST:PORT, tcp+tls://HOST:PORT, unix:///PATH or stdio:ENV (or
    stdio:COMMAND ARGS). ValueError for a malformed URL; ConnectionLost when nothing answers.
    `codec` and `token` are the connection's business (the first frame says both)."""
    if url.startswith("stdio:"):
        command = stdio_command(url)
        return AsyncFramedChannel(
            await net.open_process(command, timeout=connect_timeout, label=url),
        )
    parts = urlsplit(url)
    if parts.scheme == "unix":
        path = parts.path or parts.netloc
        if not path:
            raise ValueError(f"unix URL {url!r} has no path: use unix:///path/to.sock")
        return AsyncFramedChannel(
            await net.connect_unix(path, timeout=connect_timeout, label=url),
        )
    if not parts.hostname or not parts.port:
        raise ValueError(f"tcp URL {url!r} needs a host and a port: tcp://HOST:PORT")
    host, port, tls = parts.hostname, parts.port, parts.scheme == "tcp+tls"
    stream = await net.connect_tcp(host, port, tls=tls, timeout=connect_timeout, label=url)
    return AsyncFramedChannel(stream)


def stdio_command(url: str) -> list[str]:
    """`stdio:ENV` -> serve ENV in a subprocess of this Python; `stdio:CMD ARGS` -> run CMD."""
    target = url.split(":", 1)[1].strip()
    if target.startswith("//"):
        target = target[2:]
    if not target:
        raise ValueError("stdio URL names nothing: use stdio:ENV or stdio:COMMAND ARGS")
    if " " in target:
        return shlex.split(target)
    return [sys.executable, "-m", "ecotone", "serve", target, "--transport", "stdio"]
