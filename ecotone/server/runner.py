"""The engine's driver in the server: runs its env calls under trio and writes its answers.

The engine (`ecotone.kernel.engine`) decides everything; this module only executes:

* each `Call` the engine hands out runs in its own task of the runner's nursery (a worker
  thread for THREAD calls, awaited for AWAIT ones), so a slow env never stalls the transport's
  receive loop or another session, and a call outlives the connection that asked for it (its
  session closes once it ends);
* after anything that may have produced answers, `flush` writes the outbox of every peer that
  has one through the peer's `sink` (the transport's writer);
* an env's `close()` runs shielded, so it happens even while the server stops; a call
  cancelled because the server stops is answered as an error and its session closed.

Transports use `receive` (bytes in, from their receive loop), `flush` (once per received
chunk, so answers to pipelined requests go out in one write), `ask` (one request, wait for
its answer: HTTP routes and OpenEnv's profile), `disconnect` (a connection went away) and
`reap` (idle sessions).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import final

import trio

from ecotone.kernel import Call, Engine, Mode, Owner, Peer
from ecotone.wire import Codec, Request, Response

log = logging.getLogger("ecotone.runner")

STOPPING = "the server is stopping: the call was abandoned"


@final
class Runner:
    """Drives one engine. `nursery` holds the env calls (the server's, not a connection's)."""

    def __init__(self, engine: Engine, nursery: trio.Nursery) -> None:
        self.engine = engine
        self.nursery = nursery
        self.in_flight = 0

    # --- for transports -----------------------------------------------------------------------

    def receive(self, peer: Peer, data: bytes | str) -> None:
        """Feed one received frame. Answers wait in the peer's outbox until `flush`."""
        calls = peer.receive(data)
        if calls:
            self.start(calls)

    def submit(self, peer: Peer, request: Request) -> None:
        calls = peer.submit(request)
        if calls:
            self.start(calls)

    def start(self, calls: Sequence[Call]) -> None:
        for call in calls:
            self.in_flight += 1
            self.nursery.start_soon(self._run, call)

    async def flush(self) -> None:
        """Write out every peer with answers waiting. If a write is interrupted, the peers not
        written yet stay waiting for the next flush."""
        engine = self.engine
        touched = engine.take_touched()
        while touched:
            for index, peer in enumerate(touched):
                try:
                    sink = peer.sink
                    if sink is not None:
                        await sink(peer)
                except BaseException:
                    engine.touch(touched[index:])
                    raise
            touched = engine.take_touched()

    async def ask(self, owner: Owner, codec: Codec, request: Request | bytes) -> Response:
        """Send one request on behalf of `owner` (a frame, or the bytes of one, decoded with
        `codec`) and wait for its answer frame."""
        arrived = trio.Event()

        async def wake(peer: Peer) -> None:
            arrived.set()

        peer = self.engine.peer(codec, owner, sink=wake, frames=True)
        try:
            if isinstance(request, bytes):
                calls = peer.receive(request)
            else:
                calls = peer.submit(request)
            if calls:
                self.start(calls)
            await self.flush()
            while not peer.outbox:
                await arrived.wait()
                arrived = trio.Event()
            answer: Response = peer.outbox[0]
            return answer
        finally:
            peer.close()

    def disconnect(self, owner: Owner, reason: str = "disconnect") -> None:
        """The owner's connection is gone: its sessions close (busy ones when their call
        ends). The closes run in the runner's nursery."""
        calls = self.engine.disconnect(owner, reason)
        if calls:
            self.start(calls)

    def reap(self) -> None:
        calls = self.engine.expire()
        if calls:
            self.start(calls)

    async def reap_idle(self) -> None:
        """Close idle sessions every so often (a quarter of `idle_timeout`, at most 5 s)."""
        timeout = self.engine.limits.idle_timeout
        if timeout is None:
            return
        period = max(0.05, min(timeout / 4, 5.0))
        while True:
            await trio.sleep(period)
            self.reap()

    async def shutdown(self) -> None:
        """Close every session and wait for the closes (call shielded, after the nursery's
        tasks are done)."""
        await self._finish_now(self.engine.shutdown())

    # --- running calls ------------------------------------------------------------------------

    async def _run(self, call: Call) -> None:
        try:
            try:
                with trio.CancelScope(shield=call.cleanup):
                    await _execute(call)
            except trio.Cancelled:  # the server is stopping
                with trio.CancelScope(shield=True):
                    await self._finish_now(self.engine.abandon(call, STOPPING))
                    await self.flush()
                raise
            except Exception as exc:  # the driver failed (no thread to be had): the call did
                log.exception("could not run %r", call)
                call.error, call.done = exc, True
            calls = self.engine.complete(call)
            if calls:
                self.start(calls)
            await self.flush()
        finally:
            self.in_flight -= 1

    async def _finish_now(self, calls: Sequence[Call]) -> None:
        """What follows a call while the server stops, run in this task (the caller shields
        it): env closes are made, anything else is abandoned at once, so stopping never waits
        for queued env work."""
        pending = list(calls)
        while pending:
            call = pending.pop()
            if not call.cleanup:
                pending.extend(self.engine.abandon(call, STOPPING))
                continue
            try:
                await _execute(call)
            except Exception as exc:
                call.error, call.done = exc, True
            pending.extend(self.engine.complete(call))


async def _execute(call: Call) -> None:
    if call.mode is Mode.THREAD:
        await trio.to_thread.run_sync(call.run)
    else:
        await call.arun()
