"""Simultaneous moves over real servers: a round waits for every live seat (or the env's
deadline), then the env steps once; each seat gets its own view; a seat's waiting move holds
back no other request of the session; a silent seat meets the env's rule; the server and the
other sessions go on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ecotone
from ecotone.specs import Play, SeatView
from tests.conftest import RunningServer, run_server


@pytest.fixture(params=["websocket", "tcp"])
def bids_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with run_server("bids", transport=request.param) as server:
        yield server


def _bids(**amounts: int) -> dict[str, dict[str, int]]:
    """A round's moves, by seat."""
    return {seat: {"amount": amount} for seat, amount in amounts.items()}


def _seated(url: str, owner: ecotone.EnvClient[Any, Any], count: int) -> list[Any]:
    """`count` connections, each holding one seat of the owner's session (a, b, c...)."""
    keys = owner.seat_keys()
    seats = []
    for seat in ("a", "b", "c")[:count]:
        connection = ecotone.Connection.open_url(url)
        seats.append(connection.join(keys.keys[seat]))
    return seats


def test_every_seat_moves_then_the_env_steps_once_and_each_gets_its_own_view(
    bids_server: RunningServer,
) -> None:
    url = bids_server.url
    with ecotone.Connection.open_url(url) as connection:
        owner = connection.open("bids")
        assert connection.describe("bids").simultaneous is True
        seats = _seated(url, owner, 3)
        try:
            owner.reset(seed=0)
            first = seats[0].observe()
            assert first.turn is None and first.acting == ["a", "b", "c"]
            answers: dict[str, Any] = {}

            def move(seat: Any, amount: int) -> None:
                answers[seat.seat] = seat.play({"amount": amount})

            # a and b move first: their answers wait for the round, on threads of their own
            waiting = [threading.Thread(target=move, args=(seats[0], 7))]
            waiting[0].start()
            while owner.observe("a").acting != ["b", "c"]:  # a's move is in, not played
                pass
            assert owner.state()["step_count"] == 0  # the session answers while a waits
            waiting.append(threading.Thread(target=move, args=(seats[1], 3)))
            waiting[1].start()
            while owner.observe().acting != ["c"]:
                pass
            assert not answers
            move(seats[2], 5)  # the last move plays the round
            for thread in waiting:
                thread.join(10)
            assert sorted(answers) == ["a", "b", "c"]
            for name, answer in answers.items():
                assert answer.seat == name and answer.turn is None
                assert answer.acting == ["a", "b", "c"]  # the next round's
                view = answer.result.observation
                assert view["round"] == 1 and view["bids"] == {"a": 7, "b": 3, "c": 5}
                assert view["total"] == (7 if name == "a" else 0)  # its own, nobody else's
                assert answer.result.reward == (7.0 if name == "a" else 0.0)
            assert owner.state()["step_count"] == 1
        finally:
            for seat in seats:
                seat.connection.close()


def test_the_owner_plays_every_seat_of_a_round_on_one_connection(
    bids_server: RunningServer,
) -> None:
    with ecotone.connect(bids_server.url, env="bids") as owner:
        owner.reset(seed=1)
        for round_ in range(3):
            views = owner.play_round(_bids(a=1, b=2 + round_, c=0))
            assert list(views) == ["a", "b", "c"]
            assert views["b"].result.observation["total"] == sum(range(2, 3 + round_))
        assert views["a"].result.done and views["a"].acting == []
        with pytest.raises(ecotone.ServerError) as caught:
            owner.play({"amount": 1}, seat="a")
        assert caught.value.code == "episode_done"


def test_pipelined_moves_of_one_connection_are_not_held_behind_each_other(
    bids_server: RunningServer,
) -> None:
    """The owner's three moves on one connection, sent before any answer: the first two
    leave the session's queue, so the third reaches the env and plays the round."""
    with ecotone.Connection.open_url(bids_server.url) as connection:
        owner = connection.open("bids")
        owner.reset(seed=2)
        core = connection.core
        frames = [
            Play(id=core.next_id(), session=owner.session_id, action=core.raw(a), seat=s)
            for s, a in (("a", {"amount": 2}), ("b", {"amount": 9}), ("c", {"amount": 4}))
        ]
        for frame in frames:
            connection.send(frame)
        got: dict[Any, Any] = {}
        while len(got) < 3:
            for answer in connection.poll(deadline=None):
                got[answer.id] = answer
        views = [got[frame.id] for frame in frames]
        assert [v.seat for v in views] == ["a", "b", "c"]
        assert all(core.codec.decode_as(v.observation, dict)["round"] == 1 for v in views)


def test_a_seat_moving_twice_in_a_round_is_not_your_turn_and_changes_nothing(
    bids_server: RunningServer,
) -> None:
    with ecotone.Connection.open_url(bids_server.url) as connection:
        owner = connection.open("bids")
        owner.reset(seed=3)
        core = connection.core
        first = Play(
            id=core.next_id(), session=owner.session_id, action=core.raw({"amount": 4}), seat="a"
        )
        connection.send(first)  # a's move, kept for the round: no answer yet
        while owner.observe("a").acting != ["b", "c"]:
            pass
        with pytest.raises(ecotone.ServerError) as caught:
            owner.play({"amount": 5}, seat="a")
        assert caught.value.code == "not_your_turn"
        assert caught.value.details["acting"] == ["b", "c"]
        views = owner.play_round(_bids(b=1, c=1))
        assert views["b"].result.observation["bids"] == {"a": 4, "b": 1, "c": 1}
        (answer,) = connection.poll(deadline=None)
        assert isinstance(answer, SeatView)
        assert answer.id == first.id and answer.seat == "a"


def test_a_silent_seat_past_the_deadline_meets_the_env_rule_and_the_server_goes_on() -> None:
    with run_server("bids_hasty") as server:
        url = server.url
        with (
            ecotone.Connection.open_url(url) as connection,
            ecotone.connect(url, env="bids_hasty") as other,
        ):
            owner = connection.open("bids_hasty")
            silent = _seated(url, owner, 3)[2]
            try:
                owner.reset(seed=4)
                other.reset(seed=4)
                answers: dict[str, Any] = {}
                mover = threading.Thread(
                    target=lambda: answers.update(owner.play_round(_bids(a=6, b=2)))
                )
                mover.start()
                # another session of the server plays a whole round meanwhile, untouched
                before = other.play_round(_bids(a=1, b=1, c=3))
                assert before["c"].result.observation["bids"] == {"a": 1, "b": 1, "c": 3}
                mover.join(10)  # c never moves: the deadline (1 s) plays the round
                assert sorted(answers) == ["a", "b"]
                view = answers["a"].result.observation
                assert view["bids"] == {"a": 6, "b": 2} and view["out"] == ["c"]
                assert answers["a"].acting == ["a", "b"]  # c is out of the game: the env's rule
                with pytest.raises(ecotone.ServerError) as caught:
                    silent.play({"amount": 1})
                assert caught.value.code == "not_your_turn"
                last = owner.play_round(_bids(a=1, b=0))
                assert last["a"].result.observation["round"] == 2
                assert other.state()["step_count"] == 1  # the other session: its own round
                assert owner.reset(seed=5).observation["out"] == []
            finally:
                silent.connection.close()


def test_a_refused_round_answers_every_move_and_starts_over(bids_server: RunningServer) -> None:
    with ecotone.connect(bids_server.url, env="bids") as owner:
        owner.reset(seed=6)
        with pytest.raises(ecotone.InvalidActionError) as caught:
            owner.play_round(_bids(a=11, b=1, c=1))
        assert caught.value.details["field"] == "amount"
        assert owner.observe().acting == ["a", "b", "c"]  # the round starts over
        assert owner.state()["step_count"] == 0
        views = owner.play_round(_bids(a=10, b=1, c=1))
        assert views["a"].result.reward == 10.0


def test_moves_kept_when_the_episode_is_reset_or_the_session_closes(
    bids_server: RunningServer,
) -> None:
    url = bids_server.url
    with ecotone.Connection.open_url(url) as connection:
        owner = connection.open("bids")
        seats = _seated(url, owner, 2)
        try:
            owner.reset(seed=7)
            errors: dict[str, str] = {}

            def move(seat: Any) -> None:
                try:
                    seat.play({"amount": 1})
                except ecotone.ServerError as exc:
                    errors[seat.seat] = exc.code

            first = threading.Thread(target=move, args=(seats[0],))
            first.start()
            while owner.observe("a").acting != ["b", "c"]:
                pass
            owner.reset(seed=8)
            first.join(10)
            assert errors == {"a": "episode_done"}
            second = threading.Thread(target=move, args=(seats[1],))
            second.start()
            while owner.observe("b").acting != ["a", "c"]:
                pass
            owner.close()
            second.join(10)
            assert errors == {"a": "episode_done", "b": "unknown_session"}
        finally:
            for seat in seats:
                seat.connection.close()


def test_a_deadline_passing_while_a_call_holds_the_session_plays_the_round_after_it() -> None:
    with run_server("bids_threaded") as server:
        with ecotone.Connection.open_url(server.url) as connection:
            owner = connection.open("bids_threaded")
            seats = _seated(server.url, owner, 1)
            try:
                owner.reset(seed=9)
                answers: list[Any] = []
                mover = threading.Thread(
                    target=lambda: answers.append(seats[0].play({"amount": 3}))
                )
                mover.start()
                while owner.observe("a").acting != ["b", "c"]:
                    pass
                # state() holds the session for 2 s, past the round's 1 s deadline
                assert owner.state()["step_count"] == 0
                mover.join(10)
                view = answers[0].result.observation
                assert view["round"] == 1 and view["out"] == ["b", "c"]
                assert answers[0].result.done  # one seat left: the game is over
            finally:
                seats[0].connection.close()
