"""What each request other than a step does with an env: the call it makes, and how the call's
outcome becomes the answer.

The engine (`engine.py`) decides *when* a request runs (ordering, ownership); the methods
here decide *what* runs: `_begin_OP` checks the request against its session and either
answers at once or makes the env call (`EngineCore._make`: inline, or handed to the driver);
the finisher of the call's kind turns its outcome into the answer frame. The finishers are
registered by call type, so the engine answers a call by what it is.

Rules kept here:

* `open` claims a slot (`capacity` when the server, the connection or the token holds as
  many sessions as allowed) before the env is built, and gives it back if the constructor
  fails; a session whose owner left while its env was built is closed quietly.
* `reset` starts the episode (FRESH, then RUNNING or ENDED by its observation); a reset that
  raises leaves the session FRESH. Options the env does not take are `invalid_argument`
  naming them; a reset of a session whose env was set aside makes a fresh instance first.
* Tools and render answer `unsupported` for an env without them. A multi-agent env's
  `render(seat)` draws what the asker may see: a seat's holder its seat, the owner and
  spectators the public picture (seat None).
* A client's `close` waits for the session's earlier requests; the session leaves the table
  (freeing its slot) once its env's `close()` returned, and what was queued behind it learns
  it is gone.
"""

from __future__ import annotations

import base64
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import (
    Call,
    CallToolCall,
    CloseCall,
    DisposeCall,
    ListToolsCall,
    Mode,
    OpenCall,
    RenderCall,
    ReplaceCall,
    ResetCall,
    StateCall,
)
from ecotone.kernel.core import EngineCore, log
from ecotone.kernel.sessions import CapacityError, Session
from ecotone.kernel.states import Event, advance, ends_episode
from ecotone.kernel.tasks import TASK_OPTIONS, TaskError
from ecotone.specs import (
    FEATURES,
    PROTOCOL_VERSION,
    CallTool,
    Close,
    Closed,
    Describe,
    Described,
    Error,
    ErrorCode,
    GetState,
    GetTask,
    Hello,
    ListTasks,
    ListTools,
    ObservationFrame,
    Open,
    Opened,
    Render,
    Rendered,
    Reset,
    Response,
    Share,
    Shared,
    SharedSteps,
    SharedStepsResult,
    StateFrame,
    TaskAnswer,
    TaskPage,
    ToolInfo,
    ToolResult,
    Tools,
    Welcome,
)
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer

SERVER_NAME = "ecotone"


class Operations(EngineCore):
    """The per-operation half of the engine."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._finishers.update(
            {
                OpenCall: self._opened,
                ReplaceCall: self._replaced,
                ResetCall: self._reset_done,
                StateCall: self._state_done,
                ListToolsCall: self._tools_listed,
                CallToolCall: self._tool_called,
                RenderCall: self._rendered,
                CloseCall: self._close_done,
                DisposeCall: self._disposed,
            }
        )
        self._begin.update(
            {
                Reset: self._begin_reset,
                GetState: self._begin_state,
                Close: self._begin_close,
                ListTools: self._begin_list_tools,
                CallTool: self._begin_call_tool,
                Render: self._begin_render,
                Share: self._begin_share,
                SharedSteps: self._begin_shared_steps,
            }
        )

    # --- requests of no session ---------------------------------------------------------------

    def _hello(self, req: Hello) -> Response:
        if req.version != PROTOCOL_VERSION:
            return answers.error(
                ErrorCode.UNSUPPORTED_VERSION,
                f"protocol version {req.version} is not supported; this server speaks "
                f"{PROTOCOL_VERSION}",
                req.id,
                supported=[PROTOCOL_VERSION],
            )
        return Welcome(
            id=req.id,
            version=PROTOCOL_VERSION,
            server=SERVER_NAME,
            envs=list(self.envs),
            features=list(FEATURES),
        )

    def _describe(self, req: Describe) -> Response:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
        return Described(id=req.id, info=spec.info())

    def _list_tasks(self, peer: Peer, req: ListTasks) -> Response:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
        tasks = spec.tasks
        if tasks is None:
            return TaskPage(id=req.id, env=spec.name, splits={})
        try:
            split, page = tasks.page(req.split, req.offset, req.limit)
            raws = [peer.codec.raw(tasks.public(record)) for record in page]
            ids = [tasks.id_of(record) for record in page]
        except TaskError as exc:
            return answers.error(ErrorCode.INVALID_ARGUMENT, str(exc), req.id, **exc.details)
        except (TypeError, OverflowError, msgspec.EncodeError) as exc:
            return answers.unencodable(spec.name, "a task", exc, req.id, None)
        return TaskPage(
            id=req.id,
            env=spec.name,
            splits=tasks.counts(),
            split=split,
            offset=max(0, req.offset),
            total=len(tasks.splits[split]),
            tasks=raws,
            ids=ids,
        )

    def _get_task(self, peer: Peer, req: GetTask) -> Response:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
        if spec.tasks is None:
            return answers.error(
                ErrorCode.UNSUPPORTED, f"env {spec.name!r} publishes no tasks", req.id
            )
        try:
            if req.task is not None:
                ref, record = spec.tasks.find(req.task)
            elif req.index is not None:
                ref, record = spec.tasks.get(req.split, req.index)
            else:
                raise TaskError("get_task needs `task` (an id) or `index` (and `split`)")
            raw = peer.codec.raw(spec.tasks.public(record))
        except TaskError as exc:
            return answers.error(ErrorCode.INVALID_ARGUMENT, str(exc), req.id, **exc.details)
        except (TypeError, OverflowError, msgspec.EncodeError) as exc:
            return answers.unencodable(spec.name, "a task", exc, req.id, None)
        return TaskAnswer(id=req.id, env=spec.name, ref=ref, task=raw)

    # --- open ---------------------------------------------------------------------------------

    def _begin_open(self, peer: Peer, req: Open, jobs: list[Call]) -> Any:
        """A slot claimed, then the env's constructor made: the answer, or the call."""
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
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
            return answers.error(ErrorCode.CAPACITY, str(exc), req.id, **details)
        call = OpenCall(Mode.INLINE if spec.inline else Mode.THREAD, spec, peer, req)
        return self._make(call, jobs, self._limit(spec))

    def _opened(self, call: OpenCall, jobs: list[Call]) -> Response:
        req, spec, peer = call.request, call.spec, call.peer
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
        return Opened(
            id=req.id,
            session=session.id,
            env=spec.name,
            resume=self.resume_key(session),
            lease=self.leases.length,
        )

    # --- reset --------------------------------------------------------------------------------

    def _begin_reset(self, session: Session, peer: Peer, req: Reset, jobs: list[Call]) -> Any:
        spec = session.spec
        if session.env is None:  # set aside after a timeout: a fresh instance first
            replace = ReplaceCall(Mode.INLINE if spec.inline else Mode.THREAD, session, peer, req)
            return self._make(replace, jobs, self._limit(spec))
        kwargs = self._reset_kwargs(session, req)
        if type(kwargs) is Error:
            return kwargs
        advance(session, Event.RESET)
        call = ResetCall(spec.mode, session, peer, req, kwargs)  # type: ignore[arg-type]
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    def _reset_kwargs(self, session: Session, req: Reset) -> dict[str, Any] | Error:
        """The arguments of `env.reset` (the task it chose included), or the error of options
        the env does not take or a task it cannot give."""
        spec = session.spec
        accepted = spec.reset_options
        tasks = spec.tasks
        if tasks is not None and accepted is not None:
            accepted = accepted | TASK_OPTIONS
        if req.options and accepted is not None:
            unknown = sorted(set(req.options) - accepted)
            if unknown:
                known = ", ".join(sorted(accepted)) or "none"
                return answers.error(
                    ErrorCode.INVALID_ARGUMENT,
                    f"env {spec.name!r} does not take reset option(s) {', '.join(unknown)} "
                    f"(it takes: {known})",
                    req.id,
                    req.session,
                    unknown=unknown,
                    accepted=sorted(accepted),
                )
        kwargs = {"seed": req.seed, "episode_id": req.episode_id, **req.options}
        if tasks is not None:
            try:
                session.task, kwargs["task"] = tasks.choose(req.options, req.seed)
            except TaskError as exc:
                return answers.error(
                    ErrorCode.INVALID_ARGUMENT, str(exc), req.id, req.session, **exc.details
                )
            kwargs.pop("split", None)
            kwargs.pop("index", None)
        return kwargs

    def _replaced(self, call: ReplaceCall, jobs: list[Call]) -> Response | None:
        """A fresh env instance for a session whose env was set aside: now the reset itself
        (None when that reset is a call of its own, which answers the request)."""
        session, req = call.session, call.request
        if call.error is not None:
            kind = type(call.error).__qualname__
            return answers.error(
                ErrorCode.ENV_ERROR,
                f"environment {session.spec.name!r} failed to start a fresh instance: "
                f"{kind}: {call.error}",
                req.id,
                session.id,
                type=kind,
                message=str(call.error),
            )
        session.env = call.value
        advance(session, Event.REPLACED)
        outcome = self._begin_reset(session, call.peer, req, jobs)
        if isinstance(outcome, Call):
            session.active = outcome  # the session stays busy: this reset is not answered yet
            outcome.entry = call.entry  # a step_many's reset item: that call answers it
            jobs.append(outcome)
            return None
        return outcome

    def _reset_done(self, call: ResetCall, jobs: list[Call]) -> Response:
        session, req = call.session, call.request
        if call.error is not None:
            return answers.env_error(call.error, req.id, session.id, "reset")
        obs = call.value
        try:
            raw = call.peer.codec.raw(obs)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.unencodable(session.spec.name, "an observation", exc, req.id, session.id)
        advance(session, Event.FINISHED if ends_episode(obs) else Event.OBSERVED)
        session.observation = obs
        session.forked_from = None
        if session.spec.seats:
            self.reset_seats(session)
        if self._on_episode is not None:
            self._on_episode(
                session_id=session.id,
                env=session.spec.name,
                episode_id=req.episode_id,
                seed=req.seed,
                observation=obs,
            )
        return ObservationFrame(id=req.id, session=session.id, observation=raw, task=session.task)

    # --- state, tools, render -----------------------------------------------------------------

    def _begin_state(self, session: Session, peer: Peer, req: GetState, jobs: list[Call]) -> Any:
        spec = session.spec
        call = StateCall(spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    def _state_done(self, call: StateCall, jobs: list[Call]) -> Response:
        session, req = call.session, call.request
        if call.error is not None:
            return answers.env_error(call.error, req.id, session.id, "state")
        try:
            raw = call.peer.codec.raw(call.value)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.env_error(exc, req.id, session.id, "state")
        return StateFrame(id=req.id, session=session.id, state=raw)

    def _no_tools(self, session: Session, rid: RequestId) -> Error:
        return answers.error(
            ErrorCode.UNSUPPORTED,
            f"environment {session.spec.name!r} exposes no tools",
            rid,
            session.id,
        )

    def _begin_list_tools(
        self, session: Session, peer: Peer, req: ListTools, jobs: list[Call]
    ) -> Any:
        spec = session.spec
        if not spec.has_tools:
            return self._no_tools(session, req.id)
        call = ListToolsCall(spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    def _tools_listed(self, call: ListToolsCall, jobs: list[Call]) -> Response:
        req = call.request
        try:
            if call.error is not None:
                raise call.error
            tools = [
                t if isinstance(t, ToolInfo) else msgspec.convert(t, ToolInfo) for t in call.value
            ]
        except Exception as exc:
            return answers.env_error(exc, req.id, req.session, "list_tools")
        return Tools(id=req.id, session=req.session, tools=tools)

    def _begin_call_tool(
        self, session: Session, peer: Peer, req: CallTool, jobs: list[Call]
    ) -> Any:
        spec = session.spec
        if not spec.has_tools:
            return self._no_tools(session, req.id)
        call = CallToolCall(spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    def _tool_called(self, call: CallToolCall, jobs: list[Call]) -> Response:
        session, req = call.session, call.request
        exc = call.error
        if isinstance(exc, LookupError):
            return answers.error(
                ErrorCode.INVALID_ARGUMENT,
                f"env {session.spec.name!r} has no tool {req.name!r}: {exc}",
                req.id,
                req.session,
                tool=req.name,
            )
        if exc is not None:
            return answers.env_error(exc, req.id, req.session, f"tool {req.name!r}")
        try:
            raw = call.peer.codec.raw(call.value)
        except (TypeError, msgspec.EncodeError) as failed:
            return answers.env_error(failed, req.id, req.session, f"tool {req.name!r}")
        return ToolResult(id=req.id, session=req.session, result=raw)

    def _begin_render(self, session: Session, peer: Peer, req: Render, jobs: list[Call]) -> Any:
        spec = session.spec
        if not spec.has_render:
            return answers.error(
                ErrorCode.UNSUPPORTED,
                f"environment {spec.name!r} has no custom view (no render() method)",
                req.id,
                req.session,
            )
        if spec.seats:  # a multi-agent env draws what the asker may see
            target = partial(session.env.env.render, self._render_seat(session, peer))
            call = RenderCall(spec.mode, session, peer, req, target)
        else:
            call = RenderCall(spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    @staticmethod
    def _render_seat(session: Session, peer: Peer) -> str | None:
        """Whose picture a multi-agent env's `render` draws for `peer`: a seat's holder its
        seat's (whose turn it is when it holds several), anyone else (the owner, a
        spectator) the public one."""
        seating = session.seating
        if seating is None or peer.owner is session.owner:
            return None
        held = seating.held_by(peer.owner)
        if not held:
            return None
        turn = session.env.turn
        return turn if turn in held else held[0]

    def _rendered(self, call: RenderCall, jobs: list[Call]) -> Response:
        req = call.request
        if call.error is not None:
            return answers.env_error(call.error, req.id, req.session, "render")
        view = call.value
        spec = call.session.spec
        if isinstance(view, bytes | bytearray | memoryview):
            kind, content = "image", base64.b64encode(bytes(view)).decode("ascii")
        elif isinstance(view, str) or view is None:
            kind, content = spec.render_kind, view or ""
        else:
            return answers.error(
                ErrorCode.ENV_ERROR,
                f"environment {spec.name!r}: render() returned {type(view).__qualname__}; "
                "expected str (text, markdown, HTML or SVG) or bytes (a PNG image)",
                req.id,
                req.session,
                type="TypeError",
                message=f"render() returned {type(view).__qualname__}",
            )
        return Rendered(id=req.id, session=req.session, kind=kind, content=content)

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

    # --- closing ------------------------------------------------------------------------------

    def _begin_close(self, session: Session, peer: Peer, req: Close, jobs: list[Call]) -> Any:
        if session.env is None:  # set aside after a timeout: closed once its call ends
            self._leave(session, "client")
            return Closed(id=req.id, session=session.id)
        # The session stays in the table until its env is closed: requests arriving meanwhile
        # queue behind the close and learn afterwards, in order, that it is gone.
        call = CloseCall(session.spec.mode, session, peer, req)
        return self._make(call, jobs, self._limit(session.spec))

    def _close_done(self, call: CloseCall, jobs: list[Call]) -> Response | None:
        """A session's env closed: a client's close leaves the table now and is answered; a
        retired session left it already, and only its end is told."""
        session = call.session
        if call.error is not None:
            log.error("environment %r raised in close()", session.spec.name, exc_info=call.error)
        if call.request is None:  # retired: out of the table since its close began
            if not call.quiet:
                self._told_closed(session, call.reason)
            return None
        self._leave(session, "client")
        self.forget_checkpoint(session, jobs)
        return Closed(id=call.request.id, session=session.id)

    def _disposed(self, call: DisposeCall, jobs: list[Call]) -> None:
        if call.error is not None:
            log.error("an env set aside after its deadline raised in close()", exc_info=call.error)

    def _leave(self, session: Session, reason: str) -> None:
        """The session leaves the table (CLOSED); what was queued behind it learns it is
        gone, and `ecotone_session_closed` hears why."""
        self._remove(session)
        self._told_closed(session, reason)

    def _told_closed(self, session: Session, reason: str) -> None:
        if self._on_closed is not None:
            self._on_closed(session_id=session.id, env=session.spec.name, reason=reason)
