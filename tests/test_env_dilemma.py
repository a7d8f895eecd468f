"""`dilemma`, the bundled simultaneous-move env: its payoffs and rounds in process, two
player processes over a real server, a silent seat counted as the env's rule says, and the
owner playing both seats on one connection (inproc and WebSocket)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.plugins.dilemma import DilemmaEnv, DilemmaMove
from tests.conftest import run_server

TESTS = Path(__file__).resolve().parent

PLAYER = """
import sys
import ecotone

url, key, strategy = sys.argv[1], sys.argv[2], sys.argv[3]
with ecotone.Connection.open_url(url) as connection:
    seat = connection.join(key)
    me = seat.seats.index(seat.seat)
    view = seat.observe(wait=True, timeout=30)
    while seat.seat in view.acting:
        last = view.result.observation["last"][1 - me]
        move = "defect" if strategy == "defect" or last == "defect" else "cooperate"
        view = seat.play({"move": move}, timeout=30)
    print(seat.seat, view.result.observation["scores"][me], view.result.done)
"""


def _moves(first: str, second: str) -> dict[str, DilemmaMove]:
    return {"player_0": DilemmaMove(move=first), "player_1": DilemmaMove(move=second)}  # type: ignore[arg-type]


def test_the_payoffs_rounds_and_views_in_process() -> None:
    env = DilemmaEnv()
    start = env.reset(rounds=3)
    assert (start.round, start.last, start.scores, start.done) == (
        0,
        ["none", "none"],
        [0, 0],
        False,
    )
    assert env.live_seats() == ("player_0", "player_1")
    for (a, b), (pa, pb) in [
        (("cooperate", "cooperate"), (3, 3)),
        (("defect", "cooperate"), (5, 0)),
        (("defect", "defect"), (1, 1)),
    ]:
        env.step(_moves(a, b))
        assert (env.observe("player_0").reward, env.observe("player_1").reward) == (pa, pb)
        assert env.observe(None).last == [a, b] and env.observe(None).reward is None
    assert env.observe(None).scores == [9, 4] and env.observe(None).done
    assert env.live_seats() == ()
    env.reset(rounds=1)
    env.step({"player_1": DilemmaMove(move="defect")})  # player_0 silent: cooperates
    view = env.observe("player_0")
    assert view.last == ["cooperate", "defect"] and view.metadata == {"silent": ["player_0"]}
    with pytest.raises(ValueError, match="rounds"):
        env.reset(rounds=0)


def test_two_player_processes_play_a_whole_game_over_websocket() -> None:
    with run_server("dilemma") as server:
        with ecotone.Connection.open_url(server.url) as connection:
            owner = connection.open("dilemma")
            keys = owner.seat_keys()
            owner.reset(seed=0, rounds=4)
            players = [
                subprocess.Popen(
                    [sys.executable, "-c", PLAYER, server.url, keys.keys[seat], strategy],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=TESTS.parent,
                )
                for seat, strategy in (("player_0", "tit-for-tat"), ("player_1", "defect"))
            ]
            outputs = sorted(p.communicate(timeout=60)[0].split() for p in players)
            assert [p.returncode for p in players] == [0, 0]
            # tit-for-tat cooperates once, then defects back: 0 + 1 + 1 + 1 against 5 + 1 + 1 + 1
            assert outputs == [["player_0", "3", "True"], ["player_1", "8", "True"]]
            state = owner.state()
            assert state["step_count"] == 4 and state["silent"] == [[], [], [], []]
            assert state["moves"][0] == ["cooperate", "defect"]


def test_a_silent_seat_is_counted_as_cooperating_after_the_deadline() -> None:
    with run_server("dilemma_hasty") as server:
        with (
            ecotone.Connection.open_url(server.url) as connection,
            ecotone.Connection.open_url(server.url) as other,
        ):
            owner = connection.open("dilemma_hasty")
            owner.reset(rounds=2)
            seat = other.join(owner.seat_keys().keys["player_1"])
            view = seat.play({"move": "defect"})  # player_0 never moves: 1 s later, the round
            assert view.result.observation["last"] == ["cooperate", "defect"]
            assert view.result.reward == 5.0 and view.result.observation["metadata"] == {
                "silent": ["player_0"]
            }
            assert view.acting == ["player_0", "player_1"]


@pytest.mark.parametrize("where", ["inproc", "websocket"])
def test_the_owner_plays_both_seats_of_every_round(where: str) -> None:
    def play(url: str) -> None:
        with ecotone.connect(url, env="dilemma") as owner:
            owner.reset(rounds=3)
            rounds: list[Any] = []
            while owner.observe().acting:
                rounds.append(
                    owner.play_round({s: {"move": "defect"} for s in owner.observe().acting})
                )
            assert len(rounds) == 3
            assert rounds[-1]["player_1"].result.observation["scores"] == [3, 3]
            assert rounds[-1]["player_0"].result.done

    if where == "inproc":
        play("inproc://dilemma")
    else:
        with run_server("dilemma") as server:
            play(server.url)
