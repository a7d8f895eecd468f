"""The `inproc` transport: the engine embedded in your own process, no socket.

`ecotone.connect("inproc://counter")` and `await ecotone.aconnect("inproc://counter")` build an
engine serving the named env in this process and talk to it through the same frames and codecs
as a network client (so validation, ordering and errors behave identically), minus the network.

Each channel drives its engine itself: inline env methods run as the frame is sent; the
blocking channel makes other calls in the calling thread (coroutines through a private event
loop thread, started on first need); the async channel makes them in the caller's event loop
(trio or asyncio: worker threads through anyio, coroutines awaited).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Sequence
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ecotone.kernel import Call, Engine, Mode, Peer, Registry
from ecotone.kernel.exit import close_at_exit, forget_at_exit
from ecotone.specs import codec_for


def engine_for_url(url: str) -> Engine:
    parts = urlsplit(url)
    name = (parts.netloc + parts.path).strip("/")
    if parts.query:  # part of the env name (`inproc://gymnasium:FrozenLake-v1?is_slippery=false`)
        name = f"{name}?{parts.query}"
    if parts.fragment:  # likewise (`inproc://mcp+stdio:CMD#timeout=5`)
        name = f"{name}#{parts.fragment}"
    if not name:
        raise ValueError(f"inproc URL {url!r} names no environment: use inproc://ENV")
    spec = Registry.discover().env_spec(name)
    return Engine(spec)


class InprocSyncChannel:
    """A blocking channel to an engine of this process (`channel=` of `ecotone.Connection`)."""

    def __init__(self, engine: Engine, codec: str) -> None:
        self.engine = engine
        self.peer: Peer = engine.peer(codec_for(codec))
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._at_exit: int | None = None  # the close registered at exit, once a portal runs
        self._closed = False

    def _make(self, call: Call) -> None:
        if call.mode is Mode.THREAD:
            call.run()  # the caller's thread is the worker: it waits for the answer anyway
            return
        if self._portal is None:
            self._portal_cm = start_blocking_portal("trio")
            self._portal = self._portal_cm.__enter__()
            # A channel still open when the program ends is closed then, while the portal's
            # thread still runs (`ecotone.kernel.exit`).
            self._at_exit = close_at_exit(self.close, weak=True)
        self._portal.call(call.arun)

    def _run(self, calls: Sequence[Call]) -> None:
        pending = list(calls)
        while pending:
            call = pending.pop(0)
            try:
                self._make(call)
            except BaseException:  # interrupted (Ctrl-C): the session must not stay busy
                self._abandon([call, *pending])
                raise
            pending.extend(self.engine.complete(call))

    def _abandon(self, calls: list[Call]) -> None:
        """Answer what cannot be made now as abandoned; env closes are still made."""
        while calls:
            call = calls.pop()
            if call.cleanup and not call.done:
                with contextlib.suppress(Exception):
                    self._make(call)
            calls.extend(self.engine.abandon(call, "the caller was interrupted"))

    def send(self, data: bytes) -> None:
        if self._closed:  # its portal is gone: a call now would start one nothing stops
            raise ConnectionError("the inproc channel is closed")
        self._run(self.peer.receive(data))

    def receive(self, deadline: float | None) -> list[bytes | str]:
        out = self.peer.take()
        if not out:
            raise TimeoutError
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.peer.close()
        try:
            self._run(self.engine.disconnect(self.peer.owner))
        finally:
            if self._portal_cm is not None:
                forget_at_exit(self._at_exit)
                self._portal_cm.__exit__(None, None, None)
                self._portal_cm = self._portal = None


class InprocAsyncChannel:
    """An async channel to an engine of this process, driven in the caller's event loop.

    Each task makes the calls its own requests need: `send` those its frame starts, and
    `receive` (the waiting task holds the connection's read lock) those that became due while
    it waits, its own queued behind another task's or another's queued behind its own: those
    run shielded, so a task's timeout never abandons another task's request (the price, with
    several tasks on one inproc connection: a reader's timeout can be late by the length of
    another task's env call). A task cancelled in the middle of its own env coroutine
    abandons that call only (answered as an error; the session goes on); a worker-thread call
    always runs to its end, and env closes always run."""

    def __init__(self, engine: Engine, codec: str) -> None:
        self.engine = engine
        self.peer: Peer = engine.peer(codec_for(codec))
        self._due: collections.deque[Call] = collections.deque()
        self._wake = anyio.Event()

    def _nudge(self) -> None:
        self._wake.set()
        self._wake = anyio.Event()

    async def _make(self, call: Call, shield: bool = False) -> None:
        """Make one call here, then its cleanups; what else it unblocked becomes due."""
        try:
            with anyio.CancelScope(shield=shield or call.cleanup):
                if call.mode is Mode.THREAD:
                    await anyio.to_thread.run_sync(call.run)
                else:
                    await call.arun()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._settle(self.engine.abandon(call, "the caller stopped waiting"))
            raise
        with anyio.CancelScope(shield=True):
            await self._settle(self.engine.complete(call))

    async def _settle(self, calls: Sequence[Call]) -> None:
        """Env closes are made at once (nobody may be left to make them); the rest is due."""
        for call in calls:
            if call.cleanup:
                await self._make(call)
            else:
                self._due.append(call)
        self._nudge()

    async def send(self, data: bytes) -> None:
        calls = collections.deque(self.peer.receive(data))
        try:
            while calls:
                await self._make(calls.popleft())
        finally:
            if calls:  # cancelled midway (a step_many's other items): made by whoever reads
                self._due.extend(calls)
            self._nudge()

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while not self.peer.outbox:
            if self._due:
                # Perhaps another task's request: made shielded, so that this task's own
                # timeout cannot abandon it.
                await self._make(self._due.popleft(), shield=True)
                continue
            await self._wake.wait()
        return self.peer.take()

    async def aclose(self) -> None:
        self.peer.close()
        with anyio.CancelScope(shield=True):
            await self._settle(self.engine.disconnect(self.peer.owner))
            while self._due:
                call = self._due.popleft()
                await self._settle(self.engine.abandon(call, "the connection closed"))


class InprocChannels:
    """Opens inproc:// channels: each builds an engine serving the URL's env."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> InprocSyncChannel:
        return InprocSyncChannel(engine_for_url(url), codec)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> InprocAsyncChannel:
        return InprocAsyncChannel(engine_for_url(url), codec)
