"""`chess`: play a game of chess against a built-in opponent.

Needs the optional `chess` package (`pip install 'ecotone[chess]'`). This module imports
without it, so `ecotone list` still shows the env; building the env without it fails with an
error that says what to install. Rules are in `ChessEnv`'s docstring.
"""

from __future__ import annotations

import importlib
import pickle
import random
import re
import uuid
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

import ecotone

if TYPE_CHECKING:
    import chess

INSTALL_HINT: Final = "pip install 'ecotone[chess]'"

Color = Literal["white", "black"]
Opponent = Literal["random", "greedy"]
OPPONENTS: Final[tuple[Opponent, ...]] = ("random", "greedy")
COLORS: Final[tuple[Color, ...]] = ("white", "black")
_UCI = re.compile(r"[a-h][1-8][a-h][1-8][qrbn]?")
_MATE: Final = 10_000


def chess_package() -> ModuleType:
    """The `chess` package, imported on first use (it is an optional dependency)."""
    try:
        import chess
    except ImportError as exc:
        raise ImportError(
            f"the chess environment needs the `chess` package: {INSTALL_HINT}"
        ) from exc
    return chess


class ChessAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    move: str
    """The agent's move, in UCI (`e2e4`, `e7e8q`) or SAN (`e4`, `Nf3`, `O-O`, `exd5`)."""


class ChessObservation(ecotone.Observation, kw_only=True):
    fen: str = ""
    """The position (FEN), with the agent to move unless the game is over."""
    board: str = ""
    """The board as text: white pieces in capitals, black in lower case, `.` empty squares,
    rank 8 at the top, files a-h at the bottom."""
    legal_moves: list[str] = []
    """The agent's legal moves in UCI, sorted ([] once the game is over)."""
    color: Color = "white"
    """The side the agent plays."""
    agent_move: str | None = None
    """The agent's move just played (UCI); None after reset."""
    opponent_move: str | None = None
    """The opponent's reply (UCI); None if it has not moved since (or the game ended)."""
    result: str | None = None
    """`1-0`, `0-1` or `1/2-1/2` once the game is over, else None."""
    termination: str | None = None
    """Why the game ended: checkmate, stalemate, insufficient_material, threefold_repetition,
    fifty_moves, ... (None while it goes on)."""
    check: bool = False
    """The agent's king is in check."""


class ChessState(ecotone.State, kw_only=True):
    fen: str = ""
    color: Color = "white"
    opponent: Opponent = "random"
    max_moves: int | None = None
    moves: list[str] = []
    """Every move of the game so far, both sides, in UCI."""
    result: str | None = None


def _piece_values() -> dict[int, int]:
    chess = chess_package()
    return {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9}


def _material(board: chess.Board, color: bool, values: Mapping[int, int]) -> int:
    """Material of `color` minus the other side's, in pawns."""
    total = 0
    for piece, value in values.items():
        total += value * (len(board.pieces(piece, color)) - len(board.pieces(piece, not color)))
    return total


def greedy_move(board: chess.Board, rng: random.Random) -> chess.Move:
    """A two-ply material search: the move whose worst reply leaves the most material.

    Mate in one is taken, a reply that mates is avoided, stalemate counts as even; ties are
    broken with `rng` among the tied moves in UCI order.
    """
    values = _piece_values()
    me = board.turn
    best: list[chess.Move] = []
    best_score = -2 * _MATE
    for move in sorted(board.legal_moves, key=lambda m: m.uci()):
        board.push(move)
        try:
            score = _reply_score(board, me, values)
        finally:
            board.pop()
        if score > best_score:
            best, best_score = [move], score
        elif score == best_score:
            best.append(move)
    return rng.choice(best)


def _reply_score(board: chess.Board, me: bool, values: Mapping[int, int]) -> int:
    """The score for `me` of the position after my move, assuming the opponent's best reply."""
    replies = list(board.legal_moves)
    if not replies:
        return _MATE if board.is_check() else 0
    worst = _MATE
    for reply in replies:
        board.push(reply)
        try:
            if board.is_check() and not any(board.legal_moves):
                score = -_MATE
            else:
                score = _material(board, me, values)
        finally:
            board.pop()
        worst = min(worst, score)
    return worst


def new_board(
    package: ModuleType, opponent: str, max_moves: int | None, fen: str | None
) -> chess.Board:
    """The starting board of a game (`fen`'s position, else the usual one), its reset
    options checked.

    Raises:
        ValueError: An opponent that is not one, `max_moves` below 1, or an invalid `fen`.
    """
    if opponent not in OPPONENTS:
        raise ValueError(f"opponent must be one of {', '.join(OPPONENTS)}; got {opponent!r}")
    if max_moves is not None and max_moves < 1:
        raise ValueError(f"max_moves must be >= 1, got {max_moves}")
    board: chess.Board = package.Board() if fen is None else package.Board(fen)
    if fen is not None and not board.is_valid():
        raise ValueError(f"fen {fen!r} is not a valid chess position")
    return board


def engine_move(board: chess.Board, opponent: str, rng: random.Random) -> chess.Move:
    """The built-in engine's move: `greedy_move`, or a uniformly random legal one."""
    if opponent == "greedy":
        return greedy_move(board, rng)
    return rng.choice(sorted(board.legal_moves, key=lambda m: m.uci()))


def game_result(board: chess.Board) -> tuple[str, str] | None:
    """The game's result and why it ended (the draws a player may claim claimed at once), or
    None while it goes on."""
    outcome = board.outcome(claim_draw=False)
    if outcome is not None:
        return outcome.result(), outcome.termination.name.lower()
    if board.is_repetition(3):
        return "1/2-1/2", "threefold_repetition"
    if board.is_fifty_moves():
        return "1/2-1/2", "fifty_moves"
    return None


def pack_game(board: chess.Board, rng: random.Random, state: Any, ended: Any) -> bytes:
    """A game as a snapshot holds it: the board with its move stack, the engine's random
    generator, the env's State and its result so far (`ended`), pickled (the server keeps
    it, and seals what leaves it)."""
    return pickle.dumps((board, rng.getstate(), state, *ended))


def unpack_game(data: bytes, episode_id: str | None) -> tuple[Any, random.Random, Any, Any, Any]:
    """`pack_game`'s game back, as episode `episode_id`: (board, rng, state, result,
    termination)."""
    board, rng_state, state, result, termination = pickle.loads(data)
    rng = random.Random()
    rng.setstate(rng_state)
    return board, rng, msgspec.structs.replace(state, episode_id=episode_id), result, termination


def parse_move(board: chess.Board, text: str) -> chess.Move:
    """A legal move of `board`'s side to move, from UCI (`e2e4`) or SAN (`Nf3`).

    Raises:
        ecotone.InvalidAction: Naming `move`, with the legal moves (UCI and SAN) in its
            details.
    """
    raw = text.strip()
    move = None
    try:
        move = board.parse_uci(raw) if _UCI.fullmatch(raw) else board.parse_san(raw)
    except ValueError:
        move = None
    if move is None or not board.is_legal(move):
        legal = sorted(m.uci() for m in board.legal_moves)
        raise ecotone.InvalidAction(
            f"{text!r} is not a legal move here (UCI like e2e4 or SAN like Nf3); "
            f"legal moves: {' '.join(legal)}",
            field="move",
            legal_moves=legal,
            legal_moves_san=sorted(board.san(m) for m in board.legal_moves),
        )
    return move


def render(board: chess.Board) -> str:
    """The board as text with rank and file labels, white at the bottom."""
    rows = str(board).splitlines()
    lines = [f"{8 - i} {row}" for i, row in enumerate(rows)]
    lines.append("  a b c d e f g h")
    return "\n".join(lines)


def board_svg(board: chess.Board, orientation: Color = "white") -> str:
    """The board as python-chess draws it (`chess.svg.board`): an SVG picture with the last
    move marked, the king in check in red, `orientation`'s side at the bottom. Each square is
    a `rect` whose classes name it (`square light e4`), which is what the web UI's clicks
    read."""
    svg = importlib.import_module("chess.svg")
    last = board.move_stack[-1] if board.move_stack else None
    check = board.king(board.turn) if board.is_check() else None
    return str(
        svg.board(
            board,
            lastmove=last,
            check=check,
            orientation=orientation == "white",  # chess.WHITE is True
            size=400,
        )
    )


class ChessEnv(ecotone.Environment[ChessAction, ChessObservation, ChessState]):
    """Play chess against a built-in opponent; each step is one agent move and its reply.

    Moves are UCI (`e2e4`) or SAN (`e4`). An illegal or unreadable move is an `invalid_action`
    naming `move`, with the legal moves in its details (`legal_moves`, UCI; `legal_moves_san`);
    it does not count as a step and the game goes on. After the agent's move the opponent
    replies at once. Reward: +1 when the agent wins, -1 when it loses, 0 for a draw, all at
    the end of the game (done); 0 on every other step. A position seen three times, or fifty
    moves without a capture or a pawn move, is a draw at once (claimed for the players). With
    `max_moves`, the episode is truncated after that many agent moves.

    Reset options: `opponent` ("random": a uniformly random legal move; "greedy": a two-ply
    material search, ties broken at random), `color` of the agent ("white" or "black"; as
    black, the opponent's first move is in the reset observation), `max_moves`, and `fen` (a
    starting position; the side to move there moves first; a position where the game is
    already over gives a done first observation). Random choices come from the seed.
    """

    name = "chess"
    version = "1"
    description = "Chess against a built-in random or greedy opponent; moves in UCI or SAN."
    render_kind = "svg"

    def __init__(self) -> None:
        self._chess = chess_package()
        self._board: chess.Board = self._chess.Board()
        self._rng = random.Random()
        self._state = ChessState()
        self._result: str | None = None
        self._termination: str | None = None
        self._checked_ply = -1

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        opponent: Opponent = "random",
        color: Color = "white",
        max_moves: int | None = None,
        fen: str | None = None,
    ) -> ChessObservation:
        if color not in COLORS:
            raise ValueError(f"color must be white or black; got {color!r}")
        self._board = new_board(self._chess, opponent, max_moves, fen)
        self._rng = random.Random(seed)
        self._result = self._termination = None
        self._checked_ply = -1
        self._state = ChessState(
            episode_id=episode_id or uuid.uuid4().hex,
            color=color,
            opponent=opponent,
            max_moves=max_moves,
        )
        reply = None
        if not self._over() and self._board.turn != self._agent:
            reply = self._reply()
        return self._observe(None, reply, done=self._over())

    def step(self, action: ChessAction) -> ChessObservation:
        move = parse_move(self._board, action.move)
        st = self._state
        st.step_count += 1
        self._push(move)
        reply = None if self._over() else self._reply()
        done = self._over()
        truncated = not done and st.max_moves is not None and st.step_count >= st.max_moves
        return self._observe(
            move.uci(),
            reply,
            reward=self._reward() if done else 0.0,
            done=done,
            truncated=truncated,
        )

    @property
    def _agent(self) -> bool:
        return self._state.color == "white"  # chess.WHITE is True

    def _push(self, move: chess.Move) -> None:
        self._board.push(move)
        self._state.moves.append(move.uci())

    def _reply(self) -> str:
        move = engine_move(self._board, self._state.opponent, self._rng)
        self._push(move)
        return move.uci()

    def _over(self) -> bool:
        """Whether the game has ended; records the result and why the first time it has."""
        if self._result is not None:
            return True
        board = self._board
        ply = len(board.move_stack)
        if ply == self._checked_ply:
            return False
        self._checked_ply = ply
        ended = game_result(board)
        if ended is not None:
            self._result, self._termination = ended
        return ended is not None

    def _reward(self) -> float:
        if self._result == "1/2-1/2" or self._result is None:
            return 0.0
        white_won = self._result == "1-0"
        return 1.0 if white_won == self._agent else -1.0

    def _observe(
        self,
        agent_move: str | None,
        opponent_move: str | None,
        *,
        reward: float | None = None,
        done: bool = False,
        truncated: bool = False,
    ) -> ChessObservation:
        board, st = self._board, self._state
        over = self._over()
        st.fen = board.fen()
        st.result = self._result
        return ChessObservation(
            fen=st.fen,
            board=render(board),
            legal_moves=[] if over else sorted(m.uci() for m in board.legal_moves),
            color=st.color,
            agent_move=agent_move,
            opponent_move=opponent_move,
            result=self._result,
            termination=self._termination,
            check=not over and board.is_check(),
            reward=reward,
            done=done,
            truncated=truncated,
        )

    def state(self) -> ChessState:
        return self._state

    def snapshot(self) -> bytes:
        """The game (`pack_game`): board, the opponent's random generator, result so far."""
        return pack_game(self._board, self._rng, self._state, (self._result, self._termination))

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id`."""
        game = unpack_game(data, episode_id)
        self._board, self._rng, self._state, self._result, self._termination = game
        self._checked_ply = -1

    def render(self) -> str:
        """The board as an SVG picture (`board_svg`), the agent's side at the bottom."""
        return board_svg(self._board, self._state.color)

    def sample_action(self, rng: random.Random) -> ChessAction:
        """A uniformly random legal move (UCI)."""
        return ChessAction(move=rng.choice(sorted(m.uci() for m in self._board.legal_moves)))

    def close(self) -> None:
        pass


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"chess": ChessEnv}
