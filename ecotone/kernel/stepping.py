"""The one step path: what a step does with its session, whatever form carried it.

Every form of a step (a single `step`, an item of a `step_many`, a position of a
`step_columns`, inline or made by the driver) goes through the same functions:

* a phase check against the table (`states.REFUSALS`: `reset_required`, `episode_done`, or
  the env set aside), before anything is decoded;
* the action decoded into the env's type; when it does not decode, `_bad_action` says why
  (`invalid_action` naming the field, too deep, an item with no action);
* `_failed`, when the env's step raised: `invalid_action` for `ecotone.InvalidAction`,
  `env_error` for anything else (ending the episode if a rubric failed after the env's step
  ended it);
* `_settle`, once the observations are encoded for their answers: the count of steps, and
  FINISHED for each session whose observation ended its episode (a running one stays
  RUNNING).

A step whose observation cannot be encoded is answered `env_error` and moves nothing: phases
change only once the answer is sure, so nothing is ever undone.

The fast passes (`_step_batch`, `_step_columns`) answer a whole `step_many` or `step_columns`
of idle inline sessions in one pass and one encode, with the same functions; they give the
same bytes as the general path (tests/test_step_many_fast_paths.py).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, Mode, StepCall
from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.core import EngineCore, log
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.rubrics import RubricError
from ecotone.kernel.sessions import Session
from ecotone.kernel.states import Event, Phase, Refusal, advance, ends_episode, refusal
from ecotone.specs import Error, ObservationFrame, Reset, Response, Step, StepMany
from ecotone.specs.codec import Codec
from ecotone.specs.frames import Frame, RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer

_NO_RESETS: Final = itertools.repeat(None)
"""What `_step_batch` zips with a batch's items when none is a reset."""

_REFUSED: Final[dict[Refusal, Callable[[str, RequestId], Error]]] = {
    Refusal.RESET_REQUIRED: answers.reset_required,
    Refusal.EPISODE_DONE: answers.episode_done,
    Refusal.BROKEN: answers.broken,
}
"""The error frame of each refusal."""


def refused(session: Session, kind: type, rid: RequestId) -> Error | None:
    """The error a request of type `kind` gets in its session's phase, or None: it may run."""
    why = refusal(session.phase, kind)
    return None if why is None else _REFUSED[why](session.id, rid)


def _not_running(session: Session, rid: RequestId) -> Error:
    """The error a step gets when its session's episode is not running."""
    error = refused(session, Step, rid)
    assert error is not None, session.phase
    return error


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


def _bad_action(
    codec: Codec, raw: msgspec.Raw, spec: EnvSpec, rid: RequestId, session: str
) -> Error:
    """Why an action does not decode into `spec`'s action type (every form of a step decodes
    its action inline, and asks here only when it failed)."""
    try:
        codec.decode_as(raw, spec.action_type)
    except msgspec.DecodeError as exc:
        if not raw:
            return answers.no_action(rid, session)
        return answers.invalid_action(exc, spec.name, rid, session)
    except RecursionError:
        return answers.too_deep(spec.name, rid, session)
    raise AssertionError("the action decodes")  # pragma: no cover - asked after a failure


def _keep_observations(
    sessions: Sequence[Session], observations: list[Any], skip: set[int]
) -> None:
    """Keep each stepped session's observation as its own, once the answer holding it is
    encoded (as `_stepped` does: an observation that cannot be encoded is never kept); the
    positions in `skip` failed, or were resets, which kept theirs."""
    if not skip:
        for session, obs in zip(sessions, observations, strict=True):
            session.observation = obs
        return
    for j, (session, obs) in enumerate(zip(sessions, observations, strict=True)):
        if j not in skip:
            session.observation = obs


@functools.cache
def _list_of(item: type) -> Any:
    """`list[item]`, made once per type (the codec keeps a decoder per type)."""
    return list[item]  # type: ignore[valid-type]


@functools.cache
def _optional_list_of(item: type) -> Any:
    """`list[item | None]`, made once per type."""
    return list[item | None]  # type: ignore[valid-type]


class Stepping(EngineCore):
    """The one step path, and the fast passes over whole batches of steps."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._finishers[StepCall] = self._step_done

    def _settle(self, steps: int, ended: Iterable[Session] = ()) -> None:
        """The end of every step answered with an observation, whatever form carried it (a
        single step, an item of a batch, inline or made by the driver): `steps` of them, and
        `ended` the sessions whose observation ended their episode (they move to FINISHED; a
        running episode otherwise stays RUNNING). Called once the observations are encoded
        for their answers: a step whose observation cannot be encoded moved nothing."""
        for session in ended:
            advance(session, Event.FINISHED)
        self.steps_total += steps

    def _failed(self, session: Session, exc: BaseException, rid: RequestId) -> Error:
        """The error a step that raised is answered with, whatever form carried it:
        `invalid_action` for `ecotone.InvalidAction`, `env_error` for anything else. A rubric
        that failed after the env's step ended the episode ends the session's (FINISHED)."""
        if isinstance(exc, InvalidAction):
            return answers.rejected(exc, session.spec.name, rid, session.id)
        if isinstance(exc, RubricError) and ends_episode(exc.observation):
            advance(session, Event.FINISHED)  # the env's step happened, and ended the episode
        return answers.env_error(exc, rid, session.id, "step")

    def _begin_step(
        self,
        session: Session,
        peer: Peer,
        raw_action: msgspec.Raw,
        rid: RequestId,
        asked: float | None = None,
    ) -> Any:
        """A step on its idle session: its answer (made inline), or a `StepCall` for the
        driver (within the deadline the env and `asked` allow)."""
        if session.phase is not Phase.RUNNING:
            return _not_running(session, rid)
        spec = session.spec
        try:
            action = peer.codec.decode_as(raw_action, spec.action_type)
        except (msgspec.DecodeError, RecursionError):
            return _bad_action(peer.codec, raw_action, spec, rid, session.id)
        started = time.perf_counter() if self._on_step is not None else 0.0
        if spec.mode is not Mode.INLINE:
            call = StepCall(spec.mode, session, peer, action, rid)
            call.started = started
            call.timeout = self._limit(spec, asked)
            return call
        try:
            outcome = session.env.step(action)
        except BaseException as exc:  # env code: even SystemExit is the env's failure
            outcome = exc
        session.last_used = self.clock()
        return self._stepped(session, peer, rid, action, outcome, started)

    def _step_done(self, call: StepCall, jobs: list[Call]) -> Response:
        """A `StepCall` the driver made."""
        outcome = call.error if call.error is not None else call.value
        return self._stepped(call.session, call.peer, call.rid, call.args[0], outcome, call.started)

    def _stepped(
        self,
        session: Session,
        peer: Peer,
        rid: RequestId,
        action: Any,
        outcome: Any,
        started: float,
    ) -> Response:
        """The answer to one step (`action`, and the env's `outcome`: what its step returned
        or raised): the observation frame, encoded with `peer`'s codec, or the error it is."""
        if isinstance(outcome, BaseException):
            return self._failed(session, outcome, rid)
        try:
            raw = peer.codec.raw(outcome)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.unencodable(session.spec.name, "an observation", exc, rid, session.id)
        self._settle(1, (session,) if ends_episode(outcome) else ())
        session.observation = outcome
        if session.guests is not None and peer.owner is not session.owner:
            session.record_guest_step(peer.codec, bytes(raw))  # for its owner: `shared_steps`
        if self._on_step is not None:
            self._on_step(
                session_id=session.id,
                env=session.spec.name,
                action=action,
                observation=outcome,
                duration_s=time.perf_counter() - started,
                seat=None,
            )
        return ObservationFrame(id=rid, session=session.id, observation=raw)

    # --- whole batches in one pass ------------------------------------------------------------

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
        resets: dict[int, Reset] | None = None,
    ) -> bytes | None:
        """`_step_batch` for a `step_columns`, its sessions idle, the caller's own and of one
        inline env (`SessionTable.idle_own`), the actions already of its action type (None at
        the positions in `resets`, which are those `Reset` frames, answered inline): the
        observations go straight into the answer's array, the errors and a reset's task by
        position. Returns the encoded `step_columns_result`, or None, having done nothing."""
        if len(set(ids)) != len(ids):
            return None
        running = Phase.RUNNING
        observations: list[Any] = []
        append = observations.append
        errors: dict[int, Error] = {}
        tasks: dict[int, Any] = {}
        reset_frames: dict[int, Any] = {}
        ended: list[Session] = []
        now = self.clock()
        for session, action in zip(sessions, actions, strict=True):
            session.last_used = now
            if resets is not None and action is None:
                position = len(observations)
                frame = self._inline_reset(session, peer, resets[position])
                if type(frame) is Error:
                    errors[position] = frame
                    append(None)
                    continue
                reset_frames[position] = frame
                if frame.task is not None:
                    tasks[position] = frame.task
                append(frame.observation)
                continue
            if session.phase is not running:
                errors[len(observations)] = _not_running(session, rid)
                append(None)
                continue
            try:
                obs = session.env.step(action)
            except BaseException as exc:
                errors[len(observations)] = self._failed(session, exc, rid)
                append(None)
                continue
            try:  # `ends_episode`, inline: an ecotone.Observation has both flags
                if obs.done or obs.truncated:
                    ended.append(session)
            except AttributeError:
                if ends_episode(obs):
                    ended.append(session)
            append(obs)
        try:
            data = peer.codec.encode(
                _ColumnsAnswer(id=rid, observations=observations, errors=errors, tasks=tasks)
            )
        except (TypeError, msgspec.EncodeError):
            results = [
                errors.get(j) or reset_frames.get(j) or _Observed(ids[j], obs, rid)
                for j, obs in enumerate(observations)
            ]
            return self._encode_each(peer, sessions, results, rid, columns_answer)
        self._settle(len(observations) - len(errors) - len(reset_frames), ended)
        _keep_observations(sessions, observations, errors.keys() | reset_frames.keys())
        return data

    def _inline_reset(self, session: Session, peer: Peer, req: Reset) -> Any:
        """A reset of an inline session with its env, answered now: its observation frame,
        or the error it is (an engine bug fails this item only, as in `_step_batch`)."""
        try:
            return self._begin_reset(session, peer, req, [])
        except Exception as exc:
            log.exception("internal error in a step_columns reset item")
            return answers.internal(exc, req.id, session.id)

    def _encode_each(
        self,
        peer: Peer,
        sessions: Sequence[Session | None],
        results: list[Any],
        rid: RequestId,
        shape: Callable[[RequestId, list[Any]], Any],
    ) -> bytes:
        """A batch's answer when some observation cannot be encoded: each on its own, as the
        general path would, so that it alone becomes an env_error and its episode goes on."""
        for position, frame in enumerate(results):
            if type(frame) is _Observed:
                session = sessions[position]
                assert session is not None
                results[position] = self._stepped(session, peer, rid, None, frame.observation, 0)
        return peer.codec.encode(shape(rid, results))

    def _step_batch(
        self,
        peer: Peer,
        req: StepMany,
        sessions: list[Session | None],
        resets: list[Reset | Error | None] | None,
        columns: bool,
    ) -> bytes | None:
        """A whole `step_many` answered synchronously, when every item can be: its session is
        unknown, or idle and either not running (an error) or stepping inline; the items name
        distinct sessions. `resets` (None: no item is one) has each reset item's `Reset`
        frame (or the error it is) at its place; resets of inline sessions are answered here
        too. Returns the encoded `step_many_result` (a `step_columns_result` when
        `columns`), the same bytes the general path and one encode would give; or None,
        having done nothing.

        The hot path of a vector env: no per-item call objects, and the observations are
        encoded with the frame around them in one pass (per item only when one cannot be
        encoded, so that it alone becomes an `env_error`)."""
        items = req.steps
        ids = [item.session for item in items]
        if not self._batchable(sessions, resets) or len(set(ids)) != len(ids):
            return None
        rid = req.id
        running = Phase.RUNNING
        results: list[Any] = []
        append = results.append
        decode = peer.codec.decode_as
        no_jobs: list[Call] = []
        stepped = 0
        ended: list[Session] = []
        for item, session, reset in zip(items, sessions, resets or _NO_RESETS, strict=False):
            session_id = item.session
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
            raw = item.action
            try:
                action = decode(raw, spec.action_type)
            except (msgspec.DecodeError, RecursionError):
                append(_bad_action(peer.codec, raw, spec, rid, session_id))
                continue
            try:
                obs = session.env.step(action)
            except BaseException as exc:
                append(self._failed(session, exc, rid))
                continue
            try:  # `ends_episode`, inline: an ecotone.Observation has both flags
                if obs.done or obs.truncated:
                    ended.append(session)
            except AttributeError:
                if ends_episode(obs):
                    ended.append(session)
            stepped += 1
            append(_Observed(session_id, obs, rid))
        now = self.clock()
        for session in sessions:
            if session is not None:
                session.last_used = now
        shape = columns_answer if columns else _StepManyAnswer.of
        try:
            data = peer.codec.encode(shape(rid, results))
        except (TypeError, msgspec.EncodeError):
            return self._encode_each(peer, sessions, results, rid, shape)
        self._settle(stepped, ended)
        for session, frame in zip(sessions, results, strict=True):
            if type(frame) is _Observed:  # kept once answered, as `_stepped` keeps it
                session.observation = frame.observation  # type: ignore[union-attr]
        return data

    def _decode_columns(
        self, peer: Peer, spec: EnvSpec, actions: msgspec.Raw, *, optional: bool = False
    ) -> list[Any] | None:
        """A `step_columns`'s actions in one pass, straight into `spec`'s action type (or
        null, when `optional`: the resets' places); None when they do not all decode (the
        per-item path then says which is wrong)."""
        kind = _optional_list_of(spec.action_type) if optional else _list_of(spec.action_type)
        try:
            return peer.codec.decode_as(actions, kind)
        except (msgspec.DecodeError, RecursionError):
            return None
