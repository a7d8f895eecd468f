"""The protocol engine: every rule of a session, in one place, and no I/O.

Transports feed it bytes (or request frames) through a `Peer` and write out what the peer's
outbox holds; a driver runs the env calls it hands back (`Call`, see `calls.py`) and returns
them with `complete`. The engine owns no socket, thread or event loop, so the same rules hold
on every transport and under every driver (trio in the server, trio or asyncio or a plain
thread in the inproc channels), and tests can drive it by hand.

The engine is one class composed of parts, each a module: `stepping.py` (the one step path),
`batches.py` (`step_many`, `step_columns`), `snapshotting.py` (snapshots, restores, forks),
`seating.py` (multi-agent seats), `rounds.py` (their simultaneous moves), `draining.py`
(stopping in one order), `leasing.py` (leases: `keepalive`, the sweep that reclaims),
`operations.py` (every other request), on `core.py` (what they share). A session's phase
follows one table (`states.py`). The rules this module keeps:

* **One request of a session at a time, in arrival order.** A request for a session that is
  busy (a call in flight, or held by a batch) waits in the session's queue; each answer of a
  session is produced after the answer to the request before it. The queue belongs to the
  session, not to a connection, so the rule holds for requests arriving on any peer of the
  owner (concurrent HTTP requests included). Across sessions, requests run concurrently.
  Two kinds of request leave the queue to wait: a waiting `observe` and a simultaneous
  env's move kept for its round (`seating.py`, `rounds.py`), answered when their time comes.
* **How a call runs** (`Mode`): inline on the feeding thread for `inline = True` envs' plain
  methods, a worker thread for other plain methods, awaited for coroutines. Inline work is
  answered before `receive` returns, with no call handed out.
* **Ownership.** Sessions belong to an `Owner` (one connection, or every HTTP request of a
  server); a peer sees only its owner's sessions: another owner's session id is
  `unknown_session`. When the owner goes (`disconnect`), its sessions close: idle ones at
  once, busy ones as soon as their call ends. An owner may `share` a session: another owner
  that presents the key (`attach`) becomes its guest, and may do anything in it but reset,
  close or share it (`forbidden`); a guest's going closes nothing.
* **Phases** (`states.py`): what a request may do is the table's (a step before a reset is
  `reset_required`, after the episode's end `episode_done`; a session whose env was set aside
  takes only a reset or a close).
* **Deadlines.** A call past its deadline (`timed_out`) is answered `timeout` and sets its
  session's env aside (BROKEN): the next reset makes a fresh instance.
* **Closing.** A session leaves the table when a client's `close` is reached (after its
  earlier requests), when its owner goes, when its lease ran out (`leases.py`), or when the
  server stops; its env's `close()` runs exactly once, and requests queued behind it get
  `unknown_session`. A busy session is closed once its call ends, never in the middle of it.
* **Errors are frames.** A frame that cannot be decoded gets an error with the id salvaged
  when it can be read (`incoming.py`); every failure of a request is answered with an error
  frame with its id; an engine bug is `internal` and the engine goes on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

from ecotone.kernel import answers
from ecotone.kernel.batches import Batches, Entry
from ecotone.kernel.calls import (
    Call,
    CheckpointCall,
    CloseCall,
    DisposeCall,
    ForkCall,
    Mode,
    OpenCall,
    RoundCall,
)
from ecotone.kernel.core import log
from ecotone.kernel.draining import BATCHES, NEW_EPISODES, Draining
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.leasing import Leasing
from ecotone.kernel.limits import Limits
from ecotone.kernel.operations import Operations
from ecotone.kernel.peers import NO_CALLS, Owner, Peer, Sink, token_number
from ecotone.kernel.rounds import Rounds
from ecotone.kernel.seating import Seating
from ecotone.kernel.sessions import Session
from ecotone.kernel.snapshotting import Snapshotting
from ecotone.kernel.states import Event, advance
from ecotone.kernel.stepping import refused
from ecotone.specs import (
    Close,
    Codec,
    Describe,
    DropSnapshot,
    ErrorCode,
    ExportSnapshot,
    Fork,
    GetTask,
    Hello,
    Join,
    Keepalive,
    ListTasks,
    Observe,
    Open,
    Ping,
    Play,
    Pong,
    Render,
    Request,
    Reset,
    Response,
    Restore,
    Share,
    SharedSteps,
    Snapshot,
    Step,
    StepColumns,
    StepMany,
)

_OWNER_ONLY: Final[dict[type, str]] = {
    Reset: "resets",
    Close: "closes",
    Share: "shares",
    SharedSteps: "reads the steps of",
    Snapshot: "snapshots",
    Restore: "restores",
    Fork: "forks",
}
"""What a guest of a shared session may not do, and who does it instead."""


_SEATED: Final = (Play, Observe, Render)
"""What a seat's holder or a spectator may send about a session it does not own (a `render`
draws what it may see: `operations.py`)."""


@final
class _Queued:
    """A request waiting for its session."""

    __slots__ = ("peer", "request")

    def __init__(self, peer: Peer, request: Request) -> None:
        self.peer = peer
        self.request = request


class Engine(Batches, Operations, Snapshotting, Seating, Rounds, Draining, Leasing):
    """Serves a set of environments to any number of peers, under one set of rules."""

    def __init__(
        self,
        envs: Mapping[str, EnvSpec] | EnvSpec,
        *,
        default_env: str | None = None,
        limits: Limits | None = None,
        hooks: Any = None,
        clock: Callable[[], float] = time.monotonic,
        tokens: Sequence[str] = (),
    ) -> None:
        """Serve `envs` (by name; one spec serves under its own name), `default_env` the one
        a request naming none gets. `hooks`: a pluggy hook relay (the registry's), called
        for the lifecycle hooks some plugin implements. `clock`: seconds, for leases
        (a test's own, to be deterministic). `tokens`: the bearer tokens an owner may show
        (none: none needed)."""
        super().__init__(
            envs, default_env=default_env, limits=limits, hooks=hooks, clock=clock, tokens=tokens
        )

    # --- the driver's side --------------------------------------------------------------------

    def owner(self, authenticated: bool = False, principal: int | None = None) -> Owner:
        """A new owner. `authenticated`: the transport checked the token itself (HTTP and
        WebSocket, by header; `principal` is which one); otherwise, with a token set, it must
        send `hello` with it."""
        return Owner(authenticated or self.token is None, principal)

    def principal_of(self, given: str | None) -> int | None:
        """The number of the token `given` is, or None."""
        return token_number(self.tokens, given)

    def peer(
        self,
        codec: Codec,
        owner: Owner | None = None,
        *,
        sink: Sink | None = None,
        frames: bool = False,
    ) -> Peer:
        """A place for answers. Without `owner`, a new one (a connection of its own)."""
        peer = Peer(self, codec, owner if owner is not None else self.owner(), sink, frames)
        if sink is not None and not frames:  # a connection's: told when the server stops
            self.connected(peer)
        return peer

    def take_touched(self) -> list[Peer]:
        """Peers (with a sink) whose outbox became non-empty since the last call."""
        touched, self.touched = self.touched, []
        return touched

    def touch(self, peers: Sequence[Peer]) -> None:
        """Put peers back among the touched (a driver that could not write them all)."""
        for peer in peers:
            if peer.outbox and not peer.closed and peer not in self.touched:
                self.touched.append(peer)

    def complete(self, call: Call) -> Sequence[Call]:
        """The driver made `call` (its `value` or `error` is set): answer it, and start what
        was waiting for its session. Returns the next calls to run."""
        jobs: list[Call] = []
        session = call.session
        try:
            outcome = self._finish(call, jobs)
        except Exception as exc:  # an engine bug: report it, keep serving
            log.exception("internal error finishing %r", call)
            outcome = answers.internal(exc, call.rid, None if session is None else session.id)
        self._answered(call, outcome, jobs)
        self._drain(jobs)
        return jobs

    def _answered(self, call: Call, outcome: Any, jobs: list[Call]) -> None:
        """A call's answer is known (None: another call answers its request): send it, and
        free the session it held."""
        session = call.session
        held = session is not None and session.active is call
        if held:
            session.active = None  # type: ignore[union-attr]
            session.last_used = self.clock()  # type: ignore[union-attr]
        entry = call.entry
        if entry is not None:
            if outcome is not None:
                self._entry_answered(session, entry, outcome, jobs)
        elif outcome is not None and call.peer is not None:
            call.peer.emit(outcome)
        if held and session.active is None:  # type: ignore[union-attr]
            self._freed(session, jobs)  # type: ignore[arg-type]

    def _freed(self, session: Session, jobs: list[Call]) -> None:
        """`session` is idle again: close it if that was asked meanwhile (or, while the server
        stops, checkpoint it first: `draining.py`), then start what waits for it."""
        if session.closing is not None and not session.closed:
            self._retire(session, session.closing, jobs)
        elif self.stopping:
            self.freed(session, jobs)
        elif session.seating is not None and session.seating.overdue:
            self.round_overdue(session, jobs)
        self._ready.append(session)

    def abandon(self, call: Call, why: str) -> Sequence[Call]:
        """The driver stopped waiting for `call` (cancelled: the server is stopping, or an
        inproc caller gave up). If it was made after all, it is completed as usual; if not,
        it is answered as an env error saying `why`, and its session goes on (or closes, if
        it was closing)."""
        if not call.done:
            call.value = None
            call.error = RuntimeError(why)
            call.done = True
        return self.complete(call)

    def timed_out(self, call: Call, why: str | None = None) -> Sequence[Call]:
        """The driver stopped waiting for `call` at its deadline (`call.timeout`): its request
        is answered `timeout`, and a session's env is set aside (BROKEN: its next reset makes
        a fresh instance). A worker-thread call may still be running: the driver closes its
        env when it ends (`call.env`, or for a constructor `call.value`); a coroutine was
        cancelled, so its env is closed here. Returns the next calls to run."""
        if type(call) is CheckpointCall:  # a file store's call, not an env's: nothing set aside
            return self.abandon(call, why or f"the checkpoint did not end in {call.timeout}s")
        jobs: list[Call] = []
        session = call.session
        seconds = call.timeout
        if type(call) is OpenCall:
            self.sessions.release(call.peer.owner)
            what = f"{call.spec.name} constructor"
            call.peer.emit(answers.timed_out(what, seconds, call.rid, None, why))
        elif call.cleanup:  # an env's close() that hung: the session is gone all the same
            log.error("an env's close() did not end within %ss; abandoned", seconds)
            if type(call) is CloseCall:
                self._answered(call, self._close_done(call, jobs), jobs)
        else:
            assert session is not None, call
            if type(call) is ForkCall:  # its copies will never be sessions
                self.release_fork(call)
            entry: Entry | None = call.entry
            what = call.what if entry is None else ("step" if entry.reset is None else "reset")
            rid = call.rid if entry is None else entry.batch.rid
            if why is not None and self.draining:
                answer = self.abandoned_at_stop(session, what, rid)
            else:
                answer = answers.timed_out(what, seconds, rid, session.id, why)
            if type(call) is RoundCall:  # every move of the round hears of it
                sid = session.id
                self.round_timed_out(call, lambda r: answers.timed_out(what, seconds, r, sid, why))
            env = session.env
            advance(session, Event.TIMED_OUT)
            session.env = None
            if call.mode is Mode.AWAIT and env is not None:  # cancelled mid-call: close it now
                dispose = DisposeCall(env)
                dispose.timeout = self._limit(session.spec)
                jobs.append(dispose)
            self._answered(call, answer, jobs)
        self._drain(jobs)
        return jobs

    def disconnect(self, owner: Owner, reason: str = "disconnect") -> Sequence[Call]:
        """The owner is gone: close every session it owns (a busy one once its call ends);
        sessions it was only a guest of stay open."""
        owner.closed = True
        self.sessions.detach(owner)
        self.seats_left(owner)
        if owner.principal is None:  # a connection's snapshots go with it (a token's stay)
            self.snapshots.drop_owner(owner)
        jobs: list[Call] = []
        for session in self.sessions.owned_by(owner):
            self._retire(session, reason, jobs)
        self._drain(jobs)
        return jobs

    # --- connections that fall silent ------------------------------------------------------

    def silence_allowed(self, mid_frame: bool) -> float:
        """Seconds a connection may stay silent before `drop_silent` is asked: within a frame
        it began, `message_timeout`; else `idle_connection_timeout` (inf: forever)."""
        limits = self.limits
        if mid_frame:
            return limits.message_timeout
        idle = limits.idle_connection_timeout
        return math.inf if idle is None else idle

    def drop_silent(self, owner: Owner | None, mid_frame: bool) -> str | None:
        """Why a connection silent for `silence_allowed` is closed, or None: it stays (its
        owner holds sessions, whose own limit is their lease)."""
        if mid_frame:
            return "stalled in the middle of a frame"
        if owner is not None and self.sessions.held_by(owner):
            return None
        return "idle, holding no session"

    def shutdown(self) -> Sequence[Call]:
        """Close every session (the server is stopping)."""
        jobs: list[Call] = []
        for session in list(self.sessions):
            self._retire(session, "shutdown", jobs)
        self._drain(jobs)
        return jobs

    def attach(self, owner: Owner, key: str) -> str | None:
        """Make `owner` a guest of the session shared with `key` (see `Share`): the session's
        id, or None when no open session has that key."""
        session = self.sessions.attach(key, owner)
        return None if session is None else session.id

    # --- requests -----------------------------------------------------------------------------

    def submit(self, peer: Peer, request: Request) -> Sequence[Call]:
        """Handle one request frame from `peer`; returns the calls the driver must run."""
        kind = type(request)
        if not peer.owner.authenticated and kind is not Ping:  # a ping needs no token
            peer.emit(self._authenticate(peer, request))
            return NO_CALLS
        if kind is Step:  # the hot path first
            return self._submit_step(peer, request)  # type: ignore[arg-type]
        try:
            if self.stopping and kind in BATCHES:
                peer.emit(self.refuse_new(kind, request.id, None))
                return NO_CALLS
            if kind is StepColumns:
                return self._submit_columns(peer, request)  # type: ignore[arg-type]
            if kind is StepMany:
                return self._submit_batch(peer, request)  # type: ignore[arg-type]
            answer = self._sessionless(peer, request)
            if answer is not None:
                peer.emit(answer)
                return NO_CALLS
            jobs: list[Call] = []
            if kind is Open:
                if self.draining:
                    peer.emit(self.refuse_new(kind, request.id, None))
                    return NO_CALLS
                self._started(None, peer, self._begin_open(peer, request, jobs), jobs)  # type: ignore[arg-type]
            else:
                self._submit_to_session(peer, request, jobs)
            self._drain(jobs)
            return jobs
        except Exception as exc:  # an engine bug: report it, keep serving
            log.exception("internal error handling %s", kind.__name__)
            peer.emit(answers.internal(exc, request.id, getattr(request, "session", None)))
            return NO_CALLS

    def _sessionless(self, peer: Peer, request: Request) -> Response | None:
        """The answer to a request of no session and no env call, or None: it is another."""
        kind = type(request)
        if kind is Hello:
            return self._hello(request)  # type: ignore[arg-type]
        if kind is Ping:
            return Pong(id=request.id, ready=self.readiness() is None)
        if kind is Describe:
            return self._describe(request)  # type: ignore[arg-type]
        if kind is ListTasks:
            return self._list_tasks(peer, request)  # type: ignore[arg-type]
        if kind is GetTask:
            return self._get_task(peer, request)  # type: ignore[arg-type]
        if kind is ExportSnapshot:
            return self._export_snapshot(peer, request)  # type: ignore[arg-type]
        if kind is DropSnapshot:
            return self._drop_snapshot(peer, request)  # type: ignore[arg-type]
        if kind is Join:
            return self._join(peer, request)  # type: ignore[arg-type]
        if kind is Keepalive:
            return self._keepalive(peer, request)  # type: ignore[arg-type]
        return None

    def _submit_to_session(self, peer: Peer, request: Any, jobs: list[Call]) -> None:
        """A request of one session: started on it when it is idle, queued behind it if not."""
        session = self.sessions.get(request.session, peer.owner)
        if session is None and type(request) in _SEATED:  # a seat's holder, or a spectator
            session = self.seated_session(request.session, peer.owner)
        if session is None:
            peer.emit(self.gone(request.session, request.id))
        elif session.busy:
            session.enqueue(_Queued(peer, request))
        else:
            self._start(session, peer, request, jobs)

    def _submit_step(self, peer: Peer, req: Step) -> Sequence[Call]:
        session = self.sessions.get(req.session, peer.owner)
        if session is None:
            peer.emit(self.gone(req.session, req.id))
            return NO_CALLS
        if session.active is not None or session.queue:
            session.enqueue(_Queued(peer, req))
            return NO_CALLS
        if self.stopping:
            peer.emit(self.refuse_stopping(session, req.id))
            return NO_CALLS
        outcome = self._begin_step(session, peer, req.action, req.id, req.call_timeout)
        if isinstance(outcome, Call):
            session.active = outcome
            return [outcome]
        peer.emit(outcome)
        return NO_CALLS

    def _authenticate(self, peer: Peer, request: Request) -> Response:
        """The answer to a request of an owner that has not shown the token: `hello` with the
        right one admits it, anything else is `unauthorized`."""
        if type(request) is Hello:
            principal = self.principal_of(request.token)
            if principal is not None:
                peer.owner.authenticated = True
                peer.owner.principal = principal
                return self._hello(request)
        return answers.error(
            ErrorCode.UNAUTHORIZED,
            "this server requires a token: send `hello` with it first (`token=` in the "
            "clients, or `?token=` in the URL)"
            if type(request) is not Hello
            else "wrong token",
            request.id,
            getattr(request, "session", None),
        )

    def _drain(self, jobs: list[Call]) -> None:
        """Start what waits on the sessions that became free."""
        ready = self._ready
        while ready:
            self._pump(ready.popleft(), jobs)

    def _pump(self, session: Session, jobs: list[Call]) -> None:
        queue = session.queue
        while queue:
            if session.active is not None:
                return
            item = queue.popleft()
            if session.closed:  # closed by a request before these, answered first
                if type(item) is Entry:
                    rid = item.batch.rid
                    self._entry_answered(None, item, answers.unknown_session(session.id, rid), jobs)
                else:
                    item.peer.emit(answers.unknown_session(session.id, item.request.id))
                continue
            if type(item) is Entry:
                if self.stopping:  # stepped past its checkpoint, the resumed episode would fork
                    refusal = self.refuse_stopping(session, item.batch.rid)
                    self._entry_answered(None, item, refusal, jobs)
                    continue
                self._start_entry(session, item, jobs)
            else:
                self._start(session, item.peer, item.request, jobs)

    def _start(self, session: Session, peer: Peer, request: Any, jobs: list[Call]) -> None:
        """Run a request on its idle session: answered now, or a call for the driver."""
        self._started(session, peer, self._outcome(session, peer, request, jobs), jobs)

    def _started(self, session: Session | None, peer: Peer, outcome: Any, jobs: list[Call]) -> None:
        """A request began: a call (held by its session, if any) for the driver, or its
        answer, or None (a call it made answers it)."""
        if isinstance(outcome, Call):
            if session is not None:
                session.active = outcome
            jobs.append(outcome)
        elif outcome is not None:
            peer.emit(outcome)

    def _outcome(self, session: Session, peer: Peer, request: Any, jobs: list[Call]) -> Any:
        """What a request on its idle session comes to: its answer, a call for the driver, or
        None (a call it made is in `jobs` and answers it)."""
        kind = type(request)
        try:
            if self.draining:
                if self.stopping and kind is not Close:
                    return self.refuse_stopping(session, request.id)
                if kind in NEW_EPISODES:
                    return self.refuse_new(kind, request.id, session.id)
            if kind is Step:
                return self._begin_step(
                    session, peer, request.action, request.id, request.call_timeout
                )
            if session.owner is not peer.owner and kind in _OWNER_ONLY:
                return answers.error(
                    ErrorCode.FORBIDDEN,
                    f"session {session.id} was shared with this connection: its owner "
                    f"{_OWNER_ONLY[kind]} it",
                    request.id,
                    session.id,
                )
            error = refused(session, kind, request.id)
            if error is not None:
                return error
            outcome = self._begin[kind](session, peer, request, jobs)
            now = session.last_used = self.clock()
            if session.seating is not None:  # a seat's holder: its seat's lease too
                self.renew_seats(session, peer.owner, now)
            return outcome
        except Exception as exc:  # an engine bug: this request fails, the session goes on
            log.exception("internal error starting %s", kind.__name__)
            return answers.internal(exc, request.id, session.id)

    # --- closing without a request ------------------------------------------------------------

    def _retire(self, session: Session, reason: str, jobs: list[Call], quiet: bool = False) -> None:
        """Close a session no request asked to close (disconnect, its lease, shutdown): it
        leaves the table at once, and its env's close() runs. A busy one is marked, and closed
        when its call ends. `quiet`: nobody is told (its open was never answered)."""
        if session.closed:
            return
        if session.active is not None:
            session.closing = reason
            return
        self._remove(session)
        if session.env is None:  # set aside after a timeout: closed once its call ends
            if not quiet:
                self._told_closed(session, reason)
            return
        call = CloseCall(session.spec.mode, session, None, None)
        call.reason, call.quiet = reason, quiet
        outcome = self._make(call, jobs, self._limit(session.spec))
        if isinstance(outcome, Call):
            jobs.append(outcome)
