"""`chess-duel`: two separate processes play whole games of chess over WebSocket and tcp, each
with a token of its own, a third connection spectating; one seat can be the built-in engine;
out-of-turn and illegal moves change nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ecotone
from ecotone.kernel.config import AuthConfig
from ecotone.plugins.chess_duel import ChessDuel, ChessDuelIndexed, IndexedAction
from tests.conftest import RunningServer, run_server

TESTS = Path(__file__).resolve().parent
INDEXED = "chess-duel-indexed"
TOKENS = {"owner": "owner-token-0123", "white": "white-token-4567", "black": "black-token-89ab"}

PLAYER = """
import sys
import ecotone

url, token, key = sys.argv[1:4]
with ecotone.Connection.open_url(url, token=token) as connection:
    seat = connection.join(key)
    plies = 0
    while True:
        view = seat.observe(wait=True, timeout=60)
        obs = view.result.observation
        if view.result.done or view.result.truncated or view.turn is None:
            break
        legal = obs["legal_moves"]
        seat.play({"move": legal[(obs["moves"] * 7 + 3) % len(legal)]})
        plies += 1
    print(seat.seat, plies, view.result.reward, obs["result"], obs["fen"])
"""


@pytest.fixture(params=["websocket", "tcp"])
def duel_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    tokens = tmp_path / "tokens"
    tokens.write_text("\n".join(TOKENS.values()) + "\n")
    auth = AuthConfig(token_file=str(tokens))
    with run_server("chess-duel", transport=request.param, auth=auth) as server:
        yield server


def test_two_processes_play_whole_games_while_a_third_connection_spectates(
    duel_server: RunningServer,
) -> None:
    url = duel_server.url
    with ecotone.Connection.open_url(url, token=TOKENS["owner"]) as connection:
        owner = connection.open("chess-duel")
        keys = owner.seat_keys()
        for seed in (1, 2):
            owner.reset(seed=seed, max_moves=120)
            players = {
                seat: subprocess.Popen(
                    [sys.executable, "-c", PLAYER, url, TOKENS[seat], keys.keys[seat]],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=TESTS.parent,
                )
                for seat in ("white", "black")
            }
            with ecotone.Connection.open_url(url, token=TOKENS["owner"]) as watching:
                spectator = watching.join(keys.spectate)
                seen = 0
                while True:
                    view = spectator.observe(wait=True, timeout=60)
                    assert view.result.observation["legal_moves"] == []  # nobody's moves
                    seen += 1
                    if view.result.done or view.result.truncated:
                        break
            outputs = {seat: p.communicate(timeout=120)[0].split() for seat, p in players.items()}
            assert [p.returncode for p in players.values()] == [0, 0], outputs
            state = owner.state()
            final = owner.observe()
            assert final.turn is None and (final.result.done or final.result.truncated)
            assert final.result.observation["moves"] == len(state["moves"])
            white, black = outputs["white"], outputs["black"]
            assert int(white[1]) + int(black[1]) == len(state["moves"])
            assert int(white[1]) - int(black[1]) in (0, 1)  # white moves first
            assert white[-1] == black[-1] == final.result.observation["fen"].split()[-1]
            if final.result.done:  # the rewards are opposite (or both 0 for a draw)
                assert float(white[2]) == -float(black[2])
            assert seen >= 2


def test_one_seat_against_the_engine() -> None:
    with run_server("chess-duel") as server, ecotone.Connection.open_url(server.url) as conn:
        owner = conn.open("chess-duel")
        key = owner.seat_keys().keys["black"]
        owner.reset(seed=4, engine="white", opponent="greedy", max_moves=40)
        with ecotone.Connection.open_url(server.url) as other:
            black = other.join(key)
            view = black.observe()
            assert view.turn == "black" and view.result.observation["last_move"] is not None
            while view.turn is not None:
                legal = view.result.observation["legal_moves"]
                view = black.play({"move": legal[0]})
                assert view.turn in ("black", None)  # the engine replied at once
            assert view.result.truncated or view.result.done
            assert owner.state()["engine"] == "white"


def test_out_of_turn_and_illegal_moves_change_nothing() -> None:
    with run_server("chess-duel") as server, ecotone.Connection.open_url(server.url) as conn:
        owner = conn.open("chess-duel")
        keys = owner.seat_keys()
        owner.reset(seed=0)
        with ecotone.Connection.open_url(server.url) as other:
            black = other.join(keys.keys["black"])
            with pytest.raises(ecotone.ServerError) as caught:
                black.play({"move": "e7e5"})
            assert caught.value.code == "not_your_turn" and caught.value.details["turn"] == "white"
            with pytest.raises(ecotone.ServerError) as illegal:
                owner.play({"move": "e2e5"}, seat="white")
            assert illegal.value.code == "invalid_action"
            assert "e2e4" in illegal.value.details["legal_moves"]
            assert owner.state()["moves"] == []
            assert owner.play({"move": "e4"}, seat="white").turn == "black"  # SAN too
            assert black.play({"move": "e7e5"}).turn == "white"
            assert owner.state()["moves"] == ["e2e4", "e7e5"]


def test_the_env_in_process() -> None:
    env = ChessDuel()
    env.reset(seed=0, fen="7k/5Q2/6K1/8/8/8/8/8 w - - 0 1")
    env.step("white", ecotone.plugins.chess.ChessAction(move="f7g7"))  # mate
    assert env.current_seat() is None
    assert env.observe("white").reward == 1.0 and env.observe("black").reward == -1.0
    assert env.observe("black").result == "1-0" and env.observe(None).reward == 0.0
    with pytest.raises(ValueError, match="engine must be"):
        env.reset(engine="green")  # type: ignore[arg-type]


# --- chess-duel-indexed: moves as indexes, views as planes with an action mask -------------

E2E4 = (4 * 8 + 1) * 73 + 12
"""White's e2e4 (and black's e7e5, the same move from black's side): ecotone/plugins/
chess_planes.py."""


def test_the_indexed_form_refuses_bad_indexes_clearly_and_the_game_goes_on() -> None:
    with run_server(INDEXED) as server, ecotone.Connection.open_url(server.url) as conn:
        owner = conn.open(INDEXED)
        keys = owner.seat_keys()
        owner.reset(seed=0)
        with ecotone.Connection.open_url(server.url) as other:
            white = other.join(keys.keys["white"])
            for bad, why in [
                (4672, "Expected `int` <= 4671"),  # out of range: the schema refuses it
                (-1, "Expected `int` >= 0"),
                (10**12, "Expected `int` <= 4671"),
                ("e2e4", "Expected `int`, got `str`"),
                (None, "Expected `int`, got `null`"),
            ]:
                with pytest.raises(ecotone.InvalidActionError) as refused:
                    white.play({"action": bad})
                assert refused.value.field == "action" and why in refused.value.message
            with pytest.raises(ecotone.InvalidActionError) as masked:
                white.play({"action": 0})  # from a1, a step south-west: off the board
            details = masked.value.details
            assert masked.value.field == "action" and "not one white may play" in (
                masked.value.message
            )
            assert len(details["legal"]) == 20 and E2E4 in details["legal"]
            assert details["legal_moves"][details["legal"].index(E2E4)] == "e2e4"
            assert owner.state()["moves"] == []  # nothing changed
            view = white.play({"action": E2E4})
            assert view.turn == "black" and not any(view.result.observation["action_mask"])
            black = owner.observe("black").result.observation
            assert black["action_mask"][E2E4] == 1  # e7e5: the same index from black's side
            assert owner.play({"action": E2E4}, seat="black").turn == "white"
            assert owner.state()["moves"] == ["e2e4", "e7e5"]
            public = owner.observe().result.observation
            assert public["last_move"] == "e7e5" and "action_mask" not in public


def test_each_seat_sees_the_board_from_its_own_side_and_only_its_own_mask() -> None:
    env = ChessDuelIndexed()
    env.reset(seed=0)
    white, black = env.observe("white"), env.observe("black")
    assert sum(white.action_mask) == 20 and sum(black.action_mask) == 0
    # plane 7: our pawns after the last move; none yet (PettingZoo shows no position before
    # the first move); after e2e4, white's pawns are on its row 6, and e4's pawn, which just
    # moved two squares, is shown on its first rank (row 7) as PettingZoo shows it
    env.step("white", IndexedAction(action=E2E4))
    white, black = env.observe("white"), env.observe("black")
    ours = [[col[7] for col in row] for row in white.observation]
    theirs = [[col[7] for col in row] for row in black.observation]
    assert ours[6] == [True] * 4 + [False] + [True] * 3
    assert ours[7] == [False] * 4 + [True] + [False] * 3 and not any(ours[4])
    assert theirs[6] == [True] * 8  # black's own pawns, from its side
    assert sum(white.action_mask) == 0 and sum(black.action_mask) == 20
    assert env.observe(None).fen.startswith("rnbqkbnr/pppppppp/8/8/4P3/")
