"""The conformance suite on multi-agent envs: the seat checks run (and only the checks that
apply), pass on a sound env and fail, saying where, on one whose seeded play is not
reproducible."""

from __future__ import annotations

import random

import ecotone
from ecotone.conformance import run
from ecotone.conformance.report import Status

SEAT_CHECKS = ["seat_turns", "seat_views", "seat_determinism", "seat_loss"]
"""The checks a multi-agent env gets, last, in this order."""


class Add(ecotone.Action):
    n: int


class Tally(ecotone.Observation):
    count: int


class Turns(ecotone.MultiAgentEnvironment[Add, Tally, ecotone.State]):
    """Two seats adding to a count in turn, until it reaches 6."""

    name = "turns"
    seats = ("a", "b")
    inline = True
    salt = False
    resets = 0

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Tally:
        self._count, self._moves = 0, 0
        if self.salt:  # a count the seed does not decide: each reset's differs from the last
            Turns.resets += 1
            self._count = Turns.resets % 2
        return self.observe(None)

    def current_seat(self) -> str | None:
        return None if self._count >= 6 else self.seats[self._moves % 2]

    def step(self, seat: str, action: Add) -> None:
        if not 1 <= action.n <= 2:
            raise ecotone.InvalidAction("n must be 1 or 2", field="n")
        self._count += action.n
        self._moves += 1

    def observe(self, seat: str | None) -> Tally:
        return Tally(count=self._count, done=self._count >= 6)

    def state(self) -> ecotone.State:
        return ecotone.State(step_count=self._moves)

    def sample_action(self, rng: random.Random, seat: str | None = None) -> Add:
        return Add(n=rng.choice((1, 2)))


class Salted(Turns):
    name = "salted"
    salt = True


def test_a_sound_multi_agent_env_passes_the_seat_checks_and_only_the_checks_that_apply() -> None:
    report = run(Turns)
    assert report.ok, report.text()
    names = [r.name for r in report.results]
    assert names[-4:] == SEAT_CHECKS
    assert "step_count" not in names and "seeded_determinism" not in names
    assert all(r.status is Status.PASS for r in report.results), report.text()


def test_a_seeded_play_that_is_not_reproducible_fails_seat_determinism() -> None:
    report = run(Salted, checks=["seat_determinism"])
    (result,) = [r for r in report.results if r.name == "seat_determinism"]
    assert result.status is Status.FAIL, report.text()
    assert "played again on a new session" in result.what


def test_a_check_of_the_other_kind_named_explicitly_is_skipped_saying_why() -> None:
    report = run(Turns, checks=["step_count"])
    (result,) = report.results
    assert result.status is Status.SKIP and "single-agent" in result.reason
    report = run("counter", checks=["seat_turns"])
    (result,) = report.results
    assert result.status is Status.SKIP and "no seats" in result.reason


def test_an_env_whose_seats_move_at_once_is_played_in_rounds_over_a_server() -> None:
    from tests.conftest import run_server

    with run_server("dilemma") as server:
        report = run(url=server.url, reset_options={"rounds": 4})
    by_name = {r.name: r for r in report.results}
    assert by_name["seat_turns"].status is Status.PASS, report.text()
    assert "4 rounds" in by_name["seat_turns"].note
    assert all(by_name[n].status is Status.PASS for n in ("seat_views", "seat_loss")), report.text()


def test_over_a_server_moves_come_from_the_action_mask_in_each_seats_view() -> None:
    """`chess-duel-indexed` over a server: no `sample_action` reaches the checks, and an index
    drawn from the schema is almost never legal; the mask in each seat's view gives its
    moves, so the seat checks play whole turns."""
    from tests.conftest import run_server

    with run_server("chess-duel-indexed") as server:
        report = run(url=server.url, reset_options={"max_moves": 16})
    by_name = {r.name: r for r in report.results}
    for name in ("seat_turns", "seat_views", "seat_determinism", "seat_loss"):
        assert by_name[name].status is Status.PASS, report.text()
    assert "16 moves" in by_name["seat_turns"].note


def test_async_multi_agent_envs_pass_the_seat_checks_in_process_and_over_a_server() -> None:
    from tests import async_seat_envs
    from tests.conftest import run_server

    for env in (async_seat_envs.AsyncCardsEnv, async_seat_envs.AsyncBidsEnv):
        report = run(env)
        assert report.ok, report.text()
        assert [r.name for r in report.results][-4:] == SEAT_CHECKS
        assert all(r.status is Status.PASS for r in report.results), report.text()
    with run_server("bids_async", plugins=[async_seat_envs]) as server:
        report = run(url=server.url)
    by_name = {r.name: r for r in report.results}
    assert all(by_name[n].status is Status.PASS for n in SEAT_CHECKS), report.text()
    assert "3 rounds" in by_name["seat_turns"].note


class AsyncSalted(ecotone.AsyncMultiAgentEnvironment[Add, Tally, ecotone.State]):
    """`salted` as coroutines: a count each reset changes, whatever the seed."""

    name = "async_salted"
    seats = ("a", "b")
    resets = 0

    async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Tally:
        AsyncSalted.resets += 1
        self._count, self._moves = AsyncSalted.resets % 2, 0
        return await self.observe(None)

    async def current_seat(self) -> str | None:
        return None if self._count >= 6 else self.seats[self._moves % 2]

    async def step(self, seat: str, action: Add) -> None:
        if not 1 <= action.n <= 2:
            raise ecotone.InvalidAction("n must be 1 or 2", field="n")
        self._count += action.n
        self._moves += 1

    async def observe(self, seat: str | None) -> Tally:
        return Tally(count=self._count, done=self._count >= 6)

    async def state(self) -> ecotone.State:
        return ecotone.State(step_count=self._moves)

    def sample_action(self, rng: random.Random, seat: str | None = None) -> Add:
        return Add(n=rng.choice((1, 2)))


def test_an_async_seeded_play_that_is_not_reproducible_fails_seat_determinism() -> None:
    report = run(AsyncSalted, checks=["seat_determinism"])
    (result,) = [r for r in report.results if r.name == "seat_determinism"]
    assert result.status is Status.FAIL, report.text()
    assert "played again on a new session" in result.what
