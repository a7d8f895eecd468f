"""Length-prefixed frames over any trio byte stream: the loop behind stdio, tcp and unix.

The lean native path: no HTTP, no WebSocket framing, no masking. One received chunk may
carry many frames (pipelining, many sessions on one connection); everything answered while
handling a chunk goes out in one write, as on the WebSocket transport.
"""

from __future__ import annotations

import logging
import math

import trio

from ecotone.kernel import Kernel, KernelConnection
from ecotone.server.transports._router import Router
from ecotone.wire import codec_for
from ecotone.wire.framing import FrameDecoder, TooLarge, detect_codec, encode

log = logging.getLogger("ecotone.framed")

RECEIVE_SIZE = 65536


class FramedConnection:
    """One peer, speaking length-prefixed frames over `receive` / `send` streams."""

    def __init__(
        self, kernel: Kernel, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream
    ) -> None:
        self.kernel = kernel
        self.receive = receive
        self.send = send
        self._lock = trio.Lock()
        self._sending = False
        self._idle: trio.Event | None = None
        self._batch: list[bytes] | None = None

    async def _send_frame(self, payload: bytes) -> None:
        data = encode(payload)
        if self._batch is not None:
            self._batch.append(data)
            return
        try:
            await self._send_bytes(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer is gone; the receive loop sees it and cleans up

    async def _send_bytes(self, data: bytes) -> None:
        """Write whole frames, one writer at a time. The usual case (nobody mid-write) takes
        no lock and no scheduler pass; otherwise wait for the writer in progress."""
        if not self._sending and not self._lock.locked():
            await self._write(data)
            return
        async with self._lock:
            while self._sending:
                if self._idle is None:
                    self._idle = trio.Event()
                await self._idle.wait()
            await self._write(data)

    async def _write(self, data: bytes) -> None:
        self._sending = True
        try:
            await self.send.send_all(data)
        finally:
            self._sending = False
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    async def run(self) -> None:
        kernel = self.kernel
        decoder = FrameDecoder(kernel.limits.max_frame_bytes)
        conn: KernelConnection | None = None
        try:
            async with trio.open_nursery() as nursery:
                router: Router | None = None
                try:
                    while True:
                        try:
                            data = await self.receive.receive_some(RECEIVE_SIZE)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            return
                        if not data:
                            return
                        self._batch = []
                        try:
                            for item in decoder.feed(bytes(data)):
                                if conn is None or router is None:
                                    name = (
                                        "json" if isinstance(item, TooLarge) else detect_codec(item)
                                    )
                                    conn = kernel.connect(codec_for(name))
                                    router = Router(kernel, conn, self._send_frame, nursery)
                                if isinstance(item, TooLarge):
                                    await self._send_frame(conn.encode(conn.too_large(item.size)))
                                else:
                                    await router.feed(item)
                        finally:
                            batch, self._batch = self._batch, None
                            if batch:
                                try:
                                    await self._send_bytes(b"".join(batch))
                                except (trio.BrokenResourceError, trio.ClosedResourceError):
                                    pass  # the next receive ends the loop
                finally:
                    if router is not None:
                        router.close()
                    nursery.cancel_scope.cancel()
        finally:
            stopping = trio.current_effective_deadline() == -math.inf
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await kernel.disconnect(conn, "shutdown" if stopping else "disconnect")
