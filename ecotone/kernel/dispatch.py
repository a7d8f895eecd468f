"""The kernel: request frames in, response frames out. No sockets, no event loop of its own.

`Kernel` holds the served env specs, the session table and the lifecycle hooks. A transport
makes one `KernelConnection` per peer connection, feeds it bytes (`receive`), hands each decoded
request to `Kernel.dispatch`, and writes back what `encode` gives it. The kernel awaits env
coroutines and offloads sync env calls through an injected `offload` function, so it runs under
trio, asyncio, or a test harness alike.

Ordering is the transport's job: it must not dispatch a session's next request before the
previous one of that session has been answered (see `transports/_router.py`).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio.to_thread
import msgspec

from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.limits import Limits
from ecotone.kernel.sessions import CapacityError, Phase, Session, SessionTable
from ecotone.kernel.validation import describe_validation_error
from ecotone.wire import (
    PROTOCOL_VERSION,
    CallTool,
    Close,
    Closed,
    Codec,
    Describe,
    Described,
    Error,
    ErrorCode,
    GetState,
    Hello,
    ListTools,
    ObservationFrame,
    Open,
    Opened,
    Ping,
    Pong,
    Render,
    Rendered,
    Request,
    Reset,
    Response,
    StateFrame,
    Step,
    StepItem,
    StepMany,
    StepManyResult,
    ToolInfo,
    ToolResult,
    Tools,
    Welcome,
)
from ecotone.wire.frames import REQUEST_OPS, Frame, RequestId

log = logging.getLogger("ecotone.kernel")

Offload = Callable[..., Awaitable[Any]]
"""`await offload(fn, *args)` runs a blocking `fn(*args)` off the event loop."""

SERVER_NAME: Final = "ecotone"
_ALWAYS_INLINE: Final = frozenset({Hello, Ping, Describe})


class _Observed(msgspec.Struct, tag_field="op", tag="observation", gc=False):
    """An `observation` frame holding the env's observation itself rather than its encoding:
    a batch of them encodes in one pass, to the bytes of `ObservationFrame`s (the same tag and
    fields in the same order; `id` is a request's, never None). Built positionally, and
    untracked by the garbage collector (it is in no reference cycle): it is made per item."""

    id: RequestId
    session: str
    observation: Any


class _StepManyAnswer(Frame, tag="step_many_result", gc=False):
    """`StepManyResult` whose items are `_Observed` or `Error` frames; the same bytes."""

    results: list[Any]


async def _anyio_offload(fn: Callable[..., Any], *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)


def _error(
    code: ErrorCode,
    text: str,
    id: RequestId | None = None,
    session: str | None = None,
    **details: Any,
) -> Error:
    return Error(id=id, code=code, message=text, session=session, details=details)


def _env_error(exc: BaseException, id: RequestId | None, session: str, what: str) -> Error:
    kind = type(exc).__qualname__
    return _error(
        ErrorCode.ENV_ERROR,
        f"environment raised {kind} in {what}: {exc}",
        id,
        session,
        type=kind,
        message=str(exc),
    )


def _rejected(exc: InvalidAction, env: str, rid: RequestId, session: str) -> Error:
    """The `invalid_action` error for an action the env refused (`ecotone.InvalidAction`)."""
    extra: dict[str, Any] = {}
    for key, value in exc.details.items():
        try:
            extra[key] = msgspec.to_builtins(value, str_keys=True)
        except (TypeError, ValueError):  # not plain data: send what it looks like
            extra[key] = repr(value)
    reason = exc.reason or "action rejected"
    field = exc.field
    details = {
        **extra,
        "path": f"$.{field}" if field else "$",
        "field": field,
        "reason": reason,
    }
    where = f" (field `{field}`)" if field else ""
    return _error(
        ErrorCode.INVALID_ACTION,
        f"invalid action for env {env!r}: {reason}{where}",
        rid,
        session,
        **details,
    )


class KernelConnection:
    """One peer connection's view of the kernel: its codec and the sessions it owns."""

    __slots__ = ("closed", "codec", "kernel", "owner")

    def __init__(self, kernel: Kernel, codec: Codec, owner: object | None = None) -> None:
        self.kernel = kernel
        self.codec = codec
        self.closed = False
        self.owner: object = self if owner is None else owner
        """Sessions belong to an owner; connections sharing one (HTTP requests with different
        codecs) see the same sessions."""

    def receive(self, data: bytes | str) -> Request | Error:
        """Decode one frame. A frame that cannot be used becomes an `Error` to send back."""
        limit = self.kernel.limits.max_frame_bytes
        if len(data) > limit:
            return self.too_large(len(data))
        if isinstance(data, str) and len(data) * 4 > limit:  # a char is up to 4 UTF-8 bytes
            size = len(data.encode("utf-8", "surrogatepass"))
            if size > limit:
                return self.too_large(size)
        if isinstance(data, str) and self.codec.binary:
            return _error(
                ErrorCode.INVALID_FRAME,
                f"this connection speaks {self.codec.name}: send binary messages, not text",
            )
        try:
            return self.codec.decode_request(data)  # type: ignore[arg-type]
        except msgspec.ValidationError as exc:
            return self._salvage(data, exc)
        except msgspec.DecodeError as exc:
            return _error(ErrorCode.INVALID_FRAME, f"frame is not valid {self.codec.name}: {exc}")

    def too_large(self, size: int) -> Error:
        limit = self.kernel.limits.max_frame_bytes
        return _error(
            ErrorCode.TOO_LARGE,
            f"frame of {size} bytes is over the limit of {limit} bytes; it was discarded",
            size=size,
            limit=limit,
        )

    def _salvage(self, data: bytes | str, exc: msgspec.ValidationError) -> Error:
        try:
            loose = self.codec.decode_lenient(data)  # type: ignore[arg-type]
        except msgspec.DecodeError:
            loose = None
        if not isinstance(loose, dict):
            return _error(ErrorCode.INVALID_FRAME, "a frame must be an object with an `op` field")
        raw_id = loose.get("id")
        rid = raw_id if isinstance(raw_id, int | str) and not isinstance(raw_id, bool) else None
        raw_session = loose.get("session")
        session = raw_session if isinstance(raw_session, str) else None
        op = loose.get("op")
        if op is None:
            return _error(ErrorCode.INVALID_FRAME, "frame has no `op` field", rid, session)
        if not isinstance(op, str) or op not in REQUEST_OPS:
            return _error(
                ErrorCode.UNKNOWN_OP,
                f"unknown op {op!r}; this server knows: {', '.join(sorted(REQUEST_OPS))}",
                rid,
                session,
                op=str(op),
            )
        details = describe_validation_error(exc)
        return _error(
            ErrorCode.INVALID_FRAME,
            f"invalid {op!r} frame: {exc}",
            rid,
            session,
            **details,
        )

    def encode(self, frame: Response) -> bytes:
        return self.codec.encode(frame)


class Kernel:
    """Serves a set of environments to any number of connections."""

    def __init__(
        self,
        envs: Mapping[str, EnvSpec] | EnvSpec,
        *,
        default_env: str | None = None,
        limits: Limits | None = None,
        hooks: Any = None,
        offload: Offload | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(envs, EnvSpec):
            envs = {envs.name: envs}
        if not envs:
            raise ValueError("a kernel needs at least one environment")
        self.envs: dict[str, EnvSpec] = dict(envs)
        self.default_env = default_env or next(iter(self.envs))
        if self.default_env not in self.envs:
            raise ValueError(f"default env {self.default_env!r} is not among the served envs")
        self.limits = limits or Limits()
        self.sessions = SessionTable(self.limits.max_sessions, self.limits.idle_timeout)
        self.offload: Offload = offload or _anyio_offload
        self.clock = clock
        self._hooks = hooks
        self._on_opened = self._hook("ecotone_session_opened")
        self._on_closed = self._hook("ecotone_session_closed")
        self._on_step = self._hook("ecotone_step_completed")
        self._on_episode = self._hook("ecotone_episode_started")
        self._handlers: dict[type, Callable[[KernelConnection, Any], Awaitable[Response]]] = {
            Step: self.step_one,
            Reset: self._reset,
            GetState: self._state,
            Open: self._open,
            Close: self._close,
            Hello: self._hello,
            Describe: self._describe,
            Ping: self._ping,
            StepMany: self._step_many,
            ListTools: self._list_tools,
            CallTool: self._call_tool,
            Render: self._render,
        }

    def _hook(self, name: str) -> Any:
        """The hook caller, or None when no plugin implements it (keeps the hot path free)."""
        if self._hooks is None:
            return None
        caller = getattr(self._hooks, name, None)
        if caller is None or not caller.get_hookimpls():
            return None
        return caller

    def connect(self, codec: Codec, owner: object | None = None) -> KernelConnection:
        """A connection's view of the kernel; `owner` shares sessions between views."""
        return KernelConnection(self, codec, owner)

    # --- routing help for transports ------------------------------------------------------

    def runs_inline(self, conn: KernelConnection, request: Request) -> bool:
        """True when dispatching `request` completes without suspending: it may be handled
        in the transport's receive loop without stalling anything else."""
        kind = type(request)
        if kind is Step:  # the hot path first
            step_session = self.sessions.get(request.session, conn.owner)  # type: ignore[union-attr]
            if step_session is None:
                return True
            step_spec = step_session.spec
            return step_session.phase is not Phase.RUNNING or (
                step_spec.inline and not step_spec.async_step
            )
        if kind in _ALWAYS_INLINE:
            return True
        session_id = getattr(request, "session", None)
        if session_id is None:
            return False
        session = self.sessions.get(session_id, conn.owner)
        if session is None:
            return True
        spec = session.spec
        if isinstance(request, Step):
            return session.phase is not Phase.RUNNING or (spec.inline and not spec.async_step)
        if isinstance(request, Reset):
            return spec.inline and not spec.async_reset
        if isinstance(request, GetState):
            return spec.inline and not spec.async_state
        if isinstance(request, Render):
            return not spec.has_render or (spec.inline and not spec.async_render)
        return False

    # --- dispatch ---------------------------------------------------------------------------

    async def dispatch(self, conn: KernelConnection, request: Request) -> Response:
        """Answer one request. Never raises for anything a peer or an env can do."""
        try:
            return await self._handlers[type(request)](conn, request)
        except Exception as exc:  # a kernel bug: report it, keep serving
            log.exception("internal error handling %s", type(request).__name__)
            return _error(
                ErrorCode.INTERNAL,
                f"internal error: {type(exc).__qualname__}: {exc}",
                request.id,
                getattr(request, "session", None),
            )

    async def _call(
        self, session: Session, is_async: bool, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        session.busy += 1
        try:
            if is_async:
                return await fn(*args, **kwargs)
            if session.spec.inline:
                return fn(*args, **kwargs)
            if kwargs:
                return await self.offload(lambda: fn(*args, **kwargs))
            return await self.offload(fn, *args)
        finally:
            session.busy -= 1
            session.last_used = self.clock()

    def _lookup(self, conn: KernelConnection, session_id: str, rid: RequestId) -> Session | Error:
        session = self.sessions.get(session_id, conn.owner)
        if session is None:
            return self._unknown_session(session_id, rid)
        return session

    def _unknown_session(self, session_id: str, rid: RequestId) -> Error:
        return _error(
            ErrorCode.UNKNOWN_SESSION,
            f"no open session {session_id!r} on this connection "
            "(never opened, already closed, or closed after being idle)",
            rid,
            session_id,
        )

    async def _hello(self, conn: KernelConnection, req: Hello) -> Response:
        if req.version != PROTOCOL_VERSION:
            return _error(
                ErrorCode.UNSUPPORTED_VERSION,
                f"protocol version {req.version} is not supported; this server speaks "
                f"{PROTOCOL_VERSION}",
                req.id,
                supported=[PROTOCOL_VERSION],
            )
        return Welcome(
            id=req.id, version=PROTOCOL_VERSION, server=SERVER_NAME, envs=list(self.envs)
        )

    async def _ping(self, conn: KernelConnection, req: Ping) -> Response:
        return Pong(id=req.id)

    def _spec(self, name: str | None, rid: RequestId) -> EnvSpec | Error:
        spec = self.envs.get(name or self.default_env)
        if spec is None:
            return _error(
                ErrorCode.UNKNOWN_ENV,
                f"this server does not serve env {name!r}; it serves: {', '.join(self.envs)}",
                rid,
                env=name,
            )
        return spec

    async def _describe(self, conn: KernelConnection, req: Describe) -> Response:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
        return Described(id=req.id, info=spec.info())

    async def _open(self, conn: KernelConnection, req: Open) -> Response:
        spec = self._spec(req.env, req.id)
        if isinstance(spec, Error):
            return spec
        try:
            self.sessions.reserve()
        except CapacityError as exc:
            return _error(ErrorCode.CAPACITY, str(exc), req.id, active=exc.active, limit=exc.limit)
        try:
            env = spec.factory() if spec.inline else await self.offload(spec.factory)
        except Exception as exc:
            self.sessions.release()
            kind = type(exc).__qualname__
            return _error(
                ErrorCode.ENV_ERROR,
                f"environment {spec.name!r} failed to start: {kind}: {exc}",
                req.id,
                type=kind,
                message=str(exc),
            )
        if conn.closed:  # the peer left while the env was being built
            self.sessions.release()
            await self._close_env(spec, env)
            return _error(ErrorCode.UNKNOWN_SESSION, "connection closed", req.id)
        session = self.sessions.add(spec, env, conn.owner, self.clock())
        if self._on_opened is not None:
            self._on_opened(session_id=session.id, env=spec.name)
        return Opened(id=req.id, session=session.id, env=spec.name)

    async def _reset(self, conn: KernelConnection, req: Reset) -> Response:
        session = self._lookup(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        spec = session.spec
        accepted = spec.reset_options
        if req.options and accepted is not None:
            unknown = sorted(set(req.options) - accepted)
            if unknown:
                known = ", ".join(sorted(accepted)) or "none"
                return _error(
                    ErrorCode.INVALID_ARGUMENT,
                    f"env {spec.name!r} does not take reset option(s) {', '.join(unknown)} "
                    f"(it takes: {known})",
                    req.id,
                    req.session,
                    unknown=unknown,
                    accepted=sorted(accepted),
                )
        session.phase = Phase.FRESH
        try:
            obs = await self._call(
                session,
                spec.async_reset,
                session.env.reset,
                seed=req.seed,
                episode_id=req.episode_id,
                **req.options,
            )
        except Exception as exc:
            return _env_error(exc, req.id, req.session, "reset")
        response = self._observation(conn, session, req.id, obs)
        if self._on_episode is not None and not isinstance(response, Error):
            self._on_episode(
                session_id=session.id,
                env=spec.name,
                episode_id=req.episode_id,
                seed=req.seed,
                observation=obs,
            )
        return response

    def _observation(
        self, conn: KernelConnection, session: Session, rid: RequestId, obs: Any
    ) -> ObservationFrame | Error:
        try:
            raw = conn.codec.raw(obs)
        except (TypeError, msgspec.EncodeError) as exc:
            return _error(
                ErrorCode.ENV_ERROR,
                f"environment {session.spec.name!r} returned an observation that cannot be "
                f"encoded: {exc}",
                rid,
                session.id,
                type=type(exc).__qualname__,
                message=str(exc),
            )
        if getattr(obs, "done", False) or getattr(obs, "truncated", False):
            session.phase = Phase.ENDED
        else:
            session.phase = Phase.RUNNING
        return ObservationFrame(id=rid, session=session.id, observation=raw)

    async def step_one(self, conn: KernelConnection, req: Step) -> ObservationFrame | Error:
        """`dispatch` for a step, typed: the item a `step_many_result` holds."""
        return await self._step_one(conn, req.session, req.action, req.id)

    async def step_item(
        self, conn: KernelConnection, session_id: str, action: msgspec.Raw, rid: RequestId
    ) -> ObservationFrame | Error:
        """One `step_many` item, without building a Step frame for it (the batch hot path)."""
        return await self._step_one(conn, session_id, action, rid)

    def step_batch(
        self, conn: KernelConnection, items: list[StepItem], rid: RequestId
    ) -> bytes | None:
        """A whole `step_many` answered synchronously, when every item can be: its session is
        unknown or not running (an error), or its env steps inline and sync; and no
        `ecotone_step_completed` hook wants per-step timings. The items must name distinct
        sessions (the router checks). Returns the encoded `step_many_result`, the same bytes
        as `step_item` per item and one encode would give; or None, having done nothing.

        The hot path of a vector env: no coroutine per item, and the observations are encoded
        with the frame around them in one pass (per item only when one cannot be encoded, so
        that it alone becomes an `env_error` as with `step_item`)."""
        if self._on_step is not None:
            return None
        sessions = self.sessions.get_many([item.session for item in items], conn.owner)
        for session in sessions:
            if session is not None and session.phase is Phase.RUNNING:
                spec = session.spec
                if not spec.inline or spec.async_step:
                    return None
        results: list[Any] = []
        append = results.append
        clock = self.clock
        decode = conn.codec.decode_as
        running, ended = Phase.RUNNING, Phase.ENDED
        for item, session in zip(items, sessions, strict=True):
            session_id = item.session
            if session is None:
                append(self._unknown_session(session_id, rid))
                continue
            if session.phase is not running:
                append(self._refuse_step(session, rid))
                continue
            spec = session.spec
            try:
                action = decode(item.action, spec.action_type)
            except msgspec.DecodeError:  # the invalid_action error, built as `step_item` does
                append(self._decode_action(conn, spec, item.action, rid, session_id))
                continue
            session.busy += 1  # as `_call` does for an inline env
            try:
                obs = session.env.step(action)
            except InvalidAction as exc:
                append(_rejected(exc, spec.name, rid, session_id))
                continue
            except Exception as exc:
                append(_env_error(exc, rid, session_id, "step"))
                continue
            finally:
                session.busy -= 1
                session.last_used = clock()
            # As `_observation` does once the observation is encoded (undone below if not).
            if getattr(obs, "done", False) or getattr(obs, "truncated", False):
                session.phase = ended
            append(_Observed(rid, session_id, obs))
        try:
            return conn.encode(_StepManyAnswer(id=rid, results=results))  # type: ignore[arg-type]
        except (TypeError, msgspec.EncodeError):
            pass
        # Some observation cannot be encoded: each on its own, as `step_item` would have, so
        # that it alone becomes an env_error and its episode goes on.
        for position, frame in enumerate(results):
            if type(frame) is _Observed:
                stepped = sessions[position]
                assert stepped is not None
                stepped.phase = running
                results[position] = self._observation(conn, stepped, rid, frame.observation)
        return conn.encode(StepManyResult(id=rid, results=results))

    def step_runs_inline(self, conn: KernelConnection, session_id: str) -> bool:
        """`runs_inline` for a step of `session_id`, without a Step frame."""
        session = self.sessions.get(session_id, conn.owner)
        if session is None:
            return True
        spec = session.spec
        return session.phase is not Phase.RUNNING or (spec.inline and not spec.async_step)

    async def _step_one(
        self, conn: KernelConnection, session_id: str, raw_action: msgspec.Raw, rid: RequestId
    ) -> ObservationFrame | Error:
        session = self._lookup(conn, session_id, rid)
        if isinstance(session, Error):
            return session
        refused = self._refuse_step(session, rid)
        if refused is not None:
            return refused
        spec = session.spec
        action = self._decode_action(conn, spec, raw_action, rid, session_id)
        if isinstance(action, Error):
            return action
        started = time.perf_counter() if self._on_step is not None else 0.0
        try:
            obs = await self._call(session, spec.async_step, session.env.step, action)
        except InvalidAction as exc:
            return _rejected(exc, spec.name, rid, session_id)
        except Exception as exc:
            return _env_error(exc, rid, session_id, "step")
        response = self._observation(conn, session, rid, obs)
        if self._on_step is not None and not isinstance(response, Error):
            self._on_step(
                session_id=session_id,
                env=spec.name,
                action=action,
                observation=obs,
                duration_s=time.perf_counter() - started,
            )
        return response

    def _refuse_step(self, session: Session, rid: RequestId) -> Error | None:
        """Why a step of `session` cannot run now (no episode running), or None."""
        phase = session.phase
        if phase is Phase.RUNNING:
            return None
        if phase is Phase.FRESH:
            return _error(
                ErrorCode.RESET_REQUIRED,
                "step before reset: call reset to start an episode",
                rid,
                session.id,
            )
        return _error(
            ErrorCode.EPISODE_DONE,
            "the episode is over (done or truncated); call reset to start the next one",
            rid,
            session.id,
        )

    def _decode_action(
        self,
        conn: KernelConnection,
        spec: EnvSpec,
        raw_action: msgspec.Raw,
        rid: RequestId,
        session_id: str,
    ) -> Any:
        """The action decoded into the env's Action type, or the `invalid_action` Error (an
        action is never an Error frame, so the caller tells them apart by type)."""
        try:
            return conn.codec.decode_as(raw_action, spec.action_type)
        except msgspec.ValidationError as exc:
            details = describe_validation_error(exc)
            return _error(
                ErrorCode.INVALID_ACTION,
                f"invalid action for env {spec.name!r}: {details['reason']} "
                f"(field `{details['field']}`)"
                if details["field"]
                else f"invalid action for env {spec.name!r}: {details['reason']}",
                rid,
                session_id,
                **details,
            )
        except msgspec.DecodeError as exc:  # pragma: no cover - the frame already parsed
            return _error(
                ErrorCode.INVALID_ACTION, f"action is not decodable: {exc}", rid, session_id
            )

    async def _step_many(self, conn: KernelConnection, req: StepMany) -> Response:
        """Sequential fallback; transports route the items through per-session lanes."""
        results = [
            await self._step_one(conn, item.session, item.action, req.id) for item in req.steps
        ]
        return StepManyResult(id=req.id, results=results)

    async def _state(self, conn: KernelConnection, req: GetState) -> Response:
        session = self._lookup(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        spec = session.spec
        try:
            if spec.state_is_method:
                state = await self._call(session, spec.async_state, session.env.state)
            elif spec.async_state:
                state = await self._call(session, False, getattr, session.env, "state")
                state = await state
            else:
                state = await self._call(session, False, getattr, session.env, "state")
            raw = conn.codec.raw(state)
        except Exception as exc:
            return _env_error(exc, req.id, req.session, "state")
        return StateFrame(id=req.id, session=session.id, state=raw)

    def _tools_session(
        self, conn: KernelConnection, session_id: str, rid: RequestId
    ) -> Session | Error:
        session = self._lookup(conn, session_id, rid)
        if isinstance(session, Error) or session.spec.has_tools:
            return session
        return _error(
            ErrorCode.UNSUPPORTED,
            f"environment {session.spec.name!r} exposes no tools",
            rid,
            session_id,
        )

    async def _list_tools(self, conn: KernelConnection, req: ListTools) -> Response:
        session = self._tools_session(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        try:
            listed = await self._call(session, session.spec.async_tools, session.env.list_tools)
            tools = [t if isinstance(t, ToolInfo) else msgspec.convert(t, ToolInfo) for t in listed]
        except Exception as exc:
            return _env_error(exc, req.id, req.session, "list_tools")
        return Tools(id=req.id, session=req.session, tools=tools)

    async def _call_tool(self, conn: KernelConnection, req: CallTool) -> Response:
        session = self._tools_session(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        spec = session.spec
        try:
            result = await self._call(
                session, spec.async_tools, session.env.call_tool, req.name, req.arguments
            )
            raw = conn.codec.raw(result)
        except LookupError as exc:
            return _error(
                ErrorCode.INVALID_ARGUMENT,
                f"env {spec.name!r} has no tool {req.name!r}: {exc}",
                req.id,
                req.session,
                tool=req.name,
            )
        except Exception as exc:
            return _env_error(exc, req.id, req.session, f"tool {req.name!r}")
        return ToolResult(id=req.id, session=req.session, result=raw)

    async def _render(self, conn: KernelConnection, req: Render) -> Response:
        session = self._lookup(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        spec = session.spec
        if not spec.has_render:
            return _error(
                ErrorCode.UNSUPPORTED,
                f"environment {spec.name!r} has no custom view (no render() method)",
                req.id,
                req.session,
            )
        try:
            view = await self._call(session, spec.async_render, session.env.render)
        except Exception as exc:
            return _env_error(exc, req.id, req.session, "render")
        if isinstance(view, bytes | bytearray | memoryview):
            kind, content = "image", base64.b64encode(bytes(view)).decode("ascii")
        elif isinstance(view, str) or view is None:
            kind, content = spec.render_kind, view or ""
        else:
            return _error(
                ErrorCode.ENV_ERROR,
                f"environment {spec.name!r}: render() returned {type(view).__qualname__}; "
                "expected str (text, markdown or HTML) or bytes (a PNG image)",
                req.id,
                req.session,
                type="TypeError",
                message=f"render() returned {type(view).__qualname__}",
            )
        return Rendered(id=req.id, session=req.session, kind=kind, content=content)

    async def _close(self, conn: KernelConnection, req: Close) -> Response:
        session = self._lookup(conn, req.session, req.id)
        if isinstance(session, Error):
            return session
        await self.close_session(session, "client")
        return Closed(id=req.id, session=req.session)

    # --- teardown ---------------------------------------------------------------------------

    async def _close_env(self, spec: EnvSpec, env: Any) -> None:
        try:
            if spec.async_close:
                await env.close()
            elif spec.inline:
                env.close()
            else:
                await self.offload(env.close)
        except Exception:
            log.exception("environment %r raised in close()", spec.name)

    async def close_session(self, session: Session, reason: str) -> None:
        """Remove a session and close its env (exactly once)."""
        if session.closed:
            return
        self.sessions.remove(session)
        await self._close_env(session.spec, session.env)
        if self._on_closed is not None:
            self._on_closed(session_id=session.id, env=session.spec.name, reason=reason)

    async def disconnect(self, conn: KernelConnection, reason: str = "disconnect") -> int:
        """The peer is gone (or the server is stopping: `reason="shutdown"`): close every
        session it owned. Returns how many."""
        conn.closed = True
        owned = self.sessions.owned_by(conn.owner)
        for session in owned:
            await self.close_session(session, reason)
        return len(owned)

    async def reap_idle(self) -> int:
        """Close sessions idle past the limit. Returns how many."""
        stale = self.sessions.expired(self.clock())
        for session in stale:  # already out of the table: close the envs
            await self._close_env(session.spec, session.env)
            if self._on_closed is not None:
                self._on_closed(session_id=session.id, env=session.spec.name, reason="idle")
            log.info("closed idle session %s (%s)", session.id, session.spec.name)
        return len(stale)

    async def shutdown(self) -> None:
        """Close every session (server stopping)."""
        for session in list(self.sessions):
            await self.close_session(session, "shutdown")
