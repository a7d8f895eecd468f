"""One accepted WebSocket, after its handshake: the message loop shared by every WS profile.

Rules:
* Messages are handed to `message()` whole; a message over `max_frame_bytes` is discarded as
  it arrives and reported through `too_large()`, and the stream stays usable.
* Everything written while handling one received chunk goes out in one write, except that a
  ping is answered at once: what the chunk produced before it, then its pong, are written as
  soon as it is read (so a ping between a message's fragments is answered before the answer
  to that message, even when the rest of the message came in the same chunk).
* Pings and closes are answered; after `ping_interval` of silence we ping (see
  `_common.tune_socket` for how a vanished peer is then detected). A peer that breaks the
  protocol gets a close frame with 1002.
* A subclass opens its engine state in `opened()`, and `closed()` always runs at the end with
  `stopping=True` when the server is shutting down rather than the peer leaving.
* Engine answers are written by `write_answers` (a peer's sink): every answer waiting in the
  peer's outbox, in order, as one write. After each received chunk (and at each ping),
  `flush_answers` runs before the chunk's control frames (pongs, the closing handshake) go
  out.
"""

from __future__ import annotations

import logging
import math

import trio

from ecotone.kernel import Owner, Peer
from ecotone.server.runner import Runner
from ecotone.server.sockets import SendLock, receive_within
from ecotone.specs import wsframing as wsf

log = logging.getLogger("ecotone.websocket")

RECEIVE_SIZE = 65536
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class WsPeer:
    """Base class: one WebSocket peer on a trio stream."""

    binary = False
    """Send binary messages (True) or text messages (False)."""

    def __init__(self, runner: Runner, stream: trio.abc.Stream, pending: bytes = b"") -> None:
        self.runner = runner
        self.limits = runner.engine.limits
        self.owner: Owner | None = None
        """Who the connection's sessions belong to (None: it holds none): the engine keeps a
        silent connection open while its owner holds sessions."""
        self.stream = stream
        self._pending = pending
        self._reader = wsf.FrameReader(masked=True, max_message=self.limits.max_frame_bytes)
        self._send_lock = SendLock()
        self._batch: list[bytes] | None = None
        self._last_rx = trio.current_time()
        self._closing = False
        self.dead = False
        """A write failed: the peer is gone (or stopped reading past write_timeout)."""

    # --- hooks -----------------------------------------------------------------------------

    async def opened(self, nursery: trio.Nursery) -> bool:
        """Set up after the handshake; return False to close at once."""
        return True

    async def message(self, data: bytes, text: bool) -> None:
        raise NotImplementedError

    async def too_large(self, size: int) -> None:
        raise NotImplementedError

    async def closed(self, stopping: bool) -> None:
        """Release what `opened` took. Runs shielded, exactly once."""

    async def flush_answers(self) -> None:
        """Write the engine's answers out (after each received chunk)."""

    async def wait_room(self) -> None:
        """Before reading more: wait while too many requests wait for answers."""

    # --- writing ---------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Write encoded frames: coalesced while a received chunk is being answered."""
        if self._batch is not None:
            self._batch.append(data)
            return
        await self._send_bytes(data)

    async def send_message(self, data: bytes) -> None:
        """Send one message; a peer that is gone is noticed by the receive loop instead."""
        try:
            await self.write(wsf.encode(wsf.BINARY if self.binary else wsf.TEXT, data, mask=False))
        except _GONE:
            pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame; the loop ends once it is written."""
        self._closing = True
        try:
            await self.write(wsf.encode(wsf.CLOSE, wsf.close_payload(code, reason), mask=False))
        except _GONE:
            pass

    async def write_answers(self, peer: Peer) -> None:
        """A peer's sink: every answer in its outbox, as messages, in one write. Taken under
        the send lock, so answers leave in the order the engine produced them."""
        async with self._send_lock:  # uncontended: no scheduler pass
            await self._write_answers(peer)

    async def _write_answers(self, peer: Peer) -> None:
        frames = peer.take()
        if not frames:
            return
        opcode = wsf.BINARY if self.binary else wsf.TEXT
        if len(frames) == 1:
            data = wsf.encode(opcode, frames[0], mask=False)
        else:
            data = b"".join([wsf.encode(opcode, frame, mask=False) for frame in frames])
        try:
            await self.stream.send_all(data)
        except _GONE:
            self.dead = True  # the receive loop sees the broken connection and cleans up

    async def _send_bytes(self, data: bytes) -> None:
        async with self._send_lock:  # uncontended: no scheduler pass
            await self.stream.send_all(data)

    async def _flush(self) -> None:
        await self.flush_answers()
        batch, self._batch = self._batch, None
        if batch:
            await self._send_bytes(batch[0] if len(batch) == 1 else b"".join(batch))

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                try:
                    if await self.opened(nursery):
                        if self.limits.ping_interval is not None:
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
        reader = self._reader
        data: bytes = self._pending
        self._pending = b""
        # How long the peer may be silent, within a frame or between them: the engine's rule.
        engine = self.runner.engine
        idle_wait = engine.silence_allowed(mid_frame=False)
        frame_wait = engine.silence_allowed(mid_frame=True)
        while not self._closing:
            if not data:
                await self.wait_room()
                wait = frame_wait if reader.partial else idle_wait
                try:
                    got = await receive_within(self.stream, RECEIVE_SIZE, wait)
                except _GONE:
                    return
                if got is None:
                    why = engine.drop_silent(self.owner, mid_frame=reader.partial)
                    if why is None:
                        continue  # silent, but it holds sessions: theirs is their lease
                    log.info("closing a WebSocket connection: %s", why)
                    await self.close(1008 if reader.partial else 1000, why)
                    return
                if not got:
                    return
                data = got
            self._last_rx = trio.current_time()
            # Nothing below suspends for inline work, so everything answered for this chunk
            # is written once, at the end.
            self._batch = []
            try:
                events = reader.feed(data)
                data = b""
                for event in events:
                    if isinstance(event, wsf.Message):
                        await self.message(event.data, event.text)
                    elif isinstance(event, wsf.TooLarge):
                        await self.too_large(event.size)
                    elif event.opcode == wsf.PING:
                        # Answered now, after what came before it and before the rest of the
                        # chunk: a ping read between a message's fragments is answered before
                        # that message (RFC 6455 §5.5.2). Only pings pay for the extra write.
                        await self.write(wsf.encode(wsf.PONG, event.payload, mask=False))
                        await self._flush()
                        self._batch = []
                    elif event.opcode == wsf.CLOSE:
                        reply = wsf.close_reply(event.payload)  # ProtocolError if it is bad
                        if not self._closing:
                            await self.write(wsf.encode(wsf.CLOSE, reply, mask=False))
                        return
                    if self._closing:
                        return
            except wsf.ProtocolError as exc:
                log.info("closing connection after a protocol error: %s", exc)
                await self.close(exc.code, str(exc))
                return
            except _GONE:
                return
            finally:
                try:
                    await self._flush()
                except _GONE:
                    pass  # the next receive sees the broken connection and ends the loop

    async def _keepalive(self, scope: trio.CancelScope) -> None:
        """Ping after `ping_interval` of silence. The ping is data the peer's TCP stack must
        acknowledge within `ping_timeout` (TCP_USER_TIMEOUT, set at accept): a vanished peer
        makes the kernel abort the connection, which ends the receive loop. A live peer that
        is merely idle (a blocking client between calls) acknowledges at the TCP level and
        keeps its sessions, pong or no pong."""
        interval = self.limits.ping_interval
        assert interval is not None
        while True:
            idle = trio.current_time() - self._last_rx
            if idle < interval:
                await trio.sleep(interval - idle)
                continue
            try:
                await self.write(wsf.encode(wsf.PING, b"ecotone", mask=False))
            except _GONE:
                scope.cancel()
                return
            self._last_rx = trio.current_time()  # next ping one interval from now
