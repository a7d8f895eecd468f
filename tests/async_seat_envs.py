"""Multi-agent test envs whose methods are coroutines (a plugin module: `run_server(...,
plugins=[async_seat_envs])`): the hidden-hand card game of tests/envs.py taking turns, and a
two-seat sealed-bid game moving at once, each yielding to the event loop in every method (as
an env waiting on a model or a service would) and able to fail or hang on demand."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel

import ecotone
from tests.envs import Bid, BidsState, BidsView, Card, CardsState, CardsView

RAISE = 0
"""A card (or a bid) that makes the env raise in `step`, in an episode reset with `traps`."""
HANG = 99
"""A card (or a bid) that makes the env's `step` wait forever (past its `call_timeout`), in an
episode reset with `traps`."""


class AsyncCardsEnv(ecotone.AsyncMultiAgentEnvironment[Card, CardsView, CardsState]):
    """`cards` (tests/envs.py) as coroutines: each seat is dealt 3 cards from 1-20, they take
    turns laying one (`north` leads), the higher card of a round scores. A seat sees its own
    hand only. Reset with `traps=True`, card 0 makes `step` raise and card 99 makes it hang;
    its calls have 2 s."""

    name = "cards_async"
    seats = ("north", "south")
    call_timeout = 2.0

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, traps: bool = False
    ) -> CardsView:
        await anyio.lowlevel.checkpoint()
        self._traps = traps
        deck = random.Random(seed).sample(range(1, 21), 6)
        self._hands = {"north": sorted(deck[:3]), "south": sorted(deck[3:])}
        self._table: list[list[int]] = []
        self._scores = {"north": 0, "south": 0}
        self._rewards = {"north": 0.0, "south": 0.0}
        self._steps = 0
        self._episode = episode_id
        return await self.observe(None)

    async def current_seat(self) -> str | None:
        await anyio.lowlevel.checkpoint()
        if not any(self._hands.values()):
            return None
        return "north" if self._steps % 2 == 0 else "south"

    async def step(self, seat: str, action: Card) -> None:
        if self._traps and action.card == RAISE:
            raise RuntimeError("the dealer dropped the deck")
        if self._traps and action.card == HANG:
            await anyio.sleep_forever()
        await anyio.sleep(0.001)
        if action.card not in self._hands[seat]:
            raise ecotone.InvalidAction("not in your hand", field="card")
        self._hands[seat].remove(action.card)
        self._rewards[seat] = 0.0
        if seat == "north":
            self._table.append([action.card])
        else:
            self._table[-1].append(action.card)
            north, south = self._table[-1]
            winner, loser = ("north", "south") if north > south else ("south", "north")
            self._scores[winner] += 1
            self._rewards[winner] += 1.0
            self._rewards[loser] -= 1.0
        self._steps += 1

    async def observe(self, seat: str | None) -> CardsView:
        await anyio.lowlevel.checkpoint()
        return CardsView(
            hand=[] if seat is None else list(self._hands[seat]),
            table=[list(r) for r in self._table],
            hand_sizes={s: len(h) for s, h in self._hands.items()},
            scores=dict(self._scores),
            reward=None if seat is None else self._rewards[seat],
            done=not any(self._hands.values()),
        )

    async def state(self) -> CardsState:
        await anyio.lowlevel.checkpoint()
        hands = {s: list(h) for s, h in self._hands.items()}
        return CardsState(episode_id=self._episode, step_count=self._steps, hands=hands)

    async def load_state(self, state: CardsState) -> None:
        """Put a saved deal back (the hands and the turn; the table and scores start empty)."""
        await anyio.lowlevel.checkpoint()
        self._hands = {s: list(h) for s, h in state.hands.items()}
        self._steps = state.step_count
        self._episode = state.episode_id
        self._table, self._traps = [], False
        self._scores = {"north": 0, "south": 0}
        self._rewards = {"north": 0.0, "south": 0.0}

    async def render(self, seat: str | None) -> str:
        """The table, and `seat`'s hand (none in the public picture)."""
        await anyio.lowlevel.checkpoint()
        hand = "" if seat is None else f"{seat} holds {self._hands[seat]}; "
        return f"{hand}on the table: {self._table}"

    def sample_action(self, rng: random.Random, seat: str) -> Card:
        """A card of `seat`'s hand (the conformance suite plays with it)."""
        return Card(card=rng.choice(self._hands[seat]))


class AsyncBidsEnv(ecotone.AsyncSimultaneousEnvironment[Bid, BidsView, BidsState]):
    """Two seats bid at once, three rounds; the higher bid wins it (a tie: nobody). A seat
    silent past a round's one-second deadline bids 0 (the env's rule). A bid above 10 is
    refused (the round starts over). Reset with `traps=True`, a bid of 0 makes `step` raise
    and one of 99 makes it hang (its calls have 2 s)."""

    name = "bids_async"
    seats = ("a", "b")
    move_deadline = 1.0
    call_timeout = 2.0

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, traps: bool = False
    ) -> BidsView:
        await anyio.lowlevel.checkpoint()
        self._traps = traps
        self._round = 0
        self._bids: dict[str, int] = {}
        self._totals = dict.fromkeys(self.seats, 0)
        self._rewards = dict.fromkeys(self.seats, 0.0)
        self._episode = episode_id
        return await self.observe(None)

    async def live_seats(self) -> tuple[str, ...]:
        await anyio.lowlevel.checkpoint()
        return () if self._round >= 3 else self.seats

    async def step(self, actions: dict[str, Bid]) -> None:
        amounts = [bid.amount for bid in actions.values()]
        if self._traps and RAISE in amounts:
            raise RuntimeError("the auctioneer lost the bids")
        if self._traps and HANG in amounts:
            await anyio.sleep_forever()
        await anyio.sleep(0.001)
        if any(amount > 10 for amount in amounts):
            raise ecotone.InvalidAction("a bid is 10 at most", field="amount")
        self._bids = {s: actions[s].amount if s in actions else 0 for s in self.seats}
        self._rewards = dict.fromkeys(self.seats, 0.0)
        best = max(self._bids.values())
        winners = [s for s, amount in self._bids.items() if amount == best]
        if len(winners) == 1:
            self._totals[winners[0]] += best
            self._rewards[winners[0]] = float(best)
        self._round += 1

    async def observe(self, seat: str | None) -> BidsView:
        await anyio.lowlevel.checkpoint()
        return BidsView(
            round=self._round,
            bids=dict(self._bids),
            total=0 if seat is None else self._totals[seat],
            reward=None if seat is None else self._rewards[seat],
            done=self._round >= 3,
        )

    async def state(self) -> BidsState:
        await anyio.lowlevel.checkpoint()
        return BidsState(
            episode_id=self._episode, step_count=self._round, totals=dict(self._totals)
        )

    def sample_action(self, rng: random.Random, seat: str) -> Bid:
        """A bid the env takes (the conformance suite plays with it)."""
        return Bid(amount=rng.randint(1, 10))


ASYNC_SEAT_ENVS: dict[str, type] = {"cards_async": AsyncCardsEnv, "bids_async": AsyncBidsEnv}


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return dict(ASYNC_SEAT_ENVS)
