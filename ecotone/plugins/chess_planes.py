"""Chess as numbers, as PettingZoo's `chess_v6` has it: a move as an index of 8x8x73 = 4672,
the action mask of the legal ones, and a player's view as 8x8x111 planes of bools.

`chess-duel-indexed` (ecotone/plugins/chess_duel.py) plays with these, so a policy trained on
PettingZoo's chess reads the same observation and chooses from the same moves there; the
tests check both against PettingZoo's own over whole games (tests/test_chess_planes.py).

**A move** is `(file * 8 + rank) * 73 + plane`, the square it starts from and its kind, seen
from the mover's side (for black the board is turned: its rank r is 7 - r):

* planes 0-55, a queen-like move (the king's, a rook's, a bishop's, a pawn's; castling is the
  king's two squares): `(distance - 1) * 8 + direction`, the directions in the order of
  (file step, rank step) from (-1, -1) to (1, 1), (0, 0) left out; a pawn promoting to a
  queen is a queen-like move;
* planes 56-63, a knight's jump, in the order of (file step, rank step) from (-2, -1) to
  (2, 1);
* planes 64-72, an underpromotion: `64 + 3 * (file step + 1) + piece`, piece 0, 1, 2 for a
  knight, a bishop, a rook.

**The view** of a seat is `[row][column][plane]`, its own side at the bottom rows (white's
rank 1 is row 7 of white's view, black's rank 8 row 7 of black's), and its planes:

* 0-6: the castling rights (our kingside, our queenside, their kingside, their queenside:
  each plane all set or all clear), all set for black, the fifty-move counter (the
  half-moves since the last capture or pawn move, halved, n: the one square n set, a1 being
  0, b1 1, ..., a2 8), all set;
* 7-110: the positions after each of the last eight moves, the latest first, 13 planes each:
  our pawns, knights, bishops, rooks, queens, king, then theirs, then a plane all set when
  the position was seen before. A pawn that just moved two squares is shown on its own
  first rank (where a capture en passant may take it). Positions before the first move of
  the game (or of its `fen`) are all clear: as in PettingZoo, the starting position is not
  among them (the public view's FEN has it).

This module needs only python-chess's boards (it reads their bit masks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import chess

MOVE_PLANES: Final = 73
MOVES: Final = 8 * 8 * MOVE_PLANES
"""The number of move indexes: 4672."""
PLANES: Final = 111
HISTORY: Final = 8
"""The positions the view shows."""
_BLOCK: Final = 13
_AUX: Final = 7
_ALL: Final = (1 << 64) - 1

# python-chess's piece types (chess.PAWN ... chess.KING) and colours (chess.WHITE is True)
_PIECES: Final = (1, 2, 3, 4, 5, 6)
_QUEEN: Final = 5
_KNIGHT: Final = 2

_QUEEN_DIRECTIONS: Final = tuple(
    (df, dr) for df in (-1, 0, 1) for dr in (-1, 0, 1) if (df, dr) != (0, 0)
)
_KNIGHT_JUMPS: Final = tuple(
    (df, dr) for df in (-2, -1, 1, 2) for dr in (-2, -1, 1, 2) if abs(df) != abs(dr)
)

# the rook squares of python-chess's `castling_rights` mask: h1, a1, h8, a8
_H1, _A1, _H8, _A8 = 1 << 7, 1 << 0, 1 << 63, 1 << 56


def _sign(n: int) -> int:
    return (n > 0) - (n < 0)


def move_index(move: chess.Move, black: bool) -> int:
    """The index of `move`, a move of black's when `black` (see the module)."""
    source, target = move.from_square, move.to_square
    if black:  # turn the board: rank r becomes 7 - r
        source, target = source ^ 56, target ^ 56
    df, dr = (target & 7) - (source & 7), (target >> 3) - (source >> 3)
    if (df, dr) in _KNIGHT_JUMPS:
        plane = 56 + _KNIGHT_JUMPS.index((df, dr))
    elif move.promotion is not None and move.promotion != _QUEEN:
        plane = 64 + 3 * (df + 1) + (move.promotion - _KNIGHT)
    else:
        distance = max(abs(df), abs(dr))
        plane = (distance - 1) * 8 + _QUEEN_DIRECTIONS.index((_sign(df), _sign(dr)))
    return ((source & 7) * 8 + (source >> 3)) * MOVE_PLANES + plane


def legal_indexes(board: chess.Board) -> dict[int, chess.Move]:
    """The legal moves of the side to move, by index."""
    black = not board.turn
    return {move_index(move, black): move for move in board.legal_moves}


def action_mask(legal: dict[int, chess.Move] | None) -> list[int]:
    """The action mask: 1 at each legal index, 0 elsewhere (all 0 for None: not the seat's
    turn)."""
    mask = [0] * MOVES
    for index in legal or ():
        mask[index] = 1
    return mask


def _position(board: chess.Board) -> list[int]:
    """A position's 13 planes as bit masks (bit = square), white's pieces first."""
    planes = [board.pieces_mask(piece, True) for piece in _PIECES]
    planes += [board.pieces_mask(piece, False) for piece in _PIECES]
    planes.append(_ALL if board.is_repetition(2) else 0)
    square = board.ep_square
    if square:  # the pawn that just moved two squares, shown on its own first rank
        if square < 32:
            planes[0] = planes[0] & ~(1 << (square + 8)) | 1 << (square & 7)
        else:
            planes[6] = planes[6] & ~(1 << (square - 8)) | 1 << (56 + (square & 7))
    return planes


def history(board: chess.Board) -> list[int]:
    """The positions after each of the last `HISTORY` moves (the latest first), 13 bit masks
    each, white's pieces first; clear for moves the game has not had."""
    planes: list[int] = []
    back = board.copy()
    for _ in range(min(HISTORY, len(board.move_stack))):
        planes += _position(back)
        back.pop()
    return planes + [0] * (HISTORY * _BLOCK - len(planes))


def _aux(board: chess.Board, black: bool) -> list[int]:
    rights = board.castling_rights
    ours, theirs = ((_H8, _A8), (_H1, _A1)) if black else ((_H1, _A1), (_H8, _A8))
    return [
        _ALL if rights & ours[0] else 0,
        _ALL if rights & ours[1] else 0,
        _ALL if rights & theirs[0] else 0,
        _ALL if rights & theirs[1] else 0,
        _ALL if black else 0,
        1 << min(board.halfmove_clock // 2, 63),
        _ALL,
    ]


def planes(
    board: chess.Board, black: bool, past: list[int] | None = None
) -> list[list[list[bool]]]:
    """The view of white (or of black, `black`) of `board`: 8 rows of 8 columns of `PLANES`
    bools (see the module). `past` is `history(board)`, when the caller has it."""
    masks = _aux(board, black) + (history(board) if past is None else past)
    if black:  # our pieces first in each position
        for start in range(_AUX, PLANES, _BLOCK):
            ours, theirs = masks[start : start + 6], masks[start + 6 : start + 12]
            masks[start : start + 12] = theirs + ours
    ranks = range(8) if black else range(7, -1, -1)
    return [
        [[bool(mask >> (rank * 8 + file) & 1) for mask in masks] for file in range(8)]
        for rank in ranks
    ]


__all__ = [
    "HISTORY",
    "MOVES",
    "PLANES",
    "action_mask",
    "history",
    "legal_indexes",
    "move_index",
    "planes",
]
