"""The engine's driver in the server: runs its env calls under trio and writes its answers.

The engine (`ecotone.kernel.engine`) decides everything; this module only executes:

* each `Call` the engine hands out runs in its own task of the runner's nursery (a worker
  thread for THREAD calls, awaited for AWAIT ones), so a slow env never stalls the transport's
  receive loop or another session, and a call outlives the connection that asked for it (its
  session closes once it ends);
* after anything that may have produced answers, `flush` writes the outbox of every peer that
  has one through the peer's `sink` (the transport's writer);
* worker threads are shared fairly: at most `limits.worker_threads` blocking env calls run at
  once, of which one connection (and one token) holds at most `limits.max_thread_share`; its
  further calls wait in a queue of its own, so another peer still gets threads however many
  of its steps hang. Opening and closing sessions (and writing checkpoints) run on a pool of
  their own: they never wait behind anyone's steps;
* every call has a deadline (`Call.timeout`): past it the request is answered `timeout` and
  the env set aside (`Engine.timed_out`); a worker thread cannot be stopped, so it is
  abandoned (counted in `hung`; past `limits.max_hung_calls` no new blocking call starts)
  and closes its env itself when it ends; abandoned threads hold no slot, so they never
  starve other sessions;
* an env's `close()` runs shielded, so it happens even while the server stops, within
  `limits.shutdown_timeout`; a call cancelled because the server stops is answered as an
  error and its env set aside.

Transports use `receive` (bytes in, from their receive loop), `flush` (once per received
chunk, so answers to pipelined requests go out in one write), `ask` (one request, wait for
its answer: HTTP routes and OpenEnv's profile), `disconnect` (a connection went away) and
`reap` (the lease rule's sweep).
"""

from __future__ import annotations

import logging
import math
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any, final

import trio

from ecotone.kernel import Call, Engine, Mode, Owner, Peer
from ecotone.kernel.calls import CheckpointCall, CloseCall, DisposeCall, OpenCall
from ecotone.kernel.config import McpConfig, OpenEnvConfig
from ecotone.server.admission import Admission, ConnectionGate
from ecotone.specs import Codec, Request, Response

log = logging.getLogger("ecotone.runner")

STOPPING = "the server is stopping: the call was abandoned"
DRAIN_POLL = 0.02
"""Seconds between two looks at the sessions while the server drains."""
NOTICE_SECONDS = 1.0
"""Seconds the drain's last notices may take to be written."""


_thread_calls = 0
"""Env calls running in worker threads of this process, across its runners (hung ones
too)."""
_thread_calls_lock = threading.Lock()


def _count_thread_calls(change: int) -> None:
    global _thread_calls
    with _thread_calls_lock:
        _thread_calls += change


def may_busy_poll() -> bool:
    """Whether a reader of this process may spin waiting for bytes (`ecotone.kernel.polling`):
    the server runs in the main thread (not a test's or an app's background thread), and no
    env call runs in a worker thread (a spinner would keep the GIL from it). Threads of
    others (an env's own, a plugin's) are not seen: set `limits.busy_poll_us = 0` for such a
    server."""
    return _thread_calls == 0 and threading.current_thread() is threading.main_thread()


@final
class Runner:
    """Drives one engine. `nursery` holds the env calls (the server's, not a connection's)."""

    def __init__(self, engine: Engine, nursery: trio.Nursery, threads: int | None = None) -> None:
        limits = engine.limits
        threads = threads or limits.worker_threads
        self.engine = engine
        self.nursery = nursery
        self.in_flight = 0
        self.hung = 0
        """Worker-thread calls abandoned at their deadline that are still running."""
        self.abandoned_total = 0
        self._threads = trio.CapacityLimiter(threads)
        self._lifecycle = trio.CapacityLimiter(threads)
        """Threads for opening and closing sessions (and checkpoint files): never behind
        steps."""
        self._share = max(1, int(threads * limits.max_thread_share))
        self._shares: dict[object, trio.CapacityLimiter] = {}
        """Each connection's (owner's) and each token's (its number's) share of `_threads`,
        while it has calls running or waiting."""
        self._lock = threading.Lock()
        self._abandoned: set[Call] = set()
        self._stopping = False
        self.gate = ConnectionGate(engine.limits)
        """Connections open, and who may open another (`ecotone.server.admission`)."""
        self.admission = Admission(tokens=engine.tokens)
        """The Host, Origin and token checks of HTTP requests and handshakes (the server's
        composition sets them from the config)."""
        self.mcp = McpConfig()
        """What the MCP face offers (`[mcp]`; set from the config likewise)."""
        self.openenv = OpenEnvConfig()
        """OpenEnv's routes (`[openenv]`)."""
        self.tls: ssl.SSLContext | None = None
        """The server's TLS context (`[tls]`), for the transports over TCP; None: plain."""
        self.metrics: Any = None
        """The server's `ecotone.server.metrics.Metrics`, when its composition made one."""
        self._timer: trio.CancelScope | None = None
        """The reaper's sleep (`reap_idle`), whose deadline a round's deadline may move."""

    # --- for transports -----------------------------------------------------------------------

    def receive(self, peer: Peer, data: bytes | str) -> None:
        """Feed one received frame. Answers wait in the peer's outbox until `flush`."""
        calls = peer.receive(data)
        if calls:
            self.start(calls)
        if self.engine.wake_changed:
            self._rearm()

    def submit(self, peer: Peer, request: Request) -> None:
        calls = peer.submit(request)
        if calls:
            self.start(calls)
        if self.engine.wake_changed:
            self._rearm()

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
            if self.engine.wake_changed:
                self._rearm()
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
        if self.engine.touched:  # answers to others (a multi-agent session's waiting views)
            self.nursery.start_soon(self.flush)

    def reap(self) -> None:
        calls = self.engine.expire()
        if calls:
            self.start(calls)
        if self.engine.touched:  # views answered by a seat's release
            self.nursery.start_soon(self.flush)

    async def reap_idle(self) -> None:
        """Reclaim what the lease rule says, every sweep (`Engine.expire`, `expiring`), and
        play simultaneous rounds at their deadline (`Engine.wake_at`: the timer is moved
        earlier as soon as a request sets an earlier one)."""
        period = self.engine.expiring()
        while True:
            with trio.CancelScope() as timer:
                timer.deadline = trio.current_time() + (math.inf if period is None else period)
                self._timer = timer
                self._rearm()
                await trio.sleep_forever()
            self._timer = None
            self.reap()

    def _rearm(self) -> None:
        """Wake the reaper at the engine's earliest round deadline, if that is sooner."""
        engine = self.engine
        engine.wake_changed = False
        timer, wake = self._timer, engine.wake_at
        if timer is not None and wake is not None:
            at = trio.current_time() + max(0.0, wake - engine.clock())
            if at < timer.deadline:
                timer.deadline = at

    async def drain(self, wait: bool = True) -> None:
        """Stop in one order (`ecotone.kernel.draining`), the connections still open: admit no
        new session or episode and answer readiness probes `draining`; let running episodes
        end, `limits.drain_timeout` at most (`wait`; without, at once); checkpoint the
        sessions left and refuse their requests (`shutting_down`); tell every connection
        holding sessions. Within `drain_timeout` plus `shutdown_timeout`; the caller then
        cancels the server (`shutdown` closes every session)."""
        engine = self.engine
        limits = engine.limits
        engine.drain()
        if wait:
            with trio.move_on_after(limits.drain_timeout):
                await _until(lambda: not engine.episodes_running())
        with trio.move_on_after(limits.shutdown_timeout):
            self.start(engine.stop())
            await self.flush()
            await _until(lambda: not engine.checkpoints_due())
        engine.stop_notices()
        with trio.move_on_after(min(NOTICE_SECONDS, limits.shutdown_timeout)):
            await self.flush()

    async def shutdown(self) -> None:
        """Checkpoint the sessions a server with a checkpoint directory can resume, within
        `limits.shutdown_timeout`, then close every session and wait for the closes, within
        `limits.shutdown_timeout` again (call shielded, after the nursery's tasks are
        done)."""
        self._stopping = True
        timeout = self.engine.limits.shutdown_timeout
        await self._finish_now(self.engine.checkpoint_all(), trio.current_time() + timeout)
        with trio.move_on_after(timeout):
            await self._finish_now(self.engine.shutdown())

    # --- running calls ------------------------------------------------------------------------

    async def _run(self, call: Call) -> None:
        try:
            try:
                with trio.CancelScope(shield=call.cleanup and not self._stopping):
                    made = await self._make(call)
            except trio.Cancelled:  # the server is stopping
                with trio.CancelScope(shield=True) as shield:
                    shield.deadline = trio.current_time() + self.engine.limits.shutdown_timeout
                    await self._finish_now(self._given_up(call, STOPPING))
                    await self.flush()
                raise
            calls = self.engine.complete(call) if made else self._given_up(call, None)
            if calls:
                self.start(calls)
            if self.engine.wake_changed:
                self._rearm()
            await self.flush()
        finally:
            self.in_flight -= 1

    async def _make(self, call: Call) -> bool:
        """Make `call` within its deadline: True when it was made (its outcome is on it),
        False when the deadline passed first. A worker thread that outlives the deadline is
        abandoned, counted in `hung`, and closes its env itself when it ends."""
        deadline = trio.current_time() + call.timeout if call.timeout else math.inf
        if call.mode is not Mode.THREAD:
            with trio.move_on_at(deadline):
                await call.arun()
            return call.done
        if self.hung >= self.engine.limits.max_hung_calls:
            call.error = RuntimeError(
                f"{self.hung} env calls are still running past their deadline "
                "(limits.max_hung_calls): the server takes no new blocking calls until some end"
            )
            call.done = True
            return True
        lifecycle = type(call) in LIFECYCLE
        shares = () if lifecycle else self._shares_of(call)
        held: list[trio.CapacityLimiter] = []
        try:
            for _, share in shares:  # waits behind this peer's own calls, never another's
                await share.acquire_on_behalf_of(call)
                held.append(share)
            async with self._lifecycle if lifecycle else self._threads:
                # a slot is held only while someone waits for the call
                with trio.move_on_at(deadline):
                    await trio.to_thread.run_sync(
                        self._in_thread, call, abandon_on_cancel=True, limiter=_UNLIMITED
                    )
        except Exception as exc:  # the driver failed (no thread to be had): the call did
            log.exception("could not run %r", call)
            call.error, call.done = exc, True
            return True
        finally:
            for share in held:
                share.release_on_behalf_of(call)
            for key, share in shares:  # a peer with nothing running or waiting: forgotten
                stats = share.statistics()
                if not stats.borrowed_tokens and not stats.tasks_waiting:
                    self._shares.pop(key, None)
        return self._settled(call)

    def _shares_of(self, call: Call) -> list[tuple[object, trio.CapacityLimiter]]:
        """The limiters of the connection (and the token) `call` is made for, by key."""
        session = call.session
        owner = session.owner if session is not None else getattr(call.peer, "owner", None)
        if owner is None:
            return []
        keys: list[object] = [owner]
        principal = getattr(owner, "principal", None)
        if principal is not None:
            keys.append(("token", principal))
        shares = []
        for key in keys:
            share = self._shares.get(key)
            if share is None:
                share = self._shares[key] = trio.CapacityLimiter(self._share)
            shares.append((key, share))
        return shares

    def _settled(self, call: Call) -> bool:
        """Whether a thread call ended; if not, it is abandoned from now on."""
        with self._lock:
            if call.done:
                return True
            if call in self._abandoned:  # already counted (`_make`, then `_given_up`)
                return False
            self._abandoned.add(call)
            self.hung += 1
            self.abandoned_total += 1
            return False

    def _in_thread(self, call: Call) -> None:
        """A worker thread's work: the call, then, if the runner gave up on it meanwhile, the
        close of the env it was made on (the engine set that env aside). Counted while it
        runs, so that readers stop spinning (they ask at every try)."""
        _count_thread_calls(1)
        try:
            self._call_in_thread(call)
        finally:
            _count_thread_calls(-1)

    def _call_in_thread(self, call: Call) -> None:
        call.run()
        with self._lock:
            late = call in self._abandoned
            self._abandoned.discard(call)
        if not late:
            return
        try:
            for env in call.stranded():
                try:
                    env.close()
                except BaseException:
                    log.exception("an env set aside after its deadline raised in close()")
        finally:
            with self._lock:
                self.hung -= 1

    def _given_up(self, call: Call, why: str | None) -> Sequence[Call]:
        """The call was not made (deadline, or the server stopping): a thread that still runs
        is left to end on its own; the engine answers the request and sets the env aside."""
        if call.done:
            return self.engine.complete(call)
        if call.mode is Mode.THREAD:
            self._settled(call)
        return self.engine.timed_out(call, why)

    async def _finish_now(self, calls: Sequence[Call], deadline: float = math.inf) -> None:
        """What follows a call while the server stops, run in this task (the caller shields
        it, with the shutdown deadline): env closes are made, and so are checkpoints
        (`Call.essential`) until `deadline`, past which they are given up; anything else is
        abandoned at once, so stopping never waits for queued env work."""
        pending = list(calls)
        while pending:
            call = pending.pop()
            if call.essential and not call.cleanup:
                left = deadline - trio.current_time()
                if left <= 0:
                    pending.extend(self.engine.abandon(call, "no time was left to checkpoint"))
                    continue
                call.timeout = left if call.timeout is None else min(call.timeout, left)
            elif not call.cleanup:
                pending.extend(self.engine.abandon(call, STOPPING))
                continue
            made = await self._make(call)
            pending.extend(self.engine.complete(call) if made else self._given_up(call, None))


async def _until(done: Callable[[], bool]) -> None:
    """Return once `done()` (asked every `DRAIN_POLL` seconds: the engine does no I/O, so it
    has no event to wait on)."""
    while True:
        if done():
            return
        await trio.sleep(DRAIN_POLL)


LIFECYCLE = frozenset({OpenCall, CloseCall, DisposeCall, CheckpointCall})
"""Calls that run on the lifecycle pool: they never wait behind steps."""

_UNLIMITED = trio.CapacityLimiter(math.inf)
"""Threads themselves are not limited: a hung one keeps its token forever; `Runner._threads`
limits the threads someone still waits for."""
