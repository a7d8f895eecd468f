"""PettingZoo chess_v6's numbers, written anew (ecotone/plugins/chess_planes.py), checked
against PettingZoo's own chess env over seeded random games: every view of both players,
every action mask, and the move each legal index stands for; the games cover castling, en
passant and promotions of every kind."""

from __future__ import annotations

import random
from collections import Counter

import chess
import numpy as np
import pytest
from pettingzoo.classic.chess import chess as pettingzoo_chess
from pettingzoo.classic.chess import chess_utils

from ecotone.plugins.chess_planes import (
    MOVES,
    PLANES,
    action_mask,
    legal_indexes,
    move_index,
    planes,
)


def _kinds(board: chess.Board, move: chess.Move) -> list[str]:
    kinds = []
    if board.is_castling(move):
        kinds.append("castling")
    if board.is_en_passant(move):
        kinds.append("en passant")
    if move.promotion is not None:
        kinds.append("queen" if move.promotion == chess.QUEEN else "underpromotion")
    return kinds


def test_views_masks_and_moves_are_pettingzoos_number_for_number() -> None:
    seen: Counter[str] = Counter()
    for seed in range(6):
        env = pettingzoo_chess.raw_env()
        env.reset(seed=seed)
        rng = random.Random(seed)
        for _ in range(300):
            if any(env.terminations.values()):
                break
            board = env.board
            legal = legal_indexes(board)
            for i, agent in enumerate(env.possible_agents):
                theirs = env.observe(agent)
                mine = np.asarray(planes(board, black=i == 1), dtype=bool)
                assert mine.shape == (8, 8, PLANES)
                assert np.array_equal(mine, theirs["observation"]), (seed, agent, board.fen())
                turn = agent == env.agent_selection
                mask = np.asarray(action_mask(legal if turn else None), dtype=np.int8)
                assert np.array_equal(mask, theirs["action_mask"]), (seed, agent, board.fen())
            player = env.possible_agents.index(env.agent_selection)
            for index, move in legal.items():
                assert chess_utils.action_to_move(board, index, player) == move
            rare = [i for i, m in legal.items() if board.is_castling(m) or board.is_en_passant(m)]
            index = rng.choice(rare if rare and rng.random() < 0.5 else sorted(legal))
            seen.update(_kinds(board, legal[index]))
            env.step(index)
            assert env.board.peek() == legal[index]
    assert {"castling", "en passant", "queen", "underpromotion"} <= set(seen), seen


@pytest.mark.parametrize(
    ("fen", "uci", "index"),
    [
        (chess.STARTING_FEN, "e2e4", (4 * 8 + 1) * 73 + 8 + 4),  # e-file, rank 2; 2 north
        (chess.STARTING_FEN, "g1f3", (6 * 8 + 0) * 73 + 56 + 3),  # a knight's jump (-1, 2)
        # black's e7e5 is white's e2e4 seen from black's side: the same index
        (
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
            "e7e5",
            4 * 8 * 73 + 73 + 12,
        ),
        ("8/4P3/8/8/8/8/k7/4K3 w - - 0 1", "e7e8n", (4 * 8 + 6) * 73 + 64 + 3 + 0),
        ("8/4P3/8/8/8/8/k7/4K3 w - - 0 1", "e7e8q", (4 * 8 + 6) * 73 + 4),  # a queen-like move
    ],
)
def test_a_move_index_is_its_square_and_its_plane_from_the_movers_side(
    fen: str, uci: str, index: int
) -> None:
    board = chess.Board(fen)
    move = chess.Move.from_uci(uci)
    assert move_index(move, black=not board.turn) == index
    assert legal_indexes(board)[index] == move
    assert 0 <= index < MOVES
