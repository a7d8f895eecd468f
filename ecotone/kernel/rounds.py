"""Rounds: the engine's part for simultaneous moves (`ecotone.SimultaneousEnvironment`).

A simultaneous env's seats move at once: each `play` of a round is kept (a `Move`) until
every live seat has moved, or until the env's `move_deadline` has passed since the round's
first move; then the env steps once with the moves it has (`RoundCall`), and every move of
the round is answered with its own seat's view. Rules kept here:

* **A waiting move holds nothing back.** A kept move leaves the session's queue at once, as a
  waiting `observe` does: the next request of the session (another seat's move, an
  `observe`, the owner's `state`) starts as if the move had been answered. So the session's
  answers are in arrival order except for the moves of a round, answered when it is played.
* **One move per seat and round.** A seat that moved already, or that is not live, is
  answered `not_your_turn` (details: `acting`, the seats the round still waits for); nothing
  changes.
* **The deadline** is the engine's clock's (`Engine.wake_at` is the earliest; the driver calls
  `expire` then). A round whose deadline passes while a call holds its session (the owner's
  `state`, say) is played as soon as the session is free, before what waits in its queue.
* **What a silent seat does is the env's rule**: its seat is missing from the `actions` its
  `step` receives.
* **Refused or failed rounds.** An env that raises `InvalidAction` refuses the round: every
  move of it is answered `invalid_action` and the round starts over; any other exception is
  an `env_error` to every move. A round past the call's deadline is `timeout` to every move
  (the env is set aside, as for any call).
* **Rounds never played**: a reset, or the episode's end for a seat lost, answers the moves
  kept `episode_done`; the session's close answers them `unknown_session`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, RoundCall
from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.core import EngineCore
from ecotone.kernel.seats import Move, SeatTable
from ecotone.kernel.sessions import Session
from ecotone.kernel.states import Event, Phase, advance, ends_episode
from ecotone.specs import Error, Play, SeatView

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer


class Rounds(EngineCore):
    """The engine's part for simultaneous rounds (see the module's rules)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._finishers[RoundCall] = self._round_played
        self._deadlines: dict[Session, float] = {}
        """Sessions whose round waits for a deadline -> when (the engine's clock)."""
        self.wake_at: float | None = None
        """The earliest round deadline (the engine's clock), or None: none waits."""
        self.wake_changed = False
        """`wake_at` moved earlier since the driver last looked (the driver clears it)."""

    # --- a move -------------------------------------------------------------------------------

    def waiting_for(self, session: Session) -> list[str]:
        """The seats whose move the session's episode waits for now."""
        seating: SeatTable | None = session.seating
        acting = session.env.acting
        if seating is None or not seating.moved:
            return list(acting)
        return [seat for seat in acting if seat not in seating.moved]

    def round_move(
        self, session: Session, peer: Peer, req: Play, seat: str, action: Any, jobs: list[Call]
    ) -> Any:
        """`seat`'s move in its session's round (the seat checked, the action decoded): kept
        until the round is played (None), or the round itself when it was the last move (a
        call, or None when it was answered at once)."""
        seating: SeatTable = session.seating
        seating.moved[seat] = Move(peer, req.id, action)
        if all(s in seating.moved for s in session.env.acting):
            return self._play_round(session, jobs)
        seconds = session.spec.move_deadline
        if seating.deadline is None and seconds is not None:
            when = seating.deadline = self.clock() + seconds
            self._deadlines[session] = when
            if self.wake_at is None or when < self.wake_at:
                self.wake_at = when
                self.wake_changed = True
        return None

    def _play_round(self, session: Session, jobs: list[Call]) -> Any:
        """Step the env once with the round's moves: a call for the driver, or None (made
        inline, and answered)."""
        seating: SeatTable = session.seating
        moves, seating.moved = seating.moved, {}
        self._forget_deadline(session, seating)
        spec = session.spec
        call = RoundCall(spec.mode, session, moves)
        return self._make(call, jobs, self._limit(spec))

    def _round_played(self, call: RoundCall, jobs: list[Call]) -> None:
        """Answer every move of a round with its seat's view (or the round's failure)."""
        session = call.session
        sid, name = session.id, session.spec.name
        exc = call.error
        if exc is not None:
            for move in call.moves.values():
                if isinstance(exc, InvalidAction):
                    move.peer.emit(answers.rejected(exc, name, move.rid, sid))
                else:
                    move.peer.emit(answers.env_error(exc, move.rid, sid, "play"))
            return None
        env = session.env
        self.steps_total += 1
        session.observation = env.public
        if ends_episode(env.public):
            advance(session, Event.FINISHED)
        if self._on_step is not None:  # the round, its public view (what a recording keeps)
            self._on_step(
                session_id=sid,
                env=name,
                action=call.args[0],
                observation=env.public,
                duration_s=time.perf_counter() - call.started,
                seat=None,
            )
        self.log_seats(session, "round", None, call.args[0])
        acting = list(env.acting)
        lost = list(session.seating.lost)
        for seat, move in call.moves.items():
            peer = move.peer
            try:
                raw = peer.codec.raw(env.views[seat])
            except (TypeError, msgspec.EncodeError) as failed:
                peer.emit(answers.unencodable(name, "a view", failed, move.rid, sid))
                continue
            peer.emit(
                SeatView(
                    id=move.rid,
                    session=sid,
                    observation=raw,
                    seat=seat,
                    turn=None,
                    lost=lost,
                    acting=acting,
                )
            )
        self.seats_moved(session)
        return None

    # --- deadlines ----------------------------------------------------------------------------

    def _forget_deadline(self, session: Session, seating: SeatTable) -> None:
        seating.deadline = None
        seating.overdue = False
        if self._deadlines.pop(session, None) is not None:
            self.wake_at = min(self._deadlines.values(), default=None)

    def rounds_due(self, now: float, jobs: list[Call]) -> None:
        """Play the rounds whose deadline passed (a busy session's once it is free)."""
        if self.wake_at is None or now < self.wake_at:
            return
        for session, when in list(self._deadlines.items()):
            if when > now:
                continue
            del self._deadlines[session]
            seating: SeatTable = session.seating
            if session.closed or not seating.moved:
                continue
            if session.active is not None:
                seating.overdue = True
                continue
            self._start_round(session, jobs)
        self.wake_at = min(self._deadlines.values(), default=None)

    def round_overdue(self, session: Session, jobs: list[Call]) -> None:
        """`session` is free again: play its round if its deadline passed meanwhile."""
        seating: SeatTable | None = session.seating
        if seating is not None and seating.overdue and not session.closed:
            seating.overdue = False
            if seating.moved:
                self._start_round(session, jobs)

    def _start_round(self, session: Session, jobs: list[Call]) -> None:
        if session.phase is not Phase.RUNNING:  # nothing to play it in
            self.drop_round(session, "the episode is not running")
            return
        outcome = self._play_round(session, jobs)
        if isinstance(outcome, Call):
            session.active = outcome
            jobs.append(outcome)

    # --- rounds never played ------------------------------------------------------------------

    def drop_round(self, session: Session, why: str, closed: bool = False) -> None:
        """The moves kept for `session`'s round are answered: the round will not be played
        (`why`; `closed`: the session is gone, `unknown_session`)."""
        seating: SeatTable | None = session.seating
        if seating is None or not (seating.moved or seating.deadline is not None):
            return
        moves, seating.moved = seating.moved, {}
        self._forget_deadline(session, seating)
        for move in moves.values():
            answer: Error = (
                answers.unknown_session(session.id, move.rid)
                if closed
                else answers.round_dropped(why, move.rid, session.id)
            )
            move.peer.emit(answer)

    def round_timed_out(self, call: RoundCall, answer: Any) -> None:
        """A round outlived its call's deadline: every move of it gets `answer(rid)`."""
        for move in call.moves.values():
            move.peer.emit(answer(move.rid))
