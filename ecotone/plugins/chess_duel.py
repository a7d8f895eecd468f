"""`chess-duel`: chess with two seats, white and black, each played by its own agent (or one of
them by the built-in engine); and `chess-duel-indexed`, the same game with PettingZoo's
numbers for moves and views.

A multi-agent env (`ecotone.MultiAgentEnvironment`): the session's owner hands out the seat
keys, each player joins its seat from its own connection and moves when it is its turn; a
spectator key reads the public view. Needs the optional `chess` package, as `chess` does.
Rules are in `ChessDuel`'s docstring; `ChessDuelIndexed`'s says what its moves and views are
(a move index and an action mask, as PettingZoo's `chess_v6`: ecotone/plugins/chess_planes.py).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec

import ecotone
from ecotone.plugins.chess import (
    COLORS,
    ChessAction,
    Color,
    Opponent,
    board_svg,
    chess_package,
    engine_move,
    game_result,
    new_board,
    pack_game,
    parse_move,
    render,
    unpack_game,
)
from ecotone.plugins.chess_planes import (
    MOVES,
    PLANES,
    action_mask,
    legal_indexes,
    planes,
)

if TYPE_CHECKING:
    import chess


class DuelObservation(ecotone.Observation, kw_only=True):
    seat: Color | None = None
    """Whose view this is (None: the public view)."""
    fen: str = ""
    """The position (FEN)."""
    board: str = ""
    """The board as text, as `chess`'s observation has it."""
    to_move: Color | None = None
    """The side to move (None once the game is over)."""
    legal_moves: list[str] = []
    """This seat's legal moves in UCI, sorted, when it is its turn ([] otherwise)."""
    last_move: str | None = None
    """The last move played (UCI), by either side."""
    moves: int = 0
    """Plies played so far."""
    engine: Color | None = None
    """The seat the built-in engine plays, if any."""
    result: str | None = None
    """`1-0`, `0-1` or `1/2-1/2` once the game is over."""
    termination: str | None = None
    """Why the game ended: checkmate, stalemate, threefold_repetition, fifty_moves, ..."""
    check: bool = False
    """The side to move is in check."""


class DuelState(ecotone.State, kw_only=True):
    fen: str = ""
    engine: Color | None = None
    opponent: Opponent = "random"
    max_moves: int | None = None
    moves: list[str] = []
    """Every move of the game so far, in UCI."""
    result: str | None = None


Seat = Literal["white", "black"]

GYM_SPACE_KEY: Final = "x-gym-space"
"""Where a field's schema names its exact Gymnasium space (`ecotone.gym.spaces.GYM_SPACE_KEY`,
read by `ecotone.gym` and `ecotone.pettingzoo`; written out here so that this env needs no
Gymnasium)."""


class IndexedAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    action: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=MOVES - 1,
            extra_json_schema={GYM_SPACE_KEY: {"type": "Discrete", "n": MOVES, "start": 0}},
        ),
    ]
    """The move's index, 0 to 4671: `(file * 8 + rank) * 73 + plane` of the square it starts
    from, seen from the mover's side (ecotone/plugins/chess_planes.py); one of those the
    seat's `action_mask` allows."""


class PlanesView(ecotone.Observation, kw_only=True):
    """A seat's view in `chess-duel-indexed`: PettingZoo's chess observation."""

    observation: Annotated[
        list[list[list[bool]]],
        msgspec.Meta(
            extra_json_schema={
                GYM_SPACE_KEY: {
                    "type": "Box",
                    "shape": [8, 8, PLANES],
                    "dtype": "bool",
                    "low": 0,
                    "high": 1,
                }
            }
        ),
    ] = []
    """The board as 8x8x111 planes, from this seat's side (ecotone/plugins/chess_planes.py)."""
    action_mask: Annotated[
        list[int],
        msgspec.Meta(
            extra_json_schema={
                GYM_SPACE_KEY: {
                    "type": "Box",
                    "shape": [MOVES],
                    "dtype": "int8",
                    "low": 0,
                    "high": 1,
                }
            }
        ),
    ] = []
    """1 for each move index this seat may play now, 0 elsewhere (all 0 when it is not its
    turn)."""


class _Duel(ecotone.MultiAgentEnvironment[Any, DuelObservation, DuelState]):
    """The game both forms play (see `ChessDuel`): the board, the engine, the result."""

    seats = ("white", "black")
    render_kind = "svg"
    observation_type = DuelObservation
    state_type = DuelState

    def __init__(self) -> None:
        self._chess = chess_package()
        self._board: chess.Board = self._chess.Board()
        self._rng = random.Random()
        self._state = DuelState()
        self._result: str | None = None
        self._termination: str | None = None

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        engine: Color | None = None,
        opponent: Opponent = "random",
        max_moves: int | None = None,
        fen: str | None = None,
    ) -> DuelObservation:
        if engine is not None and engine not in COLORS:
            raise ValueError(f"engine must be white, black or None; got {engine!r}")
        self._board = new_board(self._chess, opponent, max_moves, fen)
        self._rng = random.Random(seed)
        self._result = self._termination = None
        self._state = DuelState(
            episode_id=episode_id or uuid.uuid4().hex,
            engine=engine,
            opponent=opponent,
            max_moves=max_moves,
        )
        self._settle()
        self._engine_moves()
        return self._public(None)

    def current_seat(self) -> str | None:
        if self._over() or self._truncated():
            return None
        return self._side()

    def _public(self, seat: str | None) -> DuelObservation:
        """The view with the board as text: `chess-duel`'s every view, and the public view
        of both forms (`seat` None)."""
        board, st = self._board, self._state
        over = self._over()
        truncated = not over and self._truncated()
        ended = over or truncated
        side = None if ended else self._side()
        mine = seat is not None and seat == side
        return DuelObservation(
            seat=seat,  # type: ignore[arg-type]
            fen=board.fen(),
            board=render(board),
            to_move=side,
            legal_moves=sorted(m.uci() for m in board.legal_moves) if mine else [],
            last_move=st.moves[-1] if st.moves else None,
            moves=len(st.moves),
            engine=st.engine,
            result=self._result,
            termination=self._termination,
            check=not ended and board.is_check(),
            reward=self._reward(seat) if over else 0.0,
            done=over,
            truncated=truncated,
        )

    def state(self) -> DuelState:
        st = self._state
        st.fen, st.result = self._board.fen(), self._result
        st.step_count = len(st.moves)
        return st

    def snapshot(self) -> bytes:
        """The game (`pack_game`): board, the engine's random generator, result so far."""
        return pack_game(self._board, self._rng, self._state, (self._result, self._termination))

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id`."""
        game = unpack_game(data, episode_id)
        self._board, self._rng, self._state, self._result, self._termination = game

    def render(self, seat: str | None) -> str:
        """The board as an SVG picture (`chess.board_svg`): a seat sees its own side at the
        bottom; the public picture has white there. Nothing in it is hidden from anyone."""
        return board_svg(self._board, "black" if seat == "black" else "white")

    def close(self) -> None:
        pass

    # --- the game ---------------------------------------------------------------------------

    def _side(self) -> Seat:
        return "white" if self._board.turn else "black"

    def _truncated(self) -> bool:
        limit = self._state.max_moves
        return limit is not None and len(self._state.moves) >= limit

    def _play(self, move: chess.Move) -> None:
        """A seat's move, then the engine's reply if it plays the other seat."""
        self._push(move)
        self._engine_moves()

    def _push(self, move: chess.Move) -> None:
        self._board.push(move)
        self._state.moves.append(move.uci())
        self._settle()

    def _engine_moves(self) -> None:
        """The engine's reply while it is its seat's turn (once: the seats alternate)."""
        st = self._state
        if st.engine is None or self.current_seat() != st.engine:
            return
        self._push(engine_move(self._board, st.opponent, self._rng))

    def _settle(self) -> None:
        """Record the result once the game is over (the claimable draws claimed at once)."""
        if self._result is None:
            self._result, self._termination = game_result(self._board) or (None, None)

    def _over(self) -> bool:
        return self._result is not None

    def _reward(self, seat: str | None) -> float:
        if seat is None or self._result in (None, "1/2-1/2"):
            return 0.0
        return 1.0 if (self._result == "1-0") == (seat == "white") else -1.0


class ChessDuel(_Duel):
    """Chess between two seats, `white` and `black`; a step is one seat's move.

    Moves are UCI (`e2e4`) or SAN (`e4`). An illegal or unreadable move is an
    `invalid_action` naming `move`, with the legal moves in its details; nothing changes.
    Reward, in each seat's view: +1 when that seat won, -1 when it lost, 0 for a draw, once
    the game is over (done for both); 0 before. Threefold repetition and the fifty-move rule
    draw at once. With `max_moves`, the game is truncated after that many plies.

    Reset options: `engine` ("white" or "black"), a seat the built-in engine plays: it
    replies at once after the other seat's move (and opens the game as white), so that
    seat's turn never comes; `opponent`, the engine's kind ("random" or "greedy", as in
    `chess`); `max_moves`; `fen`, a starting position. The engine's random choices come from
    the seed.
    """

    name = "chess-duel"
    version = "1"
    description = "Chess between two seats (or one seat against the built-in engine)."
    action_type = ChessAction

    def step(self, seat: str, action: ChessAction) -> None:
        self._play(parse_move(self._board, action.move))

    def observe(self, seat: str | None) -> DuelObservation:
        return self._public(seat)

    def sample_action(self, rng: random.Random, seat: str | None = None) -> ChessAction:
        """A uniformly random legal move (UCI) of the side to move."""
        return ChessAction(move=rng.choice(sorted(m.uci() for m in self._board.legal_moves)))


class ChessDuelIndexed(_Duel):
    """`chess-duel` with PettingZoo's numbers: a move is an index and each seat's view the
    board as planes with an action mask, as in PettingZoo's `chess_v6`.

    A move is `{"action": i}`, i from 0 to 4671 (8x8x73: the square the move starts from,
    and its direction and distance, a knight's jump or an underpromotion, seen from the
    mover's side; a pawn reaching the last rank by a queen-like move becomes a queen). A
    seat's view is `{"observation": 8x8x111 bools, "action_mask": 4672 ints}` besides its
    `reward`, `done` and `truncated`: the board from the seat's side (its pieces, the
    other's, the last eight positions, castling rights, the fifty-move counter) and a 1 for
    each move it may play now (all 0 when it is not its turn). The encoding is PettingZoo's,
    number for number (ecotone/plugins/chess_planes.py, checked against PettingZoo's own in
    tests/test_chess_planes.py), so `ecotone.pettingzoo.env(url)` has exactly `chess_v6`'s
    spaces. The public view (spectators, `reset`) is `chess-duel`'s, with the FEN.

    An index out of range is an `invalid_action` naming `action`; an index the action mask
    rules out is one too, its details holding the legal indexes (`legal`) and the same moves
    in UCI (`legal_moves`); nothing changes. The rest (rewards, the engine, reset options,
    draws) is `chess-duel`'s.
    """

    name = "chess-duel-indexed"
    version = "1"
    description = (
        "chess-duel with PettingZoo chess_v6's numbers: a move index (4672), an action mask, "
        "8x8x111 planes."
    )
    action_type = IndexedAction
    seat_observation_types = {"white": PlanesView, "black": PlanesView}

    def step(self, seat: str, action: IndexedAction) -> None:
        legal = legal_indexes(self._board)
        move = legal.get(action.action)
        if move is None:
            indexes = sorted(legal)
            raise ecotone.InvalidAction(
                f"move {action.action} is not one {seat} may play here (its action mask is 0 "
                f"there); legal: {' '.join(map(str, indexes))}",
                field="action",
                legal=indexes,
                legal_moves=[legal[i].uci() for i in indexes],
            )
        self._play(move)

    def observe(self, seat: str | None) -> Any:
        if seat is None:
            return self._public(None)
        over = self._over()
        truncated = not over and self._truncated()
        mine = not (over or truncated) and seat == self._side()
        return PlanesView(
            observation=planes(self._board, seat == "black"),
            action_mask=action_mask(legal_indexes(self._board) if mine else None),
            reward=self._reward(seat) if over else 0.0,
            done=over,
            truncated=truncated,
        )

    def sample_action(self, rng: random.Random, seat: str | None = None) -> IndexedAction:
        """A uniformly random legal move of the side to move."""
        return IndexedAction(action=rng.choice(sorted(legal_indexes(self._board))))


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"chess-duel": ChessDuel, "chess-duel-indexed": ChessDuelIndexed}
