"""Seats: the engine's part for multi-agent sessions (`seats`, `join`, `play`, `observe`).

A multi-agent env (`ecotone.MultiAgentEnvironment`) is one session, opened, reset and closed
by its owner like any other; its seats are played by whoever holds their keys. Rules kept here:

* **Keys.** The owner asks for them (`seats`): a key per seat and a spectator key, made once,
  valid while the session is open. `join` with a seat's key makes the connection that seat's
  holder; a seat held by another live connection is `seat_taken`, a key no open session gave
  out `unknown_seat_key`. A spectator key may be used by any number of connections.
* **Who may do what.** The owner may play any seat no other connection holds (a `play` naming
  no seat plays whose turn it is), read any seat's view and the public view, and everything
  else it may do in a session (`state` included). A seat's holder may only play its own seats
  and read their views (`forbidden` otherwise); a spectator reads the public view only.
  Anything else they send about the session is `unknown_session`, as for a stranger.
* **Turns.** A `play` of a seat whose turn it is not is `not_your_turn`, its details naming
  whose turn it is; the env is not called and nothing changes. A `play` is ordered with the
  session's other requests and counts as a step. A simultaneous env's moves wait for their
  round instead (`rounds.py`), outside the session's queue.
* **Views.** Each answer carries one view: a seat's only to its holder (or the owner), the
  public view to anyone admitted. A waiting `observe` (`wait`) leaves the session's queue: it
  is answered when its seat's turn comes or the episode ends (the public view: at the next
  move), and holds no other request back.
* **A seat taken with `join` is leased** (`leases.py`): its holder's requests about the
  session, the answer to its waiting `observe` and a `keepalive` renew it. A seat whose
  connection drops is held: the same key takes it back. Once its lease ran out (its holder
  gone, frozen or cut off) the seat is released, and the env's rule (`seat_lost`) applies:
  `wait` (the episode goes on waiting for the key) or `truncate` (a running episode ends,
  SEAT_LOST, and every view answered says which seats were lost). No other session is
  touched.
* **Saved and forked** like any session, when the env can be saved (`snapshot`/`restore` or
  `load_state`): a restore keeps the session's seats, keys and holders, answers a round's
  kept moves `episode_done` and the waiting `observe`s now due; a fork's copies are new
  sessions of the owner, with keys of their own (asked for with `seats`) and nobody seated.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, PlayCall
from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.core import EngineCore
from ecotone.kernel.seats import LOG_STARTS, Logged, SeatTable, Seen, Waiter
from ecotone.kernel.sessions import Session
from ecotone.kernel.states import Event, Phase, advance, ends_episode
from ecotone.specs import (
    Error,
    ErrorCode,
    Join,
    Joined,
    Observe,
    Play,
    Response,
    SeatKeys,
    Seats,
    SeatView,
)
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Owner, Peer


class Seating(EngineCore):
    """The engine's part for seats (see the module's rules)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._finishers[PlayCall] = self._played
        self._begin.update(
            {Seats: self._begin_seats, Play: self._begin_play, Observe: self._begin_observe}
        )
        self._seat_keys: dict[str, tuple[Session, str | None]] = {}
        """Key -> the session and the seat it gives (None: a spectator's)."""
        self._seated: dict[Any, set[Session]] = {}
        """Owner -> the sessions where it holds a seat or spectates."""
        self._holding: set[Session] = set()
        """Sessions with a seat taken with `join` (leased: `release_seats`)."""

    # --- lookups ------------------------------------------------------------------------------

    def _seating(self, session: Session, rid: RequestId | None) -> SeatTable | Error:
        """The session's seating (made on first use), or `unsupported` for a single-agent env."""
        seating = session.seating
        if seating is None:
            spec = session.spec
            if not spec.seats:
                return answers.error(
                    ErrorCode.UNSUPPORTED,
                    f"environment {spec.name!r} has no seats (it is not a multi-agent env)",
                    rid,
                    session.id,
                )
            seating = session.seating = SeatTable(spec.seats, spec.seat_lost)
            if session.env is not None and session.phase is not Phase.FRESH:
                self.log_seats(session, "start", None, {})  # running already: a fork's copy
        return seating

    def seated_session(self, session_id: str, owner: Owner) -> Session | None:
        """The open session `session_id` where `owner` holds a seat or spectates, or None."""
        for session in self._seated.get(owner, ()):
            if session.id == session_id and not session.closed:
                return session
        return None

    # --- seats, join --------------------------------------------------------------------------

    def _begin_seats(self, session: Session, peer: Peer, req: Seats, jobs: list[Call]) -> Any:
        seating = self._seating(session, req.id)
        if type(seating) is Error:
            return seating
        assert isinstance(seating, SeatTable)
        if not seating.keys:
            for seat in seating.seats:
                key = seating.keys[seat] = secrets.token_urlsafe(24)
                self._seat_keys[key] = (session, seat)
            seating.spectate = secrets.token_urlsafe(24)
            self._seat_keys[seating.spectate] = (session, None)
        return SeatKeys(
            id=req.id, session=session.id, keys=dict(seating.keys), spectate=seating.spectate
        )

    def _join(self, peer: Peer, req: Join) -> Response:
        found = self._seat_keys.get(req.key)
        if found is None or found[0].closed:
            return answers.error(
                ErrorCode.UNKNOWN_SEAT_KEY, "no open session gave out this seat key", req.id
            )
        session, seat = found
        seating: SeatTable = session.seating
        owner = peer.owner
        if seat is None:
            seating.spectators.add(owner)
        else:
            holder = seating.holders.get(seat)
            if holder is not None and not holder.closed:
                return answers.error(
                    ErrorCode.SEAT_TAKEN,
                    f"seat {seat!r} of session {session.id} is held by "
                    f"{'this' if holder is owner else 'another'} connection",
                    req.id,
                    session.id,
                    seat=seat,
                )
            seating.holders[seat] = owner
            seating.dropped.pop(seat, None)
            seating.renewed[seat] = self.clock()
            self._holding.add(session)
        self._seated.setdefault(owner, set()).add(session)
        session.last_used = self.clock()
        return Joined(
            id=req.id,
            session=session.id,
            env=session.spec.name,
            seat=seat,
            seats=list(seating.seats),
            lease=None if seat is None else self.leases.length,
        )

    # --- play ---------------------------------------------------------------------------------

    def _whose(self, session: Session, seating: SeatTable, owner: Owner, seat: str | None) -> Any:
        """The seat a `play`, an `observe` or a trajectory of `owner` is about (None: the
        public view), or the error it is: the owner names any seat; a holder its own (none:
        the one whose turn it is, else its first); a spectator none."""
        if seat is not None and seat not in seating.seats:
            return f"no seat {seat!r} (seats: {', '.join(seating.seats)})"
        if owner is session.owner:
            return seat
        held = seating.held_by(owner)
        if seat is None:
            if not held:
                return None
            due = self.waiting_for(session) if session.env is not None else []
            return next((s for s in held if s in due), held[0])
        if seat not in held:
            return PermissionError(f"seat {seat!r} is not this connection's")
        return seat

    def _refused_seat(self, why: Any, rid: RequestId | None, session: Session) -> Error:
        if isinstance(why, PermissionError):
            return answers.error(ErrorCode.FORBIDDEN, str(why), rid, session.id)
        return answers.error(ErrorCode.INVALID_ARGUMENT, str(why), rid, session.id)

    def _begin_play(self, session: Session, peer: Peer, req: Play, jobs: list[Call]) -> Any:
        seating = self._seating(session, req.id)
        if type(seating) is Error:
            return seating
        assert isinstance(seating, SeatTable)
        env = session.env
        seat = self._whose(session, seating, peer.owner, req.seat)
        if seat is None and peer.owner is session.owner:
            free = (s for s in self.waiting_for(session) if s not in seating.holders)
            seat = next(free, env.turn)
            if seat is None:
                return answers.error(
                    ErrorCode.INVALID_ARGUMENT,
                    "no seat this connection may play moves now: name the seat",
                    req.id,
                    session.id,
                    acting=self.waiting_for(session),
                )
        if seat is None:
            return answers.error(
                ErrorCode.FORBIDDEN, "a spectator holds no seat to play", req.id, session.id
            )
        if not isinstance(seat, str) or seat not in seating.seats:
            return self._refused_seat(seat, req.id, session)
        holder = seating.holders.get(seat)
        if holder is not None and holder is not peer.owner:
            return answers.error(
                ErrorCode.FORBIDDEN,
                f"seat {seat!r} is held by another connection",
                req.id,
                session.id,
            )
        if env.simultaneous:
            waiting = self.waiting_for(session)
            if seat not in waiting:
                return answers.moved_already(seat, waiting, req.id, session.id)
        elif seat != env.turn:
            return answers.error(
                ErrorCode.NOT_YOUR_TURN,
                f"it is not {seat}'s turn: it is "
                + (f"{env.turn}'s" if env.turn is not None else "nobody's"),
                req.id,
                session.id,
                seat=seat,
                turn=env.turn,
            )
        spec = session.spec
        try:
            action = peer.codec.decode_as(req.action, spec.seat_types[seat][0])
        except msgspec.DecodeError as exc:
            if not req.action:
                return answers.no_action(req.id, session.id)
            return answers.invalid_action(exc, spec.name, req.id, session.id)
        except RecursionError:
            return answers.too_deep(spec.name, req.id, session.id)
        if env.simultaneous:
            return self.round_move(session, peer, req, seat, action, jobs)
        call = PlayCall(spec.mode, session, peer, req, seat, action)
        return self._make(call, jobs, self._limit(spec, req.call_timeout))

    def _played(self, call: PlayCall, jobs: list[Call]) -> Response:
        session, peer, rid = call.session, call.peer, call.request.id
        exc = call.error
        if isinstance(exc, InvalidAction):
            return answers.rejected(exc, session.spec.name, rid, session.id)
        if exc is not None:
            return answers.env_error(exc, rid, session.id, "play")
        try:
            raw = peer.codec.raw(call.value)
        except (TypeError, msgspec.EncodeError) as failed:
            return answers.unencodable(session.spec.name, "a view", failed, rid, session.id)
        env = session.env
        self.steps_total += 1
        session.observation = env.public
        if ends_episode(env.public):
            advance(session, Event.FINISHED)
        if self._on_step is not None:  # the public view: what a recording may keep
            self._on_step(
                session_id=session.id,
                env=session.spec.name,
                action=call.args[1],
                observation=env.public,
                duration_s=time.perf_counter() - call.started,
                seat=call.seat,
            )
        self.log_seats(session, "move", call.seat, {call.seat: call.args[1]})
        self.seats_moved(session)
        return SeatView(
            id=rid,
            session=session.id,
            observation=raw,
            seat=call.seat,
            turn=env.turn,
            lost=list(session.seating.lost),
            acting=list(env.acting),
        )

    # --- observe ------------------------------------------------------------------------------

    def _begin_observe(self, session: Session, peer: Peer, req: Observe, jobs: list[Call]) -> Any:
        seating = self._seating(session, req.id)
        if type(seating) is Error:
            return seating
        assert isinstance(seating, SeatTable)
        seat = self._whose(session, seating, peer.owner, req.seat)
        if seat is not None and (not isinstance(seat, str) or seat not in seating.seats):
            return self._refused_seat(seat, req.id, session)
        waiter = Waiter(peer, req.id, seat, seating.moves)
        if not req.wait:
            if session.phase is Phase.FRESH:
                return answers.reset_required(session.id, req.id)
            return self._view(session, waiter)
        if self._due(session, waiter):
            return self._view(session, waiter)
        seating.waiters.append(waiter)
        return None

    def _due(self, session: Session, waiter: Waiter) -> bool:
        """Whether a waiting `observe` is answered now."""
        phase = session.phase
        if phase is Phase.ENDED:  # nothing comes until a reset: every view is due
            return True
        if phase is not Phase.RUNNING:
            return False
        if waiter.seat is None:
            return bool(session.seating.moves > waiter.after)
        return waiter.seat in self.waiting_for(session)

    def _view(self, session: Session, waiter: Waiter) -> Response:
        """The `seat_view` answering `waiter` (a seat's view, or the public one)."""
        env = session.env
        running = session.phase is Phase.RUNNING
        view = env.public if waiter.seat is None else env.views[waiter.seat]
        try:
            raw = waiter.peer.codec.raw(view)
        except (TypeError, msgspec.EncodeError) as exc:
            return answers.unencodable(session.spec.name, "a view", exc, waiter.rid, session.id)
        return SeatView(
            id=waiter.rid,
            session=session.id,
            observation=raw,
            seat=waiter.seat,
            turn=env.turn if running else None,
            lost=list(session.seating.lost),
            acting=self.waiting_for(session) if running else [],
        )

    def seats_moved(self, session: Session) -> None:
        """A reset or a move happened (or the episode ended for a seat lost): answer the
        waiting `observe`s now due."""
        seating: SeatTable = session.seating
        seating.moves += 1
        if not seating.waiters:
            return
        waiting: list[Waiter] = []
        for waiter in seating.waiters:
            if waiter.peer.closed:
                continue
            if self._due(session, waiter):
                waiter.peer.emit(self._view(session, waiter))
                seat = waiter.seat  # its holder is answered: its lease runs from now
                if seat is not None and seating.holders.get(seat) is waiter.peer.owner:
                    seating.renewed[seat] = self.clock()
            else:
                waiting.append(waiter)
        seating.waiters = waiting

    # --- seats lost, sessions gone ------------------------------------------------------------

    def seats_left(self, owner: Owner) -> None:
        """`owner`'s connection is gone: the seats it held are held for it (`dropped`), it no
        longer spectates, and its waiting `observe`s are dropped."""
        sessions = self._seated.pop(owner, None)
        if not sessions:
            return
        now = self.clock()
        for session in sessions:
            seating: SeatTable = session.seating
            seating.spectators.discard(owner)
            seating.waiters = [w for w in seating.waiters if w.peer.owner is not owner]
            for seat in seating.held_by(owner):
                del seating.holders[seat]
                seating.dropped[seat] = now
                self._holding.add(session)

    def release_seats(self, now: float) -> None:
        """Release the seats whose lease ran out (`leases.py`), and apply the env's rule
        (`truncate`: a running episode ends, SEAT_LOST)."""
        if self.leases.length is None or not self._holding:
            return
        for session in list(self._holding):
            if session.active is not None:  # a move in flight: next time
                continue
            seating: SeatTable = session.seating
            due = self.leases.seats_due(seating, now)
            for seat in due:
                del seating.renewed[seat]
                seating.dropped.pop(seat, None)
                holder = seating.holders.pop(seat, None)
                if holder is not None and not seating.admits(holder):  # frozen, cut off
                    self._seated.get(holder, set()).discard(session)
                self.leases.seats_reclaimed += 1
            if not seating.renewed:
                self._holding.discard(session)
            if due and seating.rule == "truncate" and session.phase is Phase.RUNNING:
                self.drop_round(session, f"the episode ended: {', '.join(due)} left")
                seating.lost.extend(due)
                advance(session, Event.SEAT_LOST)
                session.last_used = now
                self.seats_moved(session)

    def renew_seats(self, session: Session, owner: Any, now: float) -> None:
        """Renew the leases of the seats `owner` took in `session` with `join`."""
        seating: SeatTable = session.seating
        for seat in seating.held_by(owner):
            if seat in seating.renewed:
                seating.renewed[seat] = now

    def renew_seat(self, key: str, now: float) -> bool:
        """Renew the lease of the seat `key` gives, when it is held; whether it was."""
        found = self._seat_keys.get(key)
        if found is None or found[1] is None or found[0].closed:
            return False
        seating: SeatTable = found[0].seating
        if found[1] not in seating.renewed:
            return False
        seating.renewed[found[1]] = now
        return True

    def _remove(self, session: Session) -> None:
        super()._remove(session)
        seating: SeatTable | None = session.seating
        if seating is None:
            return
        for key in (*seating.keys.values(), seating.spectate):
            self._seat_keys.pop(key, None)
        self._holding.discard(session)
        for owner in (*seating.holders.values(), *seating.spectators):
            held = self._seated.get(owner)
            if held is not None:
                held.discard(session)
                if not held:
                    del self._seated[owner]
        waiters, seating.waiters = seating.waiters, []
        for waiter in waiters:
            waiter.peer.emit(answers.unknown_session(session.id, waiter.rid))
        self.drop_round(session, "the session closed", closed=True)

    def reset_seats(
        self, session: Session, why: str = "the episode was reset", kind: str = "reset"
    ) -> None:
        """A reset's (or a restore's: `why`, `kind`) answer is known: a round's kept moves
        are answered, the seats lost in the last episode are forgotten, the log starts
        again, and waiting `observe`s that are now due are answered."""
        seating = self._seating(session, None)
        assert isinstance(seating, SeatTable), seating  # a multi-agent env's session
        self.drop_round(session, why)
        seating.lost.clear()
        self.log_seats(session, kind, None, {})
        self.seats_moved(session)

    # --- trajectories ---------------------------------------------------------------------------

    def log_seats(
        self, session: Session, kind: str, mover: str | None, actions: dict[str, Any]
    ) -> None:
        """Keep an event of the episode in the session's log (`SeatTable.log`): a reset,
        restore or start begins it again; a move or round follows the last."""
        env, log = session.env, session.seating.log
        if kind in LOG_STARTS:
            log.clear()
            index = 0
        else:
            index = log[-1].index + 1 if log else 1
        log.append(Logged(kind, index, mover, actions, env.views, env.public, time.time()))

    def seat_trajectory(
        self, session_id: str, owner: Owner, seat: str | None = None
    ) -> tuple[str | None, list[Seen]] | Error:
        """The episode so far as `owner` may see it (its `observe`'s rule: a seat's holder
        its own seat, the owner `seat` or the public view, a spectator the public view):
        the seat read, and each event of the log with that seat's own move and view only.

        Args:
            session_id: The session.
            owner: Who asks.
            seat: The seat the session's owner asks for (None: a holder's own, or the
                public view).

        Returns:
            The seat (None: the public view) and its events, oldest first; or the error
            (`unknown_session`, `forbidden`, `invalid_argument`, `unsupported`).
        """
        session = self.sessions.get(session_id, owner) or self.seated_session(session_id, owner)
        if session is None:
            return self.gone(session_id, None)
        seating = self._seating(session, None)
        if type(seating) is Error:
            return seating
        assert isinstance(seating, SeatTable)
        whose = self._whose(session, seating, owner, seat)
        if whose is not None and (not isinstance(whose, str) or whose not in seating.seats):
            return self._refused_seat(whose, None, session)
        return whose, [Seen.of(logged, whose) for logged in seating.log]
