# unasync: the source of ecotone/client/_sync/seats.py
"""Seats of a multi-agent session: the client's side, written once.

The source is ecotone/client/_async/seats.py; scripts/unasync.py generates the blocking face,
ecotone/client/_sync/seats.py, from it. `SeatMoves` is a part of the session client (the
owner's, which may play and read every seat) and of `AsyncSeat` (a seat joined with its key,
or a spectator's): it reads `connection`, `session_id` and `types`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ecotone.client._core import EnvTypes
from ecotone.client.results import SeatKeys, SeatResult
from ecotone.specs import Observe, Play, Seats, SeatView
from ecotone.specs import SeatKeys as SeatKeysFrame


class SeatMoves:
    """Play a seat and read views (see docs/multi-agent.md)."""

    connection: Any
    """The session's `AsyncConnection`."""
    session_id: str
    types: EnvTypes

    def _seat_result(self, answer: Any) -> SeatResult[Any]:
        core = self.connection.core
        answer = core.check(answer)
        assert isinstance(answer, SeatView), answer
        result = core.observation(answer.observation, self.types)
        return SeatResult(
            result=result,
            seat=answer.seat,
            turn=answer.turn,
            lost=answer.lost,
            acting=answer.acting,
        )

    async def play(
        self,
        action: Any,
        *,
        seat: str | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> SeatResult[Any]:
        """Make a seat's move.

        Args:
            action: A dict, or an instance of the seat's Action type.
            seat: Which seat (None: this connection's seat; the owner's: whose turn it is).
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server.

        Returns:
            The seat's view after the move, and whose turn it is now. In a simultaneous
            env's session, the answer comes once the round is played (every live seat
            moved, or the env's `move_deadline` passed): the seat's view after it.

        Raises:
            ServerError: `not_your_turn` (details: `turn`; nothing changed), `forbidden` (a
                seat this connection does not hold), `reset_required`, `episode_done`,
                `unknown_session`.
            InvalidActionError: The move failed validation, or the env refused it.
            EnvError: The env raised.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        frame = Play(
            id=core.next_id(),
            session=self.session_id,
            action=core.raw(action),
            seat=seat,
            call_timeout=call_timeout,
        )
        return self._seat_result(await self.connection.request(frame, timeout))

    async def play_round(
        self,
        actions: Mapping[str, Any],
        *,
        observe: Sequence[str] = (),
        timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> dict[str, SeatResult[Any]]:
        """Move several seats of a simultaneous env's round at once (the owner's seats, or
        those this connection holds): each move waits for the round, so they go together.

        A turn-based env's move goes this way too, with `observe`: one round trip for a move
        and the other seats' views after it.

        Args:
            actions: Seat -> its move (a dict, or an instance of the seat's Action type).
            observe: More seats whose views to read once the moves are answered (sent with
                them, answered after them).
            timeout: Seconds to wait for every answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server.

        Returns:
            Each seat's view after the round, by seat (the moved seats', then `observe`'s).

        Raises:
            ServerError: The first refusal among the moves (`not_your_turn`, `forbidden`,
                `episode_done`...), once every answer is in.
            InvalidActionError: A move failed validation, or the env refused the round.
            EnvError: The env raised.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: Not every answer came within the timeout.
        """
        core = self.connection.core
        frames: list[Any] = [
            Play(
                id=core.next_id(),
                session=self.session_id,
                action=core.raw(action),
                seat=seat,
                call_timeout=call_timeout,
            )
            for seat, action in actions.items()
        ]
        seats = [*actions, *(seat for seat in observe if seat not in actions)]
        for seat in seats[len(frames) :]:
            frames.append(Observe(id=core.next_id(), session=self.session_id, seat=seat))
        answers = await self.connection.request_all(frames, timeout)
        return {seat: self._seat_result(a) for seat, a in zip(seats, answers, strict=True)}

    async def observe(
        self, seat: str | None = None, *, wait: bool = False, timeout: float | None = None
    ) -> SeatResult[Any]:
        """Read a seat's view (this connection's own, or any for the owner), or the public one.

        Args:
            seat: Which seat (None: this connection's seat; a spectator's or the owner's:
                the public view).
            wait: Wait until it is the seat's turn or the episode is over (the public view:
                until the next move).
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The view, and whose turn it is.

        Raises:
            ServerError: `forbidden` (another seat's view), `reset_required` (no episode yet,
                without `wait`), `unknown_session` (the session closed).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        frame = Observe(id=core.next_id(), session=self.session_id, seat=seat, wait=wait)
        return self._seat_result(await self.connection.request(frame, timeout))


class SessionSeats(SeatMoves):
    """The owner's side of a multi-agent session: its keys, besides moves and views."""

    async def seat_keys(self, *, timeout: float | None = None) -> SeatKeys:
        """The session's seat keys and spectator key (the same every time).

        Args:
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            Each seat's key, and the spectator key.

        Raises:
            ServerError: `unsupported` (a single-agent env), `unknown_session`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        core = self.connection.core
        frame = Seats(id=core.next_id(), session=self.session_id)
        answer = core.check(await self.connection.request(frame, timeout))
        assert isinstance(answer, SeatKeysFrame), answer
        return SeatKeys(keys=answer.keys, spectate=answer.spectate)


class AsyncSeat(SeatMoves):
    """A seat of a multi-agent session, joined with its key (`AsyncConnection.join`), or a
    spectator's place (`seat` None).

    Args:
        connection: The connection it was joined on.
        session_id: The session's id.
        env: The env's name.
        seat: The seat (None: a spectator).
        seats: Every seat of the session.
        types: The types views are decoded into.

    Attributes:
        seat: The seat held (None: a spectator).
        seats: Every seat of the session.
    """

    def __init__(
        self,
        connection: Any,
        session_id: str,
        env: str,
        seat: str | None,
        seats: list[str],
        types: EnvTypes,
    ) -> None:
        self.connection = connection
        self.session_id = session_id
        self.env = env
        self.seat = seat
        self.seats = seats
        self.types = types

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.env} session={self.session_id} seat={self.seat}>"
