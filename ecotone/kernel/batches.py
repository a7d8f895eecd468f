"""Batches: `step_many` and `step_columns`, many sessions stepped (or reset) in one request.

Rules:

* A batch steps each named session once. An item naming a session that an earlier item of
  the same batch named gets `invalid_argument` (`reason: duplicate_session`) and is not
  stepped; an unknown session's item gets `unknown_session`; an item with both an action and
  a reset is `invalid_argument`.
* Each item waits for its session like any request; once answered, the session stays held by
  the batch until the whole batch is answered, so no later request of any of its sessions is
  answered before the batch. All items are placed (queued, or started) when the batch
  arrives, in one step of the engine, so two batches on overlapping sessions can never wait
  for each other.
* An item may be a reset instead of a step (`StepItem.reset`): it is answered as that
  `reset` would be.
* `step_columns` is `step_many` by columns: the sessions in one array, the actions in
  another, resets by position with one set of arguments; answered with the observations in
  one array (null where a position failed), the errors and tasks by position. A malformed one
  (actions not an array as long as the sessions, a reset position repeated or out of range,
  reset options nested too deeply to be copied for each reset) is one `invalid_argument`
  error and steps nothing.
* When every item can be answered at once (its session idle, inline, not shared, and no
  per-step hook), the batch is answered in one pass and one encode (`stepping.py`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, final

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, Mode
from ecotone.kernel.core import log
from ecotone.kernel.sessions import Session
from ecotone.kernel.stepping import Stepping, columns_answer
from ecotone.specs import (
    Error,
    ErrorCode,
    Reset,
    ResetArgs,
    StepColumns,
    StepItem,
    StepMany,
    StepManyResult,
)
from ecotone.specs.codec import Codec
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer


@final
class Batch:
    """A `step_many` (or `step_columns`) being answered."""

    __slots__ = ("asked", "columns", "held", "peer", "remaining", "results", "rid")

    def __init__(self, peer: Peer, req: StepMany, columns: bool) -> None:
        self.peer = peer
        self.rid: RequestId = req.id
        self.asked = req.call_timeout
        self.columns = columns
        """Answered as a `step_columns_result` (it came as `step_columns`)."""
        self.results: list[Any] = [None] * len(req.steps)
        self.remaining = 0
        self.held: list[Session] = []


@final
class Entry:
    """One item of a batch, waiting for (or running on) its session."""

    __slots__ = ("action", "batch", "index", "reset")

    def __init__(
        self, batch: Batch, index: int, action: msgspec.Raw, reset: Reset | None = None
    ) -> None:
        self.batch = batch
        self.index = index
        self.action = action
        self.reset = reset
        """The item is this reset (`StepItem.reset`), not a step."""


class Batches(Stepping):
    """`step_many` and `step_columns`, on the general path and the fast one."""

    def _submit_columns(self, peer: Peer, req: StepColumns) -> list[Call]:
        """`step_columns`: when no position resets and every session is of one env, its
        actions decode in one pass straight into the env's action type and the batch is
        answered as `_step_batch` does; otherwise it runs as the `step_many` of its items."""
        ids = req.sessions
        if not peer.frames and self._on_step is None and not (req.resets and self.draining):
            sessions = self.sessions.idle_own(ids, peer.owner)
            if sessions and sessions[0].spec.mode is Mode.INLINE:  # else: decoded per item
                data = self._columns_inline(peer, req, sessions)
                if data is not None:
                    peer.emit(data)
                    return []
        items = _column_items(peer.codec, req)
        if type(items) is Error:
            peer.emit(items)
            return []
        many = StepMany(id=req.id, steps=items, call_timeout=req.call_timeout)  # type: ignore[arg-type]
        return self._submit_batch(peer, many, columns=True)

    def _columns_inline(
        self, peer: Peer, req: StepColumns, sessions: list[Session]
    ) -> bytes | None:
        """The answer of a `step_columns` whose sessions are idle, the caller's own and of one
        inline env, its actions decoded in one pass (null at the resets, which are answered
        inline too, each with its own copy of the options); or None, having done nothing,
        for anything the per-item path must judge (a malformed `resets`, an action that does
        not decode, a session whose env was set aside)."""
        ids, positions = req.sessions, req.resets
        spec = sessions[0].spec
        if not positions:
            actions = self._decode_columns(peer, spec, req.actions)
            if actions is None or len(actions) != len(ids):
                return None
            return self._step_columns(peer, ids, sessions, actions, req.id)
        n = len(ids)
        if len(set(positions)) != len(positions) or not all(0 <= j < n for j in positions):
            return None
        if any(sessions[j].env is None for j in positions):
            return None  # a fresh instance first: the general path makes it
        actions = self._decode_columns(peer, spec, req.actions, optional=True)
        if actions is None or len(actions) != n:
            return None
        if actions.count(None) != len(positions) or any(actions[j] is not None for j in positions):
            return None  # a null action where a step is: the per-item path says so
        args = req.reset if req.reset is not None else ResetArgs()
        try:
            resets = {
                j: Reset(
                    id=req.id,
                    session=ids[j],
                    seed=args.seed,
                    episode_id=args.episode_id,
                    options=copy.deepcopy(args.options) if args.options else {},
                    call_timeout=req.call_timeout,
                )
                for j in positions
            }
        except RecursionError:  # options too deep to copy: the per-item path says so
            return None
        return self._step_columns(peer, ids, sessions, actions, req.id, resets)

    def _submit_batch(self, peer: Peer, req: StepMany, columns: bool = False) -> list[Call]:
        """`step_many` (or the items of a `step_columns`, answered by columns)."""
        items = req.steps
        rid = req.id
        sessions = self.sessions.get_many([item.session for item in items], peer.owner)
        resets = _resets(req) if [item.reset for item in items].count(None) < len(items) else None
        if resets is not None and self.draining:  # a reset item starts an episode: refused
            resets = [
                self.refuse_new(Reset, rid, item.session) if type(reset) is Reset else reset
                for item, reset in zip(items, resets, strict=True)
            ]
        if not peer.frames and self._on_step is None:
            data = self._step_batch(peer, req, sessions, resets, columns)
            if data is not None:
                peer.emit(data)
                return []
        batch = Batch(peer, req, columns)
        first: dict[str, int] = {}
        starts: list[tuple[Session, Entry]] = []
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
            starts.append((session, Entry(batch, index, item.action, reset)))  # type: ignore[arg-type]
        jobs: list[Call] = []
        batch.remaining = len(starts)
        if not starts:
            self._answer_batch(batch, jobs)
        # Every item is placed (queued or started) before any can finish the batch.
        for session, entry in starts:
            if session.busy:
                session.enqueue(entry)
            else:
                self._start_entry(session, entry, jobs)
        self._drain(jobs)
        return jobs

    def _start_entry(self, session: Session, entry: Entry, jobs: list[Call]) -> None:
        """Run a batch's item on its idle session."""
        batch = entry.batch
        reset = entry.reset
        try:
            if reset is not None:
                outcome = self._outcome(session, batch.peer, reset, jobs)
            else:
                outcome = self._begin_step(
                    session, batch.peer, entry.action, batch.rid, batch.asked
                )
        except Exception as exc:  # an engine bug: this item fails, the batch is answered
            log.exception("internal error starting a step_many item")
            outcome = answers.internal(exc, batch.rid, session.id)
        if outcome is None:  # a fresh env was made inline; the reset it led to runs on
            active = session.active
            assert isinstance(active, Call), active
            active.entry = entry  # that call answers the item
        elif isinstance(outcome, Call):
            outcome.entry = entry
            session.active = outcome
            jobs.append(outcome)
        else:
            self._entry_answered(session, entry, outcome, jobs)

    def _entry_answered(
        self, session: Session | None, entry: Entry, outcome: Any, jobs: list[Call]
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

    def _answer_batch(self, batch: Batch, jobs: list[Call]) -> None:
        """The whole batch is answered: its answer goes out, and its sessions are free."""
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
    try:
        return [
            # each reset its own options, as step_many's items decode theirs (an env may change
            # them)
            StepItem(
                session=session,
                reset=msgspec.structs.replace(args, options=copy.deepcopy(args.options)),
            )
            if j in resets
            else StepItem(session=session, action=action)
            for j, (session, action) in enumerate(zip(ids, actions, strict=True))
        ]
    except RecursionError:  # copy.deepcopy recurses in Python, where the decoder does not
        return bad("`reset.options` nest too deeply to be copied for each reset")
