"""The protocol engine: every rule of a session, in one place, and no I/O.

Transports feed it bytes (or request frames) through a `Peer` and write out what the peer's
outbox holds; a driver runs the env calls it hands back (`Call`, see `calls.py`) and returns
them with `complete`. The engine owns no socket, thread or event loop, so the same rules hold
on every transport and under every driver (trio in the server, trio or asyncio or a plain
thread in the inproc channels), and tests can drive it by hand.

The rules:

* **One request of a session at a time, in arrival order.** A request for a session that is
  busy (a call in flight, or held by a batch) waits in the session's queue; each answer of a
  session is produced after the answer to the request before it. The queue belongs to the
  session, not to a connection, so the rule holds for requests arriving on any peer of the
  owner (concurrent HTTP requests included). Across sessions, requests run concurrently.
* **How a call runs** (`Mode`): inline on the feeding thread for `inline = True` envs' plain
  methods, a worker thread for other plain methods, awaited for coroutines. Inline work is
  answered before `receive` returns, with no call handed out.
* **`step_many`** steps each named session once. An item naming a session that an earlier
  item of the same batch named gets `invalid_argument` (`reason: duplicate_session`) and is
  not stepped; an unknown session's item gets `unknown_session`. Each item waits for its
  session like any request; once stepped, the session stays held by the batch until the
  whole batch is answered, so no later request of any of its sessions is answered before the
  batch. Items are queued in item order when the batch arrives, all at once, so two batches
  on overlapping sessions can never wait for each other. The fast path (every session idle,
  distinct, stepping inline, and no per-step hook) answers the whole batch in one pass and
  one encode; it gives the same bytes as the general path.
* **`step_columns`** (listed in `welcome`'s features as `step_columns`) is `step_many` by
  columns: the sessions in one array, the actions in another, resets by position with one
  set of arguments. It is ordered and run exactly as the `step_many` of its items, under the
  rules above (a busy or queued session's position waits its turn, a guest may not reset, an
  unknown or foreign session is `unknown_session` at its position), and answered by columns:
  the observations in one array, null where a position failed, errors and tasks by
  position. A malformed one (actions not an array as long as the sessions, a reset position
  repeated or out of range) is one `invalid_argument` error and steps nothing. When no
  position resets and every session is idle, the caller's own, unshared and of one inline
  env, the actions decode in one pass into the env's action type and the batch is answered
  on the fast path.
* **Ownership.** Sessions belong to an `Owner` (one connection, or every HTTP request of a
  server); a peer sees only its owner's sessions: another owner's session id is
  `unknown_session`. When the owner goes (`disconnect`), its sessions close: idle ones at
  once, busy ones as soon as their call ends. An owner may `share` a session: another owner
  that presents the key (`attach`) becomes its guest, and may do anything in it but reset,
  close or share it (`forbidden`); a guest's going closes nothing.
* **Closing.** `close` waits for the session's earlier requests like any request; the session
  leaves the table (freeing capacity) when `close` is reached, its env's `close()` runs
  exactly once, and requests queued behind it get `unknown_session`.
* **Errors are frames.** A frame that cannot be decoded gets an error with the id salvaged
  when it can be read (`incoming.py`); every failure of a request is answered with an error
  frame with its id; an engine bug is `internal` and the engine goes on.
"""

from __future__ import annotations

import collections
import copy
import functools
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, Mode
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.incoming import decode_request, too_large
from ecotone.kernel.limits import Limits
from ecotone.kernel.operations import Operations, columns_answer
from ecotone.kernel.sessions import CapacityError, Phase, Session, SessionTable
from ecotone.specs import (
    CallTool,
    Close,
    Closed,
    Codec,
    Describe,
    Error,
    ErrorCode,
    GetState,
    GetTask,
    Hello,
    ListTasks,
    ListTools,
    Open,
    Opened,
    Ping,
    Pong,
    Render,
    Request,
    Reset,
    ResetArgs,
    Response,
    Share,
    Shared,
    SharedSteps,
    SharedStepsResult,
    Step,
    StepColumns,
    StepItem,
    StepMany,
    StepManyResult,
)
from ecotone.specs.frames import RequestId

log = logging.getLogger("ecotone.engine")

NO_CALLS: Final[Sequence[Call]] = ()

Sink = Callable[["Peer"], Awaitable[None]]
"""How a driver writes a peer's outbox out (the engine only stores it on the peer)."""


_OWNER_ONLY: dict[type, str] = {
    Reset: "resets",
    Close: "closes",
    Share: "shares",
    SharedSteps: "reads the steps of",
}
"""What a guest of a shared session may not do, and who does it instead."""


@final
class Owner:
    """Who sessions belong to. `closed` once the owner is gone (its sessions are closing);
    `authenticated` once it showed the server's token (or needed none: see `Engine.owner`)."""

    __slots__ = ("authenticated", "closed", "principal")

    def __init__(self, authenticated: bool = True, principal: int | None = None) -> None:
        self.closed = False
        self.authenticated = authenticated
        self.principal = principal
        """Which of the server's tokens it showed (its number; None: no tokens)."""


def token_number(tokens: Sequence[str], given: str | None) -> int | None:
    """Which of `tokens` `given` is (its number), or None; every token is compared, in
    constant time, so the answer's timing tells nothing."""
    if not given:
        return None
    found = None
    for number, token in enumerate(tokens):
        if hmac.compare_digest(given.encode(), token.encode()):
            found = number
    return found


@final
class Peer:
    """One place answers go: a connection, or a single HTTP request. Made by `Engine.peer`.

    Answers are appended to `outbox` (encoded with `codec`, or as frames when `frames`);
    the driver takes them with `take` and writes them. `sink` is the driver's: it is called
    (by the driver, through `Engine.take_touched`) for peers whose outbox became non-empty."""

    __slots__ = ("closed", "codec", "engine", "frames", "outbox", "owner", "pending", "sink")

    def __init__(
        self, engine: Engine, codec: Codec, owner: Owner, sink: Sink | None, frames: bool
    ) -> None:
        self.engine = engine
        self.codec = codec
        self.owner = owner
        self.sink = sink
        self.frames = frames
        self.outbox: list[Any] = []
        self.closed = False
        self.pending = 0
        """Requests received and not answered yet (a transport stops reading at
        `limits.max_pending_requests`)."""

    def receive(self, data: bytes | str) -> Sequence[Call]:
        """Handle one received frame; returns the calls the driver must run."""
        self.pending += 1
        engine = self.engine
        request = decode_request(self.codec, data, engine.limits.max_frame_bytes)
        if type(request) is Error:
            self.emit(request)
            return NO_CALLS
        return engine.submit(self, request)  # type: ignore[arg-type]

    def submit(self, request: Request) -> Sequence[Call]:
        """Handle one request frame built by a profile (HTTP routes, OpenEnv's messages)."""
        self.pending += 1
        return self.engine.submit(self, request)

    def too_large(self, size: int) -> None:
        """A frame was discarded unread (the transport's reader saw its size)."""
        self.pending += 1
        self.emit(too_large(size, self.engine.limits.max_frame_bytes))

    @property
    def full(self) -> bool:
        """As many requests wait for answers as the limits allow: stop reading."""
        return self.pending >= self.engine.limits.max_pending_requests

    def emit(self, frame: Any) -> None:
        """Queue an answer (a Response, or bytes already encoded)."""
        if type(frame) is Error:
            self.engine.errors[frame.code] += 1
        if self.closed:
            return
        self.pending -= 1
        if not self.outbox and self.sink is not None:
            self.engine._touched.append(self)
        if not self.frames and type(frame) is not bytes:
            frame = self.codec.encode(frame)
        self.outbox.append(frame)

    def take(self) -> list[Any]:
        """Everything answered so far, in order, and empty the outbox."""
        out, self.outbox = self.outbox, []
        return out

    def close(self) -> None:
        """The place answers went is gone: later answers are dropped (sessions are the
        owner's: `Engine.disconnect` closes them)."""
        self.closed = True
        self.outbox = []


@final
class _Queued:
    """A request waiting for its session."""

    __slots__ = ("peer", "request")

    def __init__(self, peer: Peer, request: Request) -> None:
        self.peer = peer
        self.request = request


@final
class _Batch:
    """A `step_many` being answered."""

    __slots__ = ("asked", "columns", "held", "peer", "remaining", "results", "rid")

    def __init__(
        self, peer: Peer, rid: RequestId, size: int, asked: float | None, columns: bool
    ) -> None:
        self.peer = peer
        self.rid = rid
        self.asked = asked
        self.columns = columns
        """Answered as a `step_columns_result` (it came as `step_columns`)."""
        self.results: list[Any] = [None] * size
        self.remaining = 0
        self.held: list[Session] = []


@final
class _Entry:
    """One item of a batch, waiting for (or running on) its session."""

    __slots__ = ("action", "batch", "index", "reset")

    def __init__(
        self, batch: _Batch, index: int, action: msgspec.Raw, reset: Reset | None = None
    ) -> None:
        self.batch = batch
        self.index = index
        self.action = action
        self.reset = reset
        """The item is this reset (`StepItem.reset`), not a step."""


class Engine(Operations):
    """Serves a set of environments to any number of peers, under one set of rules."""

    def __init__(
        self,
        envs: Mapping[str, EnvSpec] | EnvSpec,
        *,
        default_env: str | None = None,
        limits: Limits | None = None,
        hooks: Any = None,
        clock: Callable[[], float] = time.monotonic,
        token: str | None = None,
        tokens: Sequence[str] = (),
    ) -> None:
        if isinstance(envs, EnvSpec):
            envs = {envs.name: envs}
        if not envs:
            raise ValueError("an engine needs at least one environment")
        self.envs: dict[str, EnvSpec] = dict(envs)
        self.default_env = default_env or next(iter(self.envs))
        if self.default_env not in self.envs:
            raise ValueError(f"default env {self.default_env!r} is not among the served envs")
        self.limits = limits or Limits()
        self.tokens: tuple[str, ...] = tuple(tokens) or ((token,) if token else ())
        """The bearer tokens an owner may show, any one (none: none needed); each is a
        principal, whose sessions `max_sessions_per_token` counts together."""
        self.token = self.tokens[0] if self.tokens else None
        """The first token (None: none needed)."""
        self.sessions = SessionTable(self.limits.max_sessions, self.limits.idle_timeout)
        self.clock = clock
        self._hooks = hooks
        self._on_opened = self._hook("ecotone_session_opened")
        self._on_closed = self._hook("ecotone_session_closed")
        self._on_step = self._hook("ecotone_step_completed")
        self._on_episode = self._hook("ecotone_episode_started")
        self._on_call = self._hook("ecotone_call_completed")
        self._touched: list[Peer] = []
        # What the server did, for /metrics (plain counters: nothing on the hot path but +1).
        self.errors: collections.Counter[str] = collections.Counter()
        """Error frames answered, by code."""
        self.opened_total = 0
        self._ready: collections.deque[Session] = collections.deque()
        self._begin: dict[type, Callable[[Session, Peer, Any, list[Call]], Any]] = {
            Reset: self._begin_reset,
            GetState: self._begin_state,
            Close: self._begin_close,
            ListTools: self._begin_list_tools,
            CallTool: self._begin_call_tool,
            Render: self._begin_render,
            Share: self._begin_share,
            SharedSteps: self._begin_shared_steps,
        }

    def _hook(self, name: str) -> Any:
        """A caller of hook `name`, or None when no plugin implements it (keeps the hot path
        free). Hooks must not raise; one that does is logged and the request goes on."""
        if self._hooks is None:
            return None
        caller = getattr(self._hooks, name, None)
        if caller is None or not caller.get_hookimpls():
            return None

        def call(**kwargs: Any) -> None:
            try:
                caller(**kwargs)
            except Exception:
                log.exception("a plugin's %s hook raised (ignored)", name)

        return call

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
        return Peer(self, codec, owner if owner is not None else self.owner(), sink, frames)

    def take_touched(self) -> list[Peer]:
        """Peers (with a sink) whose outbox became non-empty since the last call."""
        touched, self._touched = self._touched, []
        return touched

    def complete(self, call: Call) -> Sequence[Call]:
        """The driver made `call` (its `value` or `error` is set): answer it, and start what
        was waiting for its session. Returns the next calls to run."""
        jobs: list[Call] = []
        session: Session | None = call.session
        if self._on_call is not None and call.started and call.finish != self._finish_step:
            self._timed(call)
        try:
            outcome = call.finish(call, jobs)
        except Exception as exc:  # an engine bug: report it, keep serving
            log.exception("internal error finishing %r", call)
            outcome = answers.internal(exc, _rid(call.request), getattr(session, "id", None))
        if session is not None and session.active is call:
            session.active = None
            session.last_used = self.clock()
        entry = call.batch
        if entry is not None:
            if outcome is not None:  # None: a reset item's next call answers it
                self._entry_answered(session, entry, outcome, jobs)
        elif outcome is not None and call.peer is not None:
            call.peer.emit(outcome)
        if session is not None and session.active is None:
            if session.closing is not None and not session.closed:
                self._retire(session, session.closing, jobs)
            self._ready.append(session)
        self._drain(jobs)
        return jobs

    def touch(self, peers: Sequence[Peer]) -> None:
        """Put peers back among the touched (a driver that could not write them all)."""
        for peer in peers:
            if peer.outbox and not peer.closed and peer not in self._touched:
                self._touched.append(peer)

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
        jobs: list[Call] = []
        session: Session | None = call.session
        seconds = call.timeout
        if call.finish == self._finish_open:  # a constructor
            req, spec = call.request
            self.sessions.release(call.peer.owner)
            what = f"{spec.name} constructor"
            call.peer.emit(answers.timed_out(what, seconds, req.id, None, why))
            self._drain(jobs)
            return jobs
        if call.cleanup:  # an env's close() that hung: the session is gone all the same
            log.error("an env's close() did not end within %ss; abandoned", seconds)
            if call.finish == self._finish_close:  # a client's close: answer it
                assert session is not None
                if session.active is call:
                    session.active = None
                call.peer.emit(self._finish_close(call, jobs))
            elif call.finish == self._finish_retire:
                self._finish_retire(call, jobs)
            self._drain(jobs)
            return jobs
        assert session is not None, call
        env = session.env
        session.phase = Phase.BROKEN
        session.env = None
        if call.mode is Mode.AWAIT and env is not None:  # cancelled mid-call: close it now
            closing = self._invoke(
                Mode.AWAIT,
                env.close,
                (),
                None,
                self._finish_quiet,
                None,
                None,
                None,
                jobs,
                cleanup=True,
                timeout=self._limit(session.spec),
            )
            jobs.append(closing)
        if call.batch is None:
            what = type(call.request).__name__.lower()
        else:
            what = "step" if call.batch.reset is None else "reset"
        if what in ("int", "str"):  # a single step's request is its id
            what = "step"
        rid = call.batch.batch.rid if call.batch is not None else _rid(call.request)
        error = answers.timed_out(what, seconds, rid, session.id, why)
        if session.active is call:
            session.active = None
        session.last_used = self.clock()
        if call.batch is not None:
            self._entry_answered(session, call.batch, error, jobs)
        elif call.peer is not None:
            call.peer.emit(error)
        if session.active is None:
            if session.closing is not None and not session.closed:
                self._retire(session, session.closing, jobs)
            self._ready.append(session)
        self._drain(jobs)
        return jobs

    def disconnect(self, owner: Owner, reason: str = "disconnect") -> Sequence[Call]:
        """The owner is gone: close every session it owns (a busy one once its call ends);
        sessions it was only a guest of stay open."""
        owner.closed = True
        self.sessions.detach(owner)
        jobs: list[Call] = []
        for session in self.sessions.owned_by(owner):
            self._retire(session, reason, jobs)
        self._drain(jobs)
        return jobs

    def expire(self) -> Sequence[Call]:
        """Close sessions idle past `idle_timeout` (never a busy one)."""
        jobs: list[Call] = []
        for session in self.sessions.expired(self.clock()):
            log.info("closing idle session %s (%s)", session.id, session.spec.name)
            self._retire(session, "idle", jobs)
        self._drain(jobs)
        return jobs

    def shutdown(self) -> Sequence[Call]:
        """Close every session (the server is stopping)."""
        jobs: list[Call] = []
        for session in list(self.sessions):
            self._retire(session, "shutdown", jobs)
        self._drain(jobs)
        return jobs

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
            if kind is StepColumns:
                return self._submit_columns(peer, request)  # type: ignore[arg-type]
            if kind is StepMany:
                return self._submit_batch(peer, request)  # type: ignore[arg-type]
            if kind is Open:
                return self._submit_open(peer, request)  # type: ignore[arg-type]
            if kind is Hello:
                peer.emit(self._hello(request))  # type: ignore[arg-type]
                return NO_CALLS
            if kind is Ping:
                peer.emit(Pong(id=request.id))
                return NO_CALLS
            if kind is Describe:
                peer.emit(self._describe(request))  # type: ignore[arg-type]
                return NO_CALLS
            if kind is ListTasks:
                peer.emit(self._list_tasks(peer, request))  # type: ignore[arg-type]
                return NO_CALLS
            if kind is GetTask:
                peer.emit(self._get_task(peer, request))  # type: ignore[arg-type]
                return NO_CALLS
            session_id: str = request.session  # type: ignore[union-attr]
            session = self.sessions.get(session_id, peer.owner)
            if session is None:
                peer.emit(answers.unknown_session(session_id, request.id))
                return NO_CALLS
            if session.busy:
                self._enqueue(session, _Queued(peer, request))
                return NO_CALLS
            jobs: list[Call] = []
            self._start(session, peer, request, jobs)
            self._drain(jobs)
            return jobs
        except Exception as exc:  # an engine bug: report it, keep serving
            log.exception("internal error handling %s", kind.__name__)
            peer.emit(answers.internal(exc, request.id, getattr(request, "session", None)))
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

    def _enqueue(self, session: Session, item: _Queued | _Entry) -> None:
        queue = session.queue
        if queue is None:
            queue = session.queue = collections.deque()
        queue.append(item)

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
                if type(item) is _Entry:
                    rid = item.batch.rid
                    self._entry_answered(None, item, answers.unknown_session(session.id, rid), jobs)
                else:
                    item.peer.emit(answers.unknown_session(session.id, item.request.id))
                continue
            if type(item) is _Entry:
                self._start_entry(session, item, jobs)
            else:
                self._start(session, item.peer, item.request, jobs)

    def _start(self, session: Session, peer: Peer, request: Any, jobs: list[Call]) -> None:
        """Run a request on its idle session: answered now, or a call for the driver."""
        outcome = self._outcome(session, peer, request, jobs)
        if type(outcome) is Call:
            session.active = outcome
            jobs.append(outcome)
        elif outcome is not None:
            peer.emit(outcome)

    def _outcome(self, session: Session, peer: Peer, request: Any, jobs: list[Call]) -> Any:
        """What a request on its idle session comes to: its answer, a call for the driver, or
        None (a call it made is in `jobs` and answers it)."""
        try:
            if type(request) is Step:
                outcome = self._begin_step(
                    session, peer, request.action, request.id, request.call_timeout
                )
            elif session.owner is not peer.owner and type(request) in _OWNER_ONLY:
                outcome = answers.error(
                    ErrorCode.FORBIDDEN,
                    f"session {session.id} was shared with this connection: its owner "
                    f"{_OWNER_ONLY[type(request)]} it",
                    request.id,
                    session.id,
                )
            elif session.phase is Phase.BROKEN and type(request) not in (Reset, Close):
                outcome = answers.broken(session.id, request.id)
            else:
                outcome = self._begin[type(request)](session, peer, request, jobs)
                session.last_used = self.clock()
        except Exception as exc:  # an engine bug: this request fails, the session goes on
            log.exception("internal error starting %s", type(request).__name__)
            outcome = answers.internal(exc, request.id, session.id)
        return outcome

    # --- session-less requests ----------------------------------------------------------------

    def _submit_open(self, peer: Peer, req: Open) -> Sequence[Call]:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            peer.emit(spec)
            return NO_CALLS
        try:
            self.sessions.reserve(
                peer.owner,
                self.limits.max_sessions_per_connection,
                self.limits.max_sessions_per_token,
            )
        except CapacityError as exc:
            details: dict[str, Any] = {"active": exc.active, "limit": exc.limit}
            if exc.per_owner:
                details["scope"] = "connection"
            elif exc.per_token:
                details["scope"] = "token"
            peer.emit(answers.error(ErrorCode.CAPACITY, str(exc), req.id, **details))
            return NO_CALLS
        jobs: list[Call] = []
        mode = Mode.INLINE if spec.inline else Mode.THREAD
        outcome = self._invoke(
            mode,
            spec.make,
            (),
            None,
            self._finish_open,
            None,
            peer,
            (req, spec),
            jobs,
            timeout=self._limit(spec),
        )
        if type(outcome) is Call:
            jobs.append(outcome)
        else:
            peer.emit(outcome)
        self._drain(jobs)
        return jobs

    def _finish_open(self, call: Call, jobs: list[Call]) -> Response:
        req, spec = call.request
        peer: Peer = call.peer
        if call.error is not None:
            self.sessions.release(peer.owner)
            kind = type(call.error).__qualname__
            return answers.error(
                ErrorCode.ENV_ERROR,
                f"environment {spec.name!r} failed to start: {kind}: {call.error}",
                req.id,
                type=kind,
                message=str(call.error),
            )
        session = self.sessions.add(spec, call.value, peer.owner, self.clock())
        if peer.owner.closed:  # the peer left while the env was being built
            self._retire(session, "disconnect", jobs, quiet=True)
            return answers.error(ErrorCode.UNKNOWN_SESSION, "connection closed", req.id)
        self.opened_total += 1
        if self._on_opened is not None:
            self._on_opened(session_id=session.id, env=spec.name)
        return Opened(id=req.id, session=session.id, env=spec.name)

    # --- step ---------------------------------------------------------------------------------

    def _submit_step(self, peer: Peer, req: Step) -> Sequence[Call]:
        session = self.sessions.get(req.session, peer.owner)
        if session is None:
            peer.emit(answers.unknown_session(req.session, req.id))
            return NO_CALLS
        if session.active is not None or session.queue:
            self._enqueue(session, _Queued(peer, req))
            return NO_CALLS
        outcome = self._begin_step(session, peer, req.action, req.id, req.call_timeout)
        if type(outcome) is Call:
            session.active = outcome
            return [outcome]
        peer.emit(outcome)
        return NO_CALLS

    # --- step_many ----------------------------------------------------------------------------

    def _submit_columns(self, peer: Peer, req: StepColumns) -> Sequence[Call]:
        """`step_columns`: when no position resets and every session is of one env, its
        actions decode in one pass straight into the env's action type and the batch is
        answered as `_step_batch` does; otherwise it runs as the `step_many` of its items."""
        ids = req.sessions
        if not req.resets and not peer.frames and self._on_step is None:
            sessions = self.sessions.idle_own(ids, peer.owner)
            if sessions and sessions[0].spec.mode is Mode.INLINE:  # else: decoded per item
                spec = sessions[0].spec
                try:
                    actions = peer.codec.decode_as(req.actions, _list_of(spec.action_type))
                except (msgspec.DecodeError, RecursionError):
                    actions = None  # the per-item path says which action is wrong
                if actions is not None and len(actions) == len(ids):
                    data = self._step_columns(peer, ids, sessions, actions, req.id)
                    if data is not None:
                        peer.emit(data)
                        return NO_CALLS
        items = _column_items(peer.codec, req)
        if type(items) is Error:
            peer.emit(items)
            return NO_CALLS
        many = StepMany(id=req.id, steps=items, call_timeout=req.call_timeout)  # type: ignore[arg-type]
        return self._submit_batch(peer, many, columns=True)

    def _submit_batch(self, peer: Peer, req: StepMany, columns: bool = False) -> Sequence[Call]:
        items = req.steps
        rid = req.id
        ids = [item.session for item in items]
        sessions = self.sessions.get_many(ids, peer.owner)
        resets = _resets(req) if [item.reset for item in items].count(None) < len(items) else None
        if not peer.frames and self._on_step is None:
            actions = [item.action for item in items]
            data = self._step_batch(peer, ids, sessions, actions, rid, resets, columns)
            if data is not None:
                peer.emit(data)
                return NO_CALLS
        batch = _Batch(peer, rid, len(items), req.call_timeout, columns)
        first: dict[str, int] = {}
        starts: list[tuple[Session, _Entry]] = []
        for index, (item, session) in enumerate(zip(items, sessions, strict=True)):
            session_id = item.session
            if session is None:
                batch.results[index] = answers.unknown_session(session_id, rid)
                continue
            earlier = first.get(session_id)
            if earlier is not None:
                batch.results[index] = answers.named_twice(session_id, rid, earlier, index)
                continue
            first[session_id] = index
            reset = None if resets is None else resets[index]
            if type(reset) is Error:
                batch.results[index] = reset
                continue
            starts.append((session, _Entry(batch, index, item.action, reset)))  # type: ignore[arg-type]
        jobs: list[Call] = []
        batch.remaining = len(starts)
        if not starts:
            self._answer_batch(batch, jobs)
        # Every item is placed (queued or started) before any can finish the batch.
        for session, entry in starts:
            if session.busy:
                self._enqueue(session, entry)
            else:
                self._start_entry(session, entry, jobs)
        self._drain(jobs)
        return jobs

    def _start_entry(self, session: Session, entry: _Entry, jobs: list[Call]) -> None:
        batch = entry.batch
        reset = entry.reset
        if reset is not None:
            outcome = self._outcome(session, batch.peer, reset, jobs)
            if outcome is None:  # a fresh env was made inline; the reset it led to runs on
                active = session.active
                assert type(active) is Call, active
                active.batch = entry  # that call answers the item
                return
        else:
            try:
                outcome = self._begin_step(
                    session, batch.peer, entry.action, batch.rid, batch.asked
                )
            except Exception as exc:  # an engine bug: this item fails, the batch is answered
                log.exception("internal error starting a step_many item")
                outcome = answers.internal(exc, batch.rid, session.id)
        if type(outcome) is Call:
            outcome.batch = entry
            session.active = outcome
            jobs.append(outcome)
        else:
            self._entry_answered(session, entry, outcome, jobs)

    def _entry_answered(
        self, session: Session | None, entry: _Entry, outcome: Any, jobs: list[Call]
    ) -> None:
        """An item has its answer; its session is held until the whole batch is answered."""
        batch = entry.batch
        batch.results[entry.index] = outcome
        if session is not None and not session.closed:
            session.active = batch
            batch.held.append(session)
        batch.remaining -= 1
        if batch.remaining == 0:
            self._answer_batch(batch, jobs)

    def _answer_batch(self, batch: _Batch, jobs: list[Call]) -> None:
        if batch.columns:
            batch.peer.emit(columns_answer(batch.rid, batch.results))
        else:
            batch.peer.emit(StepManyResult(id=batch.rid, results=batch.results))
        now = self.clock()
        for session in batch.held:
            if session.active is batch:
                session.active = None
                session.last_used = now
                if session.closing is not None and not session.closed:
                    self._retire(session, session.closing, jobs)
                self._ready.append(session)

    # --- sharing ------------------------------------------------------------------------------

    def _begin_share(self, session: Session, peer: Peer, req: Share, jobs: list[Call]) -> Any:
        return Shared(id=req.id, session=session.id, key=self.sessions.share(session))

    def _begin_shared_steps(
        self, session: Session, peer: Peer, req: SharedSteps, jobs: list[Call]
    ) -> Any:
        kept = list(session.guest_steps or ())
        first = session.guest_count - len(kept)
        since = max(0, req.since)
        start = max(since, first)
        mine = peer.codec
        observations = [
            msgspec.Raw(encoded)
            if type(codec) is type(mine)
            else mine.raw(codec.decode_as(encoded, Any))
            for codec, encoded in kept[start - first :]
        ]
        return SharedStepsResult(
            id=req.id,
            session=session.id,
            observations=observations,
            next=session.guest_count,
            dropped=start - since,
        )

    def attach(self, owner: Owner, key: str) -> str | None:
        """Make `owner` a guest of the session shared with `key` (see `Share`): the session's
        id, or None when no open session has that key."""
        session = self.sessions.attach(key, owner)
        return None if session is None else session.id

    # --- closing ------------------------------------------------------------------------------

    def _begin_close(self, session: Session, peer: Peer, req: Close, jobs: list[Call]) -> Any:
        if session.env is None:  # set aside after a timeout: closed once its call ends
            self.sessions.remove(session)
            self._ready.append(session)
            if self._on_closed is not None:
                self._on_closed(session_id=session.id, env=session.spec.name, reason="client")
            return Closed(id=req.id, session=session.id)
        # The session stays in the table until its env is closed: requests arriving meanwhile
        # queue behind the close and learn afterwards, in order, that it is gone.
        return self._invoke(
            session.spec.mode,
            session.env.close,
            (),
            None,
            self._finish_close,
            session,
            peer,
            req,
            jobs,
            cleanup=True,
            timeout=self._limit(session.spec),
        )

    def _finish_close(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        self.sessions.remove(session)
        self._ready.append(session)  # what is queued behind the close learns it is gone
        self._closed(session, call, "client")
        return Closed(id=call.request.id, session=session.id)

    def _retire(self, session: Session, reason: str, jobs: list[Call], quiet: bool = False) -> None:
        """Close a session without a request asking (disconnect, idle, shutdown). A busy one
        is marked and closed when its call ends."""
        if session.closed:
            return
        if session.active is not None:
            session.closing = reason
            return
        self.sessions.remove(session)
        self._ready.append(session)
        if session.env is None:  # set aside after a timeout: closed once its call ends
            if not quiet and self._on_closed is not None:
                self._on_closed(session_id=session.id, env=session.spec.name, reason=reason)
            return
        call = self._invoke(
            session.spec.mode,
            session.env.close,
            (),
            None,
            self._finish_quiet if quiet else self._finish_retire,
            session,
            None,
            reason,
            jobs,
            cleanup=True,
            timeout=self._limit(session.spec),
        )
        if type(call) is Call:
            call.session = None  # the session is out of the table: nothing waits on this call
            call.request = (session, reason)
            jobs.append(call)

    def _finish_retire(self, call: Call, jobs: list[Call]) -> None:
        session, reason = call.request if call.session is None else (call.session, call.request)
        self._closed(session, call, reason)

    def _finish_quiet(self, call: Call, jobs: list[Call]) -> None:
        if call.error is not None:
            log.error("environment raised in close()", exc_info=call.error)

    def _closed(self, session: Session, call: Call, reason: str) -> None:
        if call.error is not None:
            log.error("environment %r raised in close()", session.spec.name, exc_info=call.error)
        if self._on_closed is not None:
            self._on_closed(session_id=session.id, env=session.spec.name, reason=reason)


def _resets(req: StepMany) -> list[Reset | Error | None]:
    """For each item of a `step_many`, its reset as a `Reset` frame (None: a step), or the
    error an item with both an action and a reset is."""
    rid, timeout = req.id, req.call_timeout
    out: list[Reset | Error | None] = []
    for item in req.steps:
        args = item.reset
        if args is None:
            out.append(None)
        elif item.action:
            out.append(
                answers.error(
                    ErrorCode.INVALID_ARGUMENT,
                    "a step_many item is a step (`action`) or a reset (`reset`), not both",
                    rid,
                    item.session,
                )
            )
        else:
            out.append(
                Reset(
                    id=rid,
                    session=item.session,
                    seed=args.seed,
                    episode_id=args.episode_id,
                    options=args.options,
                    call_timeout=timeout,
                )
            )
    return out


@functools.cache
def _list_of(item: type) -> Any:
    """`list[item]`, made once per type (the codec keeps a decoder per type)."""
    return list[item]  # type: ignore[valid-type]


def _column_items(codec: Codec, req: StepColumns) -> list[StepItem] | Error:
    """The `step_many` items of a `step_columns`, or the error that makes it malformed."""
    rid, ids, positions = req.id, req.sessions, req.resets

    def bad(message: str) -> Error:
        return answers.error(ErrorCode.INVALID_ARGUMENT, f"step_columns: {message}", rid)

    try:
        actions = codec.decode_as(req.actions, list[msgspec.Raw])
    except (msgspec.DecodeError, RecursionError):
        return bad("`actions` must be an array, one action per session")
    if len(actions) != len(ids):
        return bad(f"{len(actions)} actions for {len(ids)} sessions")
    resets = set(positions)
    if len(resets) != len(positions):
        return bad("a position is in `resets` more than once")
    outside = sorted(j for j in resets if not 0 <= j < len(ids))
    if outside:
        return bad(f"`resets` names positions {outside} beyond the {len(ids)} sessions")
    args = req.reset if req.reset is not None else ResetArgs()
    return [
        # each reset its own options, as step_many's items decode theirs (an env may change them)
        StepItem(
            session=session,
            reset=msgspec.structs.replace(args, options=copy.deepcopy(args.options)),
        )
        if j in resets
        else StepItem(session=session, action=action)
        for j, (session, action) in enumerate(zip(ids, actions, strict=True))
    ]


def _rid(request: Any) -> RequestId | None:
    if isinstance(request, tuple):
        request = request[0]
    rid = getattr(request, "id", request)
    return rid if isinstance(rid, int | str) else None
