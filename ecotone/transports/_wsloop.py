"""One accepted WebSocket, after its handshake: the message loop shared by every WS profile.

Rules:
* Messages are handed to `message()` whole; a message over `max_frame_bytes` is discarded as
  it arrives and reported through `too_large()`, and the stream stays usable.
* Everything written while handling one received chunk goes out in one write.
* Pings and closes are answered; after `ping_interval` of silence we ping (see
  `_common.tune_socket` for how a vanished peer is then detected).
* A subclass opens its kernel state in `opened()`, and `closed()` always runs at the end with
  `stopping=True` when the server is shutting down rather than the peer leaving.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import trio
from wsproto import WSConnection
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from ecotone.kernel import Kernel

log = logging.getLogger("ecotone.websocket")

RECEIVE_SIZE = 65536
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError)


class WsPeer:
    """Base class: one WebSocket peer on a trio stream."""

    binary = False
    """Send binary messages (True) or text messages (False)."""

    def __init__(
        self, kernel: Kernel, stream: trio.abc.Stream, ws: WSConnection, pending: bytes = b""
    ) -> None:
        self.kernel = kernel
        self.stream = stream
        self.ws = ws
        self._pending = pending
        self._send_lock = trio.Lock()
        self._batch: list[bytes] | None = None
        self._last_rx = trio.current_time()
        self._parts: list[bytes | str] = []
        self._size = 0
        self._oversize = False
        self._closing = False

    # --- hooks -----------------------------------------------------------------------------

    async def opened(self, nursery: trio.Nursery) -> bool:
        """Set up after the handshake; return False to close at once."""
        return True

    async def message(self, data: bytes | str) -> None:
        raise NotImplementedError

    async def too_large(self, size: int) -> None:
        raise NotImplementedError

    async def closed(self, stopping: bool) -> None:
        """Release what `opened` took. Runs shielded, exactly once."""

    # --- writing ---------------------------------------------------------------------------

    async def write(self, event: Any) -> None:
        data = self.ws.send(event)
        if self._batch is not None:  # answering a received chunk: coalesce into one write
            self._batch.append(data)
            return
        await self._send_bytes(data)

    async def send_message(self, data: bytes) -> None:
        """Send one message; a peer that is gone is noticed by the receive loop instead."""
        event: Message[Any] = (
            BytesMessage(data=data) if self.binary else TextMessage(data=data.decode())
        )
        try:
            await self.write(event)
        except _GONE:
            pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake; the loop ends once it is sent."""
        self._closing = True
        try:
            await self.write(CloseConnection(code=code, reason=reason))
        except _GONE:
            pass

    async def _send_bytes(self, data: bytes) -> None:
        lock = self._send_lock
        if lock.locked():
            async with lock:
                await self.stream.send_all(data)
            return
        lock.acquire_nowait()  # uncontended: skip the checkpoint `async with` would add
        try:
            await self.stream.send_all(data)
        finally:
            lock.release()

    async def _flush(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            await self._send_bytes(batch[0] if len(batch) == 1 else b"".join(batch))

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                try:
                    if await self.opened(nursery):
                        if self.kernel.limits.ping_interval is not None:
                            nursery.start_soon(self._keepalive, nursery.cancel_scope)
                        await self._receive_loop()
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            stopping = trio.current_effective_deadline() == -math.inf
            with trio.CancelScope(shield=True):
                await self.closed(stopping)
                await trio.aclose_forcefully(self.stream)

    async def _receive_loop(self) -> None:
        ws = self.ws
        limit = self.kernel.limits.max_frame_bytes
        data: bytes = self._pending
        self._pending = b""
        while not self._closing:
            if not data:
                try:
                    received = await self.stream.receive_some(RECEIVE_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                data = bytes(received)
                if not data:
                    return
            self._last_rx = trio.current_time()
            # Nothing below suspends for inline work, so everything answered for this chunk
            # is written once, at the end.
            self._batch = []
            try:
                ws.receive_data(data)
                data = b""
                for event in ws.events():
                    if isinstance(event, Message):
                        if event.message_finished and not self._parts and not self._oversize:
                            if len(event.data) > limit:
                                await self.too_large(len(event.data))
                            else:
                                await self.message(event.data)
                        else:
                            await self._collect(event, limit)
                    elif isinstance(event, Ping):
                        await self.write(event.response())
                    elif isinstance(event, Pong):
                        pass
                    elif isinstance(event, CloseConnection):
                        if not self._closing:
                            await self.write(event.response())
                        return
                    if self._closing:
                        return
            except RemoteProtocolError as exc:
                log.info("closing connection after a protocol error: %s", exc)
                try:
                    await self.write(CloseConnection(code=1002, reason=str(exc)[:120]))
                except _GONE:
                    pass
                return
            except _GONE:
                return
            finally:
                try:
                    await self._flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the next receive sees the broken connection and ends the loop

    async def _collect(self, event: Message[Any], limit: int) -> None:
        """A message split over several frames: gather it, or discard it when over the limit."""
        self._size += len(event.data)
        if self._size > limit:
            self._oversize = True
            self._parts.clear()
        elif not self._oversize:
            self._parts.append(event.data)
        if not event.message_finished:
            return
        size, oversize, parts = self._size, self._oversize, self._parts
        self._parts, self._size, self._oversize = [], 0, False
        if oversize:
            await self.too_large(size)
        elif isinstance(event, TextMessage):
            await self.message("".join(parts))  # type: ignore[arg-type]
        else:
            await self.message(b"".join(parts))  # type: ignore[arg-type]

    async def _keepalive(self, scope: trio.CancelScope) -> None:
        """Ping after `ping_interval` of silence. The ping is data the peer's TCP stack must
        acknowledge within `ping_timeout` (TCP_USER_TIMEOUT, set at accept): a vanished peer
        makes the kernel abort the connection, which ends the receive loop. A live peer that
        is merely idle (a blocking client between calls) acknowledges at the TCP level and
        keeps its sessions, pong or no pong."""
        interval = self.kernel.limits.ping_interval
        assert interval is not None
        while True:
            idle = trio.current_time() - self._last_rx
            if idle < interval:
                await trio.sleep(interval - idle)
                continue
            try:
                await self.write(Ping(payload=b"ecotone"))
            except _GONE:
                scope.cancel()
                return
            self._last_rx = trio.current_time()  # next ping one interval from now
