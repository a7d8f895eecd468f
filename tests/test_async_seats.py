"""Multi-agent envs whose methods are coroutines (`ecotone.AsyncMultiAgentEnvironment`,
`ecotone.AsyncSimultaneousEnvironment`) over real servers: two seat connections play a
turn-based game and rounds at once, turns and silent seats keep their rules, each seat sees
only its own view, and an env that raises or hangs in a seat's move is answered with a clear
error while the server and its other sessions go on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ecotone
from ecotone.kernel import EnvDefinitionError, EnvSpec, Mode
from ecotone.specs import Error, Play, Render, Rendered, SeatView
from tests import async_seat_envs
from tests.async_seat_envs import HANG, RAISE
from tests.conftest import RunningServer, run_server
from tests.envs import Card, CardsState, CardsView


@pytest.fixture(params=["websocket", "tcp"])
def cards(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """A real server of the async turn-based game."""
    with run_server("cards_async", transport=request.param, plugins=[async_seat_envs]) as running:
        yield running


@pytest.fixture(params=["websocket", "tcp"])
def bids(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    """A real server of the async game whose seats move at once."""
    with run_server("bids_async", transport=request.param, plugins=[async_seat_envs]) as running:
        yield running


def _hand(view: Any) -> list[int]:
    return list(view.result.observation["hand"])


def test_async_multi_agent_envs_are_awaited_for_every_method() -> None:
    for name, cls in async_seat_envs.ASYNC_SEAT_ENVS.items():
        spec = EnvSpec.from_class(cls)
        assert spec.name == name and spec.asynchronous and spec.mode is Mode.AWAIT
        assert spec.seats and not spec.inline
    bids = EnvSpec.from_class(async_seat_envs.AsyncBidsEnv)
    assert bids.simultaneous and bids.move_deadline == 1.0


def test_a_multi_agent_env_mixing_coroutines_and_plain_functions_is_refused_saying_which() -> None:
    class HalfAsync(async_seat_envs.AsyncCardsEnv):
        def observe(self, seat: str | None) -> CardsView:  # type: ignore[override]
            return CardsView()

    with pytest.raises(EnvDefinitionError, match=r"is an AsyncMultiAgentEnvironment, but obs"):
        EnvSpec.from_class(HalfAsync, "half")

    class HalfPlain(ecotone.MultiAgentEnvironment[Card, CardsView, CardsState]):
        seats = ("north", "south")

        def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> CardsView:
            return CardsView()

        async def current_seat(self) -> str | None:  # type: ignore[override]
            return None

        def step(self, seat: str, action: Card) -> None:
            return None

        def observe(self, seat: str | None) -> CardsView:
            return CardsView()

        def state(self) -> CardsState:
            return CardsState()

    with pytest.raises(EnvDefinitionError, match=r"current_seat\(\) is a coroutine: subclass e"):
        EnvSpec.from_class(HalfPlain, "half")


def test_two_seat_connections_play_an_async_turn_based_game_each_seeing_only_its_own_hand(
    cards: RunningServer,
) -> None:
    url = cards.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
        ecotone.Connection.open_url(url) as fourth,
    ):
        owner = first.open("cards_async")
        keys = owner.seat_keys()
        owner.reset(seed=3)
        dealt = dict(owner.state()["hands"])
        seats = {"north": second.join(keys.keys["north"]), "south": third.join(keys.keys["south"])}
        spectator = fourth.join(keys.spectate)

        # out of turn: refused naming whose turn it is, and nothing changes
        with pytest.raises(ecotone.ServerError) as caught:
            seats["south"].play({"card": dealt["south"][0]})
        assert caught.value.code == "not_your_turn" and caught.value.details["turn"] == "north"
        assert owner.state()["step_count"] == 0

        # the seat's own picture (the env's async render) names its own hand only
        (drawn,) = second.request_all([Render(id=second.core.next_id(), session=owner.session_id)])
        assert isinstance(drawn, Rendered)
        assert f"north holds {dealt['north']}" in drawn.content
        assert str(dealt["south"]) not in drawn.content

        seen: dict[str, list[list[int]]] = {"north": [], "south": []}
        failures: list[BaseException] = []

        def player(name: str) -> None:
            try:
                mine = seats[name]
                while True:
                    view = mine.observe(wait=True, timeout=30)
                    seen[name].append(_hand(view))
                    if view.result.done or view.turn is None:
                        return
                    seen[name].append(_hand(mine.play({"card": _hand(view)[0]})))
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=player, args=(name,)) for name in seats]
        for thread in threads:
            thread.start()
        public = []
        while True:
            view = spectator.observe(wait=True, timeout=30)
            public.append(view.result.observation)
            if view.result.done:
                break
        for thread in threads:
            thread.join(30)
        assert not failures, failures
        assert owner.state()["step_count"] == 6
        assert all(p["hand"] == [] for p in public)  # the public view: no hand
        final = owner.observe()
        assert final.result.done and final.turn is None
        assert len(final.result.observation["table"]) == 3
        for name, hands in seen.items():
            other = "south" if name == "north" else "north"
            assert {card for hand in hands for card in hand} == set(dealt[name])
            assert not {card for hand in hands for card in hand} & set(dealt[other])


def test_an_async_simultaneous_round_waits_for_both_seats_and_a_silent_seat_meets_the_rule(
    bids: RunningServer,
) -> None:
    url = bids.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open("bids_async")
        keys = owner.seat_keys()
        owner.reset(seed=0)
        a, b = second.join(keys.keys["a"]), third.join(keys.keys["b"])
        answers: dict[str, Any] = {}

        def move(seat: Any, amount: int) -> None:
            answers[seat.seat] = seat.play({"amount": amount})

        waiting = threading.Thread(target=move, args=(a, 7))
        waiting.start()
        while owner.observe().acting != ["b"]:  # a's move is in, kept for the round
            pass
        assert owner.state()["step_count"] == 0 and not answers  # the session answers meanwhile
        move(b, 3)
        waiting.join(10)
        for name, answer in answers.items():
            assert answer.seat == name and answer.acting == ["a", "b"]
            view = answer.result.observation
            assert view["round"] == 1 and view["bids"] == {"a": 7, "b": 3}
            assert view["total"] == (7 if name == "a" else 0)  # its own, never the other's

        # b stays silent: the round is played at the deadline, b bidding 0 (the env's rule)
        answer = a.play({"amount": 2})
        assert answer.result.observation["bids"] == {"a": 2, "b": 0}
        assert answer.result.reward == 2.0
        assert owner.state()["totals"] == {"a": 9, "b": 0}


def test_a_move_twice_in_one_async_round_is_not_your_turn(bids: RunningServer) -> None:
    url = bids.url
    with ecotone.Connection.open_url(url) as first, ecotone.Connection.open_url(url) as second:
        owner = first.open("bids_async")
        keys = owner.seat_keys()
        owner.reset(seed=0)
        # one connection's frames are taken in order: a's move (kept for the round), a's
        # second (refused: a moved already, the round waits for b), b's (plays the round)
        core = first.core
        frames = [
            Play(
                id=core.next_id(), session=owner.session_id, action=core.raw({"amount": n}), seat=s
            )
            for s, n in (("a", 4), ("a", 5), ("b", 1))
        ]
        by_id = {answer.id: answer for answer in first.request_all(frames)}
        kept, twice, last = (by_id[frame.id] for frame in frames)
        assert isinstance(twice, Error) and twice.code == "not_your_turn"
        assert twice.details["acting"] == ["b"]
        assert isinstance(kept, SeatView) and isinstance(last, SeatView)
        assert owner.observe("a").result.observation["bids"] == {"a": 4, "b": 1}
        a = second.join(keys.keys["a"])  # the seat's holder reads its own total
        assert a.observe().result.observation["total"] == 4


def test_an_async_env_that_raises_in_a_seat_move_is_an_env_error_and_the_game_goes_on(
    cards: RunningServer,
) -> None:
    url = cards.url
    with ecotone.Connection.open_url(url) as first, ecotone.Connection.open_url(url) as second:
        owner = first.open("cards_async")
        keys = owner.seat_keys()
        owner.reset(seed=3, traps=True)
        north = second.join(keys.keys["north"])
        with pytest.raises(ecotone.ServerError) as caught:
            north.play({"card": RAISE})
        assert caught.value.code == "env_error"
        assert "RuntimeError" in str(caught.value) and "dropped the deck" in str(caught.value)
        assert owner.state()["step_count"] == 0
        card = _hand(north.observe())[0]
        assert north.play({"card": card}).turn == "south"


def test_an_async_round_that_raises_is_an_env_error_to_every_move_and_starts_over(
    bids: RunningServer,
) -> None:
    url = bids.url
    with ecotone.Connection.open_url(url) as first, ecotone.Connection.open_url(url) as second:
        rounds = first.open("bids_async")
        keys = rounds.seat_keys()
        rounds.reset(seed=0, traps=True)
        a = second.join(keys.keys["a"])
        failed: list[ecotone.ServerError] = []
        waiting = threading.Thread(target=lambda: failed.append(_refusal(a, RAISE)))
        waiting.start()
        while rounds.observe().acting != ["b"]:
            pass
        b_refusal = _refusal(rounds, 5, seat="b")
        waiting.join(10)
        for refusal in (*failed, b_refusal):  # every move of the round hears of it
            assert refusal.code == "env_error" and "lost the bids" in str(refusal)
        assert len(failed) == 1
        assert rounds.observe().acting == ["a", "b"]  # the round starts over
        assert _round(rounds, a, 1, 2).result.observation["bids"] == {"a": 1, "b": 2}


def _round(owner: Any, a: Any, bid_a: int, bid_b: int) -> Any:
    """A round: `a`'s holder bids on a thread of its own, the owner bids for b; b's view."""
    waiting = threading.Thread(target=a.play, args=({"amount": bid_a},))
    waiting.start()
    while owner.observe().acting != ["b"]:
        pass
    view = owner.play({"amount": bid_b}, seat="b")
    waiting.join(10)
    return view


def _refusal(player: Any, amount: int, **where: Any) -> ecotone.ServerError:
    with pytest.raises(ecotone.ServerError) as caught:
        player.play({"amount": amount}, **where)
    return caught.value


def test_an_async_env_that_hangs_in_a_seat_move_times_out_and_the_server_goes_on(
    cards: RunningServer,
) -> None:
    url = cards.url
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open("cards_async")
        keys = owner.seat_keys()
        owner.reset(seed=3, traps=True)
        bystander = third.open("cards_async")  # another episode, on another connection
        bystander.reset(seed=4)
        north = second.join(keys.keys["north"])
        with pytest.raises(ecotone.ServerError) as caught:
            north.play({"card": HANG}, timeout=30)
        assert caught.value.code == "timeout" and "play" in str(caught.value)
        # the env was set aside: a move is refused until a reset makes a new one
        with pytest.raises(ecotone.ServerError) as caught:
            north.play({"card": 1})
        assert caught.value.code == "reset_required"
        owner.reset(seed=3)
        card = _hand(north.observe())[0]
        assert north.play({"card": card}).turn == "south"
        hand = bystander.observe("north").result.observation["hand"]
        assert bystander.play({"card": hand[0]}).turn == "south"  # untouched
    with ecotone.Connection.open_url(url) as later:  # the server still serves
        assert later.open("cards_async").reset(seed=1).done is False


def test_an_async_round_that_hangs_times_out_for_every_move_and_a_reset_starts_afresh(
    bids: RunningServer,
) -> None:
    url = bids.url
    with ecotone.Connection.open_url(url) as first, ecotone.Connection.open_url(url) as second:
        rounds = first.open("bids_async")
        keys = rounds.seat_keys()
        rounds.reset(seed=0, traps=True)
        a = second.join(keys.keys["a"])
        failed: list[ecotone.ServerError] = []
        waiting = threading.Thread(target=lambda: failed.append(_refusal(a, HANG)))
        waiting.start()
        while rounds.observe().acting != ["b"]:
            pass
        b_refusal = _refusal(rounds, 1, seat="b")
        waiting.join(30)
        assert len(failed) == 1
        for refusal in (*failed, b_refusal):
            assert refusal.code == "timeout"
        rounds.reset(seed=0)  # a new env: a keeps its seat
        assert _round(rounds, a, 3, 1).result.observation["bids"] == {"a": 3, "b": 1}
    with ecotone.Connection.open_url(url) as later:
        assert later.open("bids_async").reset(seed=1).done is False


def test_an_async_seated_session_is_saved_and_restored_under_its_players(
    cards: RunningServer,
) -> None:
    url = cards.url
    with ecotone.Connection.open_url(url) as first, ecotone.Connection.open_url(url) as second:
        owner = first.open("cards_async")
        keys = owner.seat_keys()
        owner.reset(seed=5)
        north = second.join(keys.keys["north"])
        saved = owner.snapshot()
        before = _hand(north.observe())
        assert north.play({"card": before[0]}).turn == "south"
        owner.restore(saved)  # awaited load_state, then the views read again
        view = north.observe()
        assert view.turn == "north" and _hand(view) == before


def test_an_async_seated_env_runs_in_process_under_asyncio_too() -> None:
    import asyncio

    from ecotone.kernel import Engine
    from ecotone.transports.inproc.client import InprocAsyncChannel

    async def main() -> None:
        engine = Engine(EnvSpec.from_class(async_seat_envs.AsyncCardsEnv))
        channel = InprocAsyncChannel(engine, "json")
        connection = ecotone.AsyncConnection("inproc://cards_async", channel=channel)
        async with connection, await connection.open() as game:
            await game.reset(seed=2)
            hand = (await game.observe("north")).result.observation["hand"]
            assert (await game.play({"card": hand[0]})).turn == "south"
            (copy,) = await game.fork(1)  # the deal saved and put into a new env, awaited
            assert (await copy.observe()).turn == "south"
            assert (await copy.observe("north")).result.observation["hand"] == hand[1:]
            await copy.aclose()

    asyncio.run(main())
