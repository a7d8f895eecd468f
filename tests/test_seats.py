"""Multi-agent sessions over real servers: seats joined with keys on separate connections (and
processes), turns enforced, each seat seeing only its own view, spectators the public one,
dropped seats held then released by the env's rule."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.kernel.limits import Limits
from tests.conftest import RunningServer, run_server

TESTS = Path(__file__).resolve().parent

PLAYER = """
import sys
import ecotone

url, key = sys.argv[1], sys.argv[2]
with ecotone.Connection.open_url(url) as connection:
    seat = connection.join(key)
    seen = set()
    while True:
        view = seat.observe(wait=True, timeout=30)
        seen.update(view.result.observation["hand"])
        if view.result.done or view.turn is None:
            break
        seat.play({"card": view.result.observation["hand"][0]})
    print(seat.seat, view.result.observation["scores"][seat.seat], sorted(seen))
"""


@pytest.fixture(params=["websocket", "tcp"])
def cards_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with run_server("cards", transport=request.param) as server:
        yield server


def _hands(owner: ecotone.EnvClient) -> dict[str, list[int]]:
    return dict(owner.state()["hands"])


def test_two_processes_play_a_full_game_while_a_third_connection_spectates(
    cards_server: RunningServer,
) -> None:
    url = cards_server.url
    with ecotone.Connection.open_url(url) as connection:
        owner = connection.open("cards")
        keys = owner.seat_keys()
        owner.reset(seed=7)
        dealt = _hands(owner)
        players = [
            subprocess.Popen(
                [sys.executable, "-c", PLAYER, url, keys.keys[seat]],
                stdout=subprocess.PIPE,
                text=True,
                cwd=TESTS.parent,
            )
            for seat in ("north", "south")
        ]
        with ecotone.Connection.open_url(url) as watching:
            spectator = watching.join(keys.spectate)
            assert spectator.seat is None
            views = []
            while True:
                view = spectator.observe(wait=True, timeout=30)
                views.append(view)
                assert view.result.observation["hand"] == []  # the public view: no hand
                if view.result.done:
                    break
        outputs = [p.communicate(timeout=60)[0].split() for p in players]
        assert [p.returncode for p in players] == [0, 0]
        state = owner.state()
        assert state["step_count"] == 6
        final = owner.observe()  # the owner's public view
        assert final.result.done and final.turn is None
        assert len(final.result.observation["table"]) == 3
        scores = final.result.observation["scores"]
        for seat_name, score, *seen in outputs:
            assert int(score) == scores[seat_name]
            # each process saw exactly its own cards, never the other seat's
            assert sorted(int(c) for c in " ".join(seen).strip("[]").split(", ")) == sorted(
                dealt[seat_name]
            )
        assert len(views) >= 2


def test_out_of_turn_is_refused_naming_whose_turn_and_changes_nothing(
    cards_server: RunningServer,
) -> None:
    url = cards_server.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
    ):
        owner = first.open("cards")
        keys = owner.seat_keys()
        owner.reset(seed=1)
        south = second.join(keys.keys["south"])
        card = south.observe().result.observation["hand"][0]
        with pytest.raises(ecotone.ServerError) as caught:
            south.play({"card": card})
        assert caught.value.code == "not_your_turn"
        assert caught.value.details["turn"] == "north"
        assert owner.state()["step_count"] == 0
        assert card in south.observe().result.observation["hand"]
        # the owner may play whose turn it is without naming the seat
        hand = owner.observe("north").result.observation["hand"]
        view = owner.play({"card": hand[0]})
        assert view.seat == "north" and view.turn == "south"
        assert south.play({"card": card}).turn == "north"


def test_wrong_key_and_a_seat_joined_twice_are_clear_errors(cards_server: RunningServer) -> None:
    url = cards_server.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open("cards")
        keys = owner.seat_keys()
        assert owner.seat_keys() == keys  # the same keys every time
        with pytest.raises(ecotone.ServerError) as caught:
            second.join("not-a-key")
        assert caught.value.code == "unknown_seat_key"
        second.join(keys.keys["north"])
        for connection in (second, third):
            with pytest.raises(ecotone.ServerError) as caught:
                connection.join(keys.keys["north"])
            assert caught.value.code == "seat_taken"
            assert caught.value.details["seat"] == "north"
        third.join(keys.keys["south"])  # the other seat is free


def test_a_seat_reads_only_its_own_view_and_a_spectator_only_the_public_one(
    cards_server: RunningServer,
) -> None:
    url = cards_server.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open("cards")
        keys = owner.seat_keys()
        owner.reset(seed=2)
        north = second.join(keys.keys["north"])
        spectator = third.join(keys.spectate)
        for call in (
            lambda: north.observe("south"),
            lambda: north.play({"card": 1}, seat="south"),
            lambda: spectator.observe("north"),
            lambda: spectator.play({"card": 1}),
        ):
            with pytest.raises(ecotone.ServerError) as caught:
                call()
            assert caught.value.code == "forbidden"
        # a seat's holder is no owner: state, reset and close are not its to ask
        stranger: ecotone.EnvClient[Any, Any] = ecotone.EnvClient(
            second, north.session_id, "cards", north.types
        )
        with pytest.raises(ecotone.ServerError) as caught:
            stranger.state()
        assert caught.value.code == "unknown_session"
        with pytest.raises(ecotone.ServerError) as caught:
            stranger.reset(seed=0)
        assert caught.value.code == "unknown_session"
        with pytest.raises(ecotone.InvalidActionError):
            owner.step({"card": 1})  # a plain step names no seat


@pytest.mark.parametrize("transport", ["websocket", "tcp"])
def test_hidden_hands_never_reach_the_other_seat(transport: str) -> None:
    with run_server("cards", transport=transport) as server:
        with (
            ecotone.Connection.open_url(server.url) as first,
            ecotone.Connection.open_url(server.url) as second,
            ecotone.Connection.open_url(server.url) as third,
        ):
            owner = first.open("cards")
            keys = owner.seat_keys()
            for seed in range(5):
                owner.reset(seed=seed)
                dealt = _hands(owner)
                seats = {"north": second, "south": third}
                if seed == 0:
                    joined = {name: conn.join(keys.keys[name]) for name, conn in seats.items()}
                while True:
                    turn = owner.observe().turn
                    if turn is None:
                        break
                    for name, seat in joined.items():
                        view = seat.observe()
                        other = dealt["south" if name == "north" else "north"]
                        assert set(view.result.observation["hand"]) <= set(dealt[name])
                        assert not set(view.result.observation["hand"]) & set(other)
                    hand = joined[turn].observe().result.observation["hand"]
                    view = joined[turn].play({"card": hand[-1]})
                    assert not set(view.result.observation["hand"]) - set(dealt[turn])


def test_a_dropped_seat_is_held_then_released_by_the_env_rule() -> None:
    limits = Limits(lease=1.0)
    with run_server("cards_threaded", limits=limits) as server:
        with (
            ecotone.Connection.open_url(server.url) as first,
            ecotone.Connection.open_url(server.url) as second,
        ):
            owner = first.open("cards_threaded")
            keys = owner.seat_keys()
            owner.reset(seed=4)
            north = second.join(keys.keys["north"])
            with ecotone.Connection.open_url(server.url) as gone:
                gone.join(keys.keys["south"])
            # held: the same key takes it back
            with ecotone.Connection.open_url(server.url) as back:
                south = back.join(keys.keys["south"])
                assert south.seat == "south"
            hand = north.observe().result.observation["hand"]
            north.play({"card": hand[0]})
            started = time.monotonic()
            view = north.observe(wait=True, timeout=10)  # south's turn never comes
            assert time.monotonic() - started >= 0.5
            assert view.lost == ["south"] and view.turn is None
            with pytest.raises(ecotone.ServerError) as caught:
                north.play({"card": hand[1]})
            assert caught.value.code == "episode_done"
            assert owner.reset(seed=5).observation["hand_sizes"] == {"north": 3, "south": 3}
            assert north.observe().lost == []
