"""What each request does with an env: the calls the engine makes and how their outcomes
become answers.

The engine (`engine.py`) decides *when* a request runs (ordering, batches, ownership); these
methods, one pair per operation, decide *what* runs: `_begin_OP` checks the request against
the session and either answers at once, or makes the env call (`_invoke`: inline, or handed to
the driver as a `Call`); `_finish_OP` turns the call's outcome into the answer frame. Steps
have their own path (`_begin_step`, `_stepped`) because they are the hot path, and
`_step_batch` answers a whole `step_many` in one pass when it can.
"""

from __future__ import annotations

import base64
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, Mode
from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.limits import Limits
from ecotone.kernel.rubrics import RubricError
from ecotone.kernel.sessions import Phase, Session
from ecotone.kernel.tasks import TASK_OPTIONS, TaskError
from ecotone.specs import (
    FEATURES,
    PROTOCOL_VERSION,
    CallTool,
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
    Render,
    Rendered,
    Reset,
    Response,
    StateFrame,
    TaskAnswer,
    TaskPage,
    ToolInfo,
    ToolResult,
    Tools,
    Welcome,
)
from ecotone.specs.frames import Frame, RequestId

if TYPE_CHECKING:
    from ecotone.kernel.engine import Peer

log = logging.getLogger("ecotone.engine")

_NO_RESETS: Final = itertools.repeat(None)
"""What `_step_batch` zips with a batch's items when none is a reset."""

SERVER_NAME: Final = "ecotone"
_TIMED_OPS: Final = frozenset({"reset", "state", "close", "list_tools", "call_tool", "render"})


class _Observed(msgspec.Struct, tag_field="op", tag="observation", gc=False):
    """An `observation` frame holding the env's observation itself rather than its encoding:
    a batch of them encodes in one pass, to the bytes of `ObservationFrame`s (the same tag and
    fields in the same order; `id` is a request's, never None). Built positionally, and
    untracked by the garbage collector (it is in no reference cycle): it is made per item."""

    session: str
    observation: Any
    id: RequestId


class _StepManyAnswer(Frame, tag="step_many_result", gc=False):
    """`StepManyResult` whose items are `_Observed` or `Error` frames; the same bytes."""

    results: list[Any]

    @classmethod
    def of(cls, rid: RequestId, results: list[Any]) -> _StepManyAnswer:
        return cls(id=rid, results=results)


class _ColumnsAnswer(Frame, tag="step_columns_result", gc=False):
    """`StepColumnsResult` whose observations are the env's own (or already encoded)."""

    observations: list[Any]
    errors: dict[int, Error] = {}
    tasks: dict[int, Any] = {}


def columns_answer(rid: RequestId, results: list[Any]) -> _ColumnsAnswer:
    """The `step_columns_result` of a batch's results (`_Observed`, `ObservationFrame` or
    `Error` frames, in request order)."""
    observations: list[Any] = []
    append = observations.append
    errors: dict[int, Error] = {}
    tasks: dict[int, Any] = {}
    for position, frame in enumerate(results):
        kind = type(frame)
        if kind is _Observed:
            append(frame.observation)
        elif kind is Error:
            append(None)
            errors[position] = frame
        else:  # an ObservationFrame: a reset, or an observation encoded on its own
            append(frame.observation)
            if frame.task is not None:
                tasks[position] = frame.task
    return _ColumnsAnswer(id=rid, observations=observations, errors=errors, tasks=tasks)


def _not_running(session: Session, rid: RequestId) -> Error:
    """Why a step of `session` cannot run now (its episode is not running)."""
    phase = session.phase
    if phase is Phase.FRESH:
        return answers.reset_required(session.id, rid)
    if phase is Phase.BROKEN:
        return answers.broken(session.id, rid)
    return answers.episode_done(session.id, rid)


def _step_failed(session: Session, exc: BaseException, rid: RequestId) -> Error:
    """A step that raised: `env_error`. A rubric's failure comes after the env's step
    happened: when that step ended the episode, so does the session's."""
    if isinstance(exc, RubricError):
        obs = exc.observation
        if getattr(obs, "done", False) or getattr(obs, "truncated", False):
            session.phase = Phase.ENDED
    return answers.env_error(exc, rid, session.id, "step")


class Operations:
    """The per-operation half of the engine (a base class of `Engine`)."""

    envs: dict[str, EnvSpec]
    default_env: str
    limits: Limits
    clock: Callable[[], float]
    _on_step: Any
    _on_episode: Any
    _on_call: Any
    steps_total: int = 0
    """Steps answered with an observation (for /metrics)."""

    def _invoke(
        self,
        mode: Mode,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        finish: Callable[[Call, list[Call]], Any],
        session: Session | None,
        peer: Peer | None,
        request: Any,
        jobs: list[Call],
        cleanup: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Call `fn` now (INLINE) and return its answer, or return the Call for the driver,
        which makes it within `timeout` seconds."""
        call = Call(
            mode,
            fn,
            args,
            kwargs,
            finish,
            session=session,
            peer=peer,
            request=request,
            cleanup=cleanup,
            started=time.perf_counter() if self._on_call is not None else 0.0,
        )
        if mode is Mode.INLINE:
            call.run()
            if call.started:
                self._timed(call)
            return finish(call, jobs)
        call.timeout = timeout
        return call

    def _timed(self, call: Call) -> None:
        """Tell `ecotone_call_completed` how long an env call (not a step) took."""
        duration = time.perf_counter() - call.started
        session: Session | None = call.session
        if session is None:  # a constructor's call, or a retired session's close
            for item in call.request if isinstance(call.request, tuple) else ():
                if isinstance(item, Session):
                    session = item
                elif isinstance(item, EnvSpec):
                    spec: EnvSpec | None = item
                    break
            else:
                spec = None if session is None else session.spec
        else:
            spec = session.spec
        if spec is None:
            return
        name = getattr(call.fn, "__name__", "")
        self._on_call(
            session_id=None if session is None else session.id,
            env=spec.name,
            op=name if name in _TIMED_OPS else "open",
            duration_s=duration,
        )

    def _limit(self, spec: EnvSpec, asked: float | None = None) -> float | None:
        """The deadline of a call of `spec`'s env: the env's own, else the server's; a request
        may ask for less, never more."""
        limit = spec.call_timeout if spec.call_timeout is not None else self.limits.call_timeout
        if asked is not None and asked > 0 and (limit is None or asked < limit):
            return asked
        return limit

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

    def _spec(self, name: str | None, rid: RequestId) -> EnvSpec | Error:
        spec = self.envs.get(name or self.default_env)
        if spec is None:
            return answers.error(
                ErrorCode.UNKNOWN_ENV,
                f"this server does not serve env {name!r}; it serves: {', '.join(self.envs)}",
                rid,
                env=name,
            )
        return spec

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

    def _begin_step(
        self,
        session: Session,
        peer: Peer,
        raw_action: msgspec.Raw,
        rid: RequestId,
        asked: float | None = None,
    ) -> Any:
        phase = session.phase
        if phase is not Phase.RUNNING:
            return _not_running(session, rid)
        spec = session.spec
        try:
            action = peer.codec.decode_as(raw_action, spec.action_type)
        except msgspec.DecodeError as exc:
            if not raw_action:
                return answers.no_action(rid, session.id)
            return answers.invalid_action(exc, spec.name, rid, session.id)
        except RecursionError:
            return answers.too_deep(spec.name, rid, session.id)
        started = time.perf_counter() if self._on_step is not None else 0.0
        mode = spec.mode
        if mode is not Mode.INLINE:
            call = Call(
                mode,
                session.env.step,
                (action,),
                None,
                self._finish_step,
                session=session,
                peer=peer,
                request=rid,
                started=started,
            )
            call.timeout = self._limit(spec, asked)
            return call
        try:
            obs = session.env.step(action)
        except InvalidAction as exc:
            return answers.rejected(exc, spec.name, rid, session.id)
        except BaseException as exc:  # env code: even SystemExit is the env's failure
            return _step_failed(session, exc, rid)
        finally:
            session.last_used = self.clock()
        return self._stepped(session, peer, rid, action, obs, started)

    def _finish_step(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        exc = call.error
        if exc is not None:
            if isinstance(exc, InvalidAction):
                return answers.rejected(exc, session.spec.name, call.request, session.id)
            return _step_failed(session, exc, call.request)
        return self._stepped(
            session, call.peer, call.request, call.args[0], call.value, call.started
        )

    def _stepped(
        self,
        session: Session,
        peer: Peer,
        rid: RequestId,
        action: Any,
        obs: Any,
        started: float,
    ) -> Response:
        try:
            raw = peer.codec.raw(obs)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.unencodable(session.spec.name, "an observation", exc, rid, session.id)
        ended = getattr(obs, "done", False) or getattr(obs, "truncated", False)
        session.phase = Phase.ENDED if ended else Phase.RUNNING
        self.steps_total += 1
        if session.guests is not None and peer.owner is not session.owner:
            session.record_guest_step(peer.codec, bytes(raw))  # for its owner: `shared_steps`
        if self._on_step is not None:
            self._on_step(
                session_id=session.id,
                env=session.spec.name,
                action=action,
                observation=obs,
                duration_s=time.perf_counter() - started,
            )
        return ObservationFrame(id=rid, session=session.id, observation=raw)

    def _batchable(
        self, sessions: list[Session | None], resets: list[Reset | Error | None] | None
    ) -> bool:
        """The sessions can be answered in one synchronous pass: each is unknown, or idle and
        either not running (an error) or stepping inline (resetting, when `resets`)."""
        running, inline = Phase.RUNNING, Mode.INLINE
        for session in sessions:
            if session is not None:
                if session.active is not None or session.queue:
                    return False
                if session.guests is not None:  # a shared session: `_stepped` records
                    return False
                if session.spec.mode is not inline and (
                    session.phase is running or resets is not None
                ):
                    return False
                if resets is not None and session.env is None:
                    return False  # set aside after a timeout: the reset makes a new instance
        return True

    def _step_columns(
        self,
        peer: Peer,
        ids: list[str],
        sessions: list[Session],
        actions: list[Any],
        rid: RequestId,
    ) -> bytes | None:
        """`_step_batch` for a `step_columns` of steps only, its sessions idle, the caller's
        own and of one inline env (`SessionTable.idle_own`), the actions already of its action type:
        the observations go straight into the answer's array, the errors by position. Returns
        the encoded `step_columns_result`, or None, having done nothing."""
        if len(set(ids)) != len(ids):
            return None
        running, ended = Phase.RUNNING, Phase.ENDED
        name = sessions[0].spec.name
        observations: list[Any] = []
        append = observations.append
        errors: dict[int, Error] = {}
        now = self.clock()
        for session, action in zip(sessions, actions, strict=True):
            session.last_used = now
            if session.phase is not running:
                errors[len(observations)] = _not_running(session, rid)
                append(None)
                continue
            try:
                obs = session.env.step(action)
            except InvalidAction as exc:
                errors[len(observations)] = answers.rejected(exc, name, rid, session.id)
                append(None)
                continue
            except BaseException as exc:
                errors[len(observations)] = _step_failed(session, exc, rid)
                append(None)
                continue
            try:  # an Observation has both flags (no getattr default to look up)
                if obs.done or obs.truncated:
                    session.phase = ended  # as `_stepped` does once encoded (undone if not)
            except AttributeError:
                if getattr(obs, "done", False) or getattr(obs, "truncated", False):
                    session.phase = ended
            append(obs)
        self.steps_total += len(observations) - len(errors)
        try:
            return peer.codec.encode(
                _ColumnsAnswer(id=rid, observations=observations, errors=errors)
            )
        except (TypeError, msgspec.EncodeError):
            pass
        results = [
            errors.get(j) or _Observed(ids[j], obs, rid) for j, obs in enumerate(observations)
        ]
        return self._encode_each(peer, sessions, results, rid, columns_answer)  # type: ignore[arg-type]

    def _encode_each(
        self,
        peer: Peer,
        sessions: list[Session | None],
        results: list[Any],
        rid: RequestId,
        shape: Callable[[RequestId, list[Any]], Any],
    ) -> bytes:
        """A batch's answer when some observation cannot be encoded: each on its own, as the
        general path would, so that it alone becomes an env_error and its episode goes on."""
        running = Phase.RUNNING
        for position, frame in enumerate(results):
            if type(frame) is _Observed:
                stepped = sessions[position]
                assert stepped is not None
                stepped.phase = running
                self.steps_total -= 1  # `_stepped` counts it again
                results[position] = self._stepped(stepped, peer, rid, None, frame.observation, 0)
        return peer.codec.encode(shape(rid, results))

    def _step_batch(
        self,
        peer: Peer,
        ids: list[str],
        sessions: list[Session | None],
        actions: list[Any],
        rid: RequestId,
        resets: list[Reset | Error | None] | None,
        columns: bool,
    ) -> bytes | None:
        """A whole `step_many` answered synchronously, when every item can be: its session is
        unknown, or idle and either not running (an error) or stepping inline and sync; the
        items name distinct sessions. `ids` are the items' sessions, `actions` their encoded
        actions. `resets` (None: no item
        is one) has each reset item's `Reset` frame (or the error it is) at its place; resets
        of inline sessions are answered here too. Returns the encoded `step_many_result` (a
        `step_columns_result` when `columns`), the same bytes the general path and one encode
        would give; or None, having done nothing.

        The hot path of a vector env: no per-item call objects, and the observations are
        encoded with the frame around them in one pass (per item only when one cannot be
        encoded, so that it alone becomes an `env_error`)."""
        if not self._batchable(sessions, resets) or len(set(ids)) != len(ids):
            return None
        running, ended = Phase.RUNNING, Phase.ENDED
        results: list[Any] = []
        append = results.append
        stepped_here = 0
        clock = self.clock
        decode = peer.codec.decode_as
        no_jobs: list[Call] = []
        for session_id, session, action, reset in zip(
            ids, sessions, actions, resets or _NO_RESETS, strict=False
        ):
            if session is None:
                append(answers.unknown_session(session_id, rid))
                continue
            if reset is not None:  # inline (checked above): answered now, no job left
                if type(reset) is Error:
                    append(reset)
                    continue
                try:
                    append(self._begin_reset(session, peer, reset, no_jobs))  # type: ignore[arg-type]
                except Exception as exc:  # an engine bug: this item fails, the batch goes on
                    log.exception("internal error in a step_many reset item")
                    append(answers.internal(exc, rid, session_id))
                continue
            if session.phase is not running:
                append(_not_running(session, rid))
                continue
            spec = session.spec
            try:
                action = decode(action, spec.action_type)
            except msgspec.DecodeError as exc:
                if not action:
                    append(answers.no_action(rid, session_id))
                else:
                    append(answers.invalid_action(exc, spec.name, rid, session_id))
                continue
            except RecursionError:
                append(answers.too_deep(spec.name, rid, session_id))
                continue
            try:
                obs = session.env.step(action)
            except InvalidAction as exc:
                append(answers.rejected(exc, spec.name, rid, session_id))
                continue
            except BaseException as exc:
                append(_step_failed(session, exc, rid))
                continue
            # As `_stepped` does once the observation is encoded (undone below if not).
            if getattr(obs, "done", False) or getattr(obs, "truncated", False):
                session.phase = ended
            append(_Observed(session_id, obs, rid))
            stepped_here += 1
        self.steps_total += stepped_here
        now = clock()
        for session in sessions:
            if session is not None:
                session.last_used = now
        shape = columns_answer if columns else _StepManyAnswer.of
        try:
            return peer.codec.encode(shape(rid, results))
        except (TypeError, msgspec.EncodeError):
            pass
        return self._encode_each(peer, sessions, results, rid, shape)

    # --- the other session requests -------------------------------------------------------------

    def _begin_reset(self, session: Session, peer: Peer, req: Reset, jobs: list[Call]) -> Any:
        spec = session.spec
        if session.env is None:  # set aside after a timeout: a fresh instance first
            return self._invoke(
                Mode.INLINE if spec.inline else Mode.THREAD,
                spec.make,
                (),
                None,
                self._finish_replace,
                session,
                peer,
                req,
                jobs,
                timeout=self._limit(spec),
            )
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
        session.phase = Phase.FRESH
        return self._invoke(
            spec.mode,
            session.env.reset,
            (),
            kwargs,
            self._finish_reset,
            session,
            peer,
            req,
            jobs,
            timeout=self._limit(spec, req.call_timeout),
        )

    def _finish_replace(self, call: Call, jobs: list[Call]) -> Response | None:
        """A fresh env instance for a BROKEN session was made: now the reset itself."""
        session: Session = call.session
        req: Reset = call.request
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
        session.phase = Phase.FRESH
        outcome = self._begin_reset(session, call.peer, req, jobs)
        if type(outcome) is Call:
            session.active = outcome  # the session stays busy: this reset is not answered yet
            outcome.batch = call.batch  # a step_many's reset item: that call answers it
            jobs.append(outcome)
            return None
        return outcome

    def _finish_reset(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        req: Reset = call.request
        if call.error is not None:
            return answers.env_error(call.error, req.id, session.id, "reset")
        obs = call.value
        try:
            raw = call.peer.codec.raw(obs)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.unencodable(session.spec.name, "an observation", exc, req.id, session.id)
        ended = getattr(obs, "done", False) or getattr(obs, "truncated", False)
        session.phase = Phase.ENDED if ended else Phase.RUNNING
        if self._on_episode is not None:
            self._on_episode(
                session_id=session.id,
                env=session.spec.name,
                episode_id=req.episode_id,
                seed=req.seed,
                observation=obs,
            )
        return ObservationFrame(id=req.id, session=session.id, observation=raw, task=session.task)

    def _begin_state(self, session: Session, peer: Peer, req: GetState, jobs: list[Call]) -> Any:
        spec = session.spec
        return self._invoke(
            spec.mode,
            session.env.state,
            (),
            None,
            self._finish_state,
            session,
            peer,
            req,
            jobs,
            timeout=self._limit(spec, req.call_timeout),
        )

    def _finish_state(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        req: GetState = call.request
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
        return self._invoke(
            spec.mode,
            session.env.list_tools,
            (),
            None,
            self._finish_list_tools,
            session,
            peer,
            req,
            jobs,
            timeout=self._limit(spec, req.call_timeout),
        )

    def _finish_list_tools(self, call: Call, jobs: list[Call]) -> Response:
        req: ListTools = call.request
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
        return self._invoke(
            spec.mode,
            session.env.call_tool,
            (req.name, req.arguments),
            None,
            self._finish_call_tool,
            session,
            peer,
            req,
            jobs,
            timeout=self._limit(spec, req.call_timeout),
        )

    def _finish_call_tool(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        req: CallTool = call.request
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
        return self._invoke(
            spec.mode,
            session.env.render,
            (),
            None,
            self._finish_render,
            session,
            peer,
            req,
            jobs,
            timeout=self._limit(spec, req.call_timeout),
        )

    def _finish_render(self, call: Call, jobs: list[Call]) -> Response:
        session: Session = call.session
        req: Render = call.request
        if call.error is not None:
            return answers.env_error(call.error, req.id, req.session, "render")
        view = call.value
        spec = session.spec
        if isinstance(view, bytes | bytearray | memoryview):
            kind, content = "image", base64.b64encode(bytes(view)).decode("ascii")
        elif isinstance(view, str) or view is None:
            kind, content = spec.render_kind, view or ""
        else:
            return answers.error(
                ErrorCode.ENV_ERROR,
                f"environment {spec.name!r}: render() returned {type(view).__qualname__}; "
                "expected str (text, markdown or HTML) or bytes (a PNG image)",
                req.id,
                req.session,
                type="TypeError",
                message=f"render() returned {type(view).__qualname__}",
            )
        return Rendered(id=req.id, session=req.session, kind=kind, content=content)
