"""Snapshots, restores and forks of multi-agent sessions: a restore keeps the seats, their
keys and their holders, and answers a round's kept moves; a fork's copies are the owner's new
sessions with keys of their own; the rest of the game replays as it first did."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import ecotone
from tests.conftest import run_server


def _fens(moves: list[str], seats: dict[str, Any]) -> list[str]:
    fens = []
    for i, move in enumerate(moves):
        seat = seats["white" if i % 2 == 0 else "black"]
        fens.append(seat.play({"move": move}).result.observation["fen"])
    return fens


@pytest.mark.parametrize("transport", ["websocket", "tcp"])
def test_a_restore_keeps_the_seats_and_their_holders(transport: str) -> None:
    with run_server("chess-duel", transport=transport) as server:
        url = server.url
        with (
            ecotone.Connection.open_url(url) as owner_link,
            ecotone.Connection.open_url(url) as white_link,
            ecotone.Connection.open_url(url) as black_link,
        ):
            owner = owner_link.open("chess-duel")
            keys = owner.seat_keys()
            owner.reset(seed=0)
            seats = {
                "white": white_link.join(keys.keys["white"]),
                "black": black_link.join(keys.keys["black"]),
            }
            _fens(["e4", "e5"], seats)
            snap = owner.snapshot()
            first = _fens(["Nf3", "Nc6", "Bb5"], seats)
            restored = owner.restore(snap)
            assert restored.step_count == 2
            assert seats["white"].observe().turn == "white"  # the holders still hold them
            assert _fens(["Nf3", "Nc6", "Bb5"], seats) == first  # the same game again
            assert owner.seat_keys().keys == keys.keys
            with pytest.raises(ecotone.ServerError) as taken:
                owner_link.join(keys.keys["white"])
            assert taken.value.code == "seat_taken"


def test_a_fork_gives_copies_with_keys_of_their_own() -> None:
    with run_server("chess-duel") as server, ecotone.Connection.open_url(server.url) as link:
        owner = link.open("chess-duel")
        keys = owner.seat_keys()
        owner.reset(seed=0)
        owner.play({"move": "d4"}, seat="white")
        copies = owner.fork(2)
        copy_keys = [copy.seat_keys().keys for copy in copies]
        assert all(k != keys.keys for k in copy_keys) and copy_keys[0] != copy_keys[1]
        with ecotone.Connection.open_url(server.url) as other:
            black = other.join(copy_keys[0]["black"])
            view = black.observe()
            assert view.turn == "black" and view.result.observation["last_move"] == "d2d4"
            assert black.play({"move": "d5"}).turn == "white"
        # the source and the other copy did not move
        assert owner.observe().turn == "black" and copies[1].observe().turn == "black"


def test_a_restore_answers_a_rounds_kept_moves_and_the_round_starts_over() -> None:
    with run_server("dilemma") as server, ecotone.Connection.open_url(server.url) as link:
        owner = link.open("dilemma")
        keys = owner.seat_keys()
        owner.reset(seed=0, rounds=3)
        owner.play_round({"player_0": {"move": "defect"}, "player_1": {"move": "cooperate"}})
        snap = owner.snapshot()
        answers: list[Any] = []
        with ecotone.Connection.open_url(server.url) as seat_link:
            seat = seat_link.join(keys.keys["player_0"])

            def kept() -> None:
                try:
                    answers.append(seat.play({"move": "defect"}))
                except ecotone.ServerError as exc:
                    answers.append(exc)

            mover = threading.Thread(target=kept)
            mover.start()
            while not owner.observe().acting == ["player_1"]:  # its move is kept for the round
                pass
            owner.restore(snap)
            mover.join(10)
            (answer,) = answers
            assert isinstance(answer, ecotone.ServerError) and answer.code == "episode_done"
            assert "restored" in answer.message
            assert owner.observe().acting == ["player_0", "player_1"]
            assert owner.observe().result.observation["scores"] == [5, 0]  # round 1 only
