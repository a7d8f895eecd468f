"""Length-prefixed frames over any trio byte stream: the loop behind stdio, tcp and unix.

The lean native path: no HTTP, no WebSocket framing, no masking. One received chunk may
carry many frames (pipelining, many sessions on one connection); everything answered while
handling a chunk goes out in one write, as on the WebSocket transport. The codec is read off
the first frame (JSON starts with `{`).
"""

from __future__ import annotations

import logging
import math

import trio

from ecotone.kernel import Peer
from ecotone.server.runner import Runner
from ecotone.server.sockets import SendLock, receive_within
from ecotone.specs import codec_for
from ecotone.specs.framing import FrameDecoder, TooLarge, detect_codec, encode

log = logging.getLogger("ecotone.framed")

RECEIVE_SIZE = 65536
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class FramedConnection:
    """One peer, speaking length-prefixed frames over `receive` / `send` streams."""

    def __init__(
        self,
        runner: Runner,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        guard: bool = True,
    ) -> None:
        self.runner = runner
        self.receive = receive
        self.send = send
        self.guard = guard
        """Drop a peer that stalls mid-frame, or stays silent holding no session (stdio's
        peer is the process that started the server: not guarded)."""
        self._lock = SendLock()
        self._room = trio.Event()
        self.dead = False

    async def write_answers(self, peer: Peer) -> None:
        """The peer's sink: its whole outbox, framed, in one write, taken under the lock so
        answers leave in the order the engine produced them. The usual case (nobody
        mid-write) takes no scheduler pass."""
        async with self._lock:
            await self._write(peer)

    async def _write(self, peer: Peer) -> None:
        frames = peer.take()
        if not frames:
            return
        data = encode(frames[0]) if len(frames) == 1 else b"".join([encode(f) for f in frames])
        try:
            await self.send.send_all(data)
        except _GONE:
            self.dead = True  # the peer is gone; the receive loop sees it and cleans up
        finally:
            if self.dead or not peer.full:
                self._room.set()

    async def run(self) -> None:
        runner = self.runner
        decoder = FrameDecoder(runner.engine.limits.max_frame_bytes)
        peer: Peer | None = None
        engine = runner.engine
        # How long the peer may be silent, mid-frame or between frames (the engine's rule;
        # stdio's peer, the process that started the server, is not guarded).
        idle_wait = engine.silence_allowed(mid_frame=False) if self.guard else math.inf
        frame_wait = engine.silence_allowed(mid_frame=True) if self.guard else math.inf
        try:
            while True:
                while peer is not None and peer.full and not self.dead:  # backpressure
                    self._room = trio.Event()
                    await self._room.wait()
                wait = frame_wait if decoder.partial else idle_wait
                try:
                    data = await receive_within(self.receive, RECEIVE_SIZE, wait)
                except _GONE:
                    return
                if data is None:
                    owner = None if peer is None else peer.owner
                    why = engine.drop_silent(owner, mid_frame=decoder.partial)
                    if why is None:
                        continue  # silent, but it holds sessions: theirs is their lease
                    log.info("closing a connection: %s", why)
                    return
                if not data or self.dead:
                    return
                for item in decoder.feed(bytes(data)):
                    if peer is None:
                        name = "json" if isinstance(item, TooLarge) else detect_codec(item)
                        # stdio's peer started the server: it needs no token
                        owner = runner.engine.owner(authenticated=not self.guard)
                        peer = runner.engine.peer(codec_for(name), owner, sink=self.write_answers)
                    if isinstance(item, TooLarge):
                        peer.too_large(item.size)
                    else:
                        runner.receive(peer, item)
                await runner.flush()
        finally:
            if peer is not None:
                stopping = trio.current_effective_deadline() == -math.inf
                peer.close()
                runner.disconnect(peer.owner, "shutdown" if stopping else "disconnect")
