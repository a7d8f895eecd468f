"""Test-only environments, contributed to a Registry as the plugin module `tests.envs`.

Each env exists to exercise one part of the contract: blocking calls, coroutines, exceptions,
close() bookkeeping, and dataclass / attrs payload types.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import anyio.lowlevel
import attrs

import ecotone
from ecotone.plugins.counter import CounterAction, CounterObservation, CounterState
from ecotone.plugins.dilemma import DilemmaEnv

# --- slow: a blocking sync env (time.sleep), run in worker threads ---------------------------


class SleepAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    sleep: float = 0.0
    """Seconds the step blocks for (time.sleep)."""
    tag: str = ""
    """Echoed back, so a test can tell which request an answer belongs to."""


class SleepObservation(ecotone.Observation, kw_only=True):
    tag: str = ""
    steps: int = 0
    thread: int = 0
    """threading.get_ident() of the thread that ran the call."""


class SleepState(ecotone.State, kw_only=True):
    last_tag: str = ""


class SlowEnv(ecotone.Environment[SleepAction, SleepObservation, SleepState]):
    """Blocks in step for the action's `sleep` seconds."""

    name = "slow"

    def __init__(self) -> None:
        self._state = SleepState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, sleep: float = 0.0
    ) -> SleepObservation:
        time.sleep(sleep)
        self._state = SleepState(episode_id=episode_id)
        return SleepObservation(thread=threading.get_ident())

    def step(self, action: SleepAction) -> SleepObservation:
        time.sleep(action.sleep)
        self._state.step_count += 1
        self._state.last_tag = action.tag
        return SleepObservation(
            tag=action.tag,
            steps=self._state.step_count,
            thread=threading.get_ident(),
            reward=1.0,
        )

    def state(self) -> SleepState:
        return self._state


class InlineProbeEnv(SlowEnv):
    """SlowEnv declared inline: its calls run on the event loop thread."""

    name = "inline_probe"
    inline = True


# --- async_counter: every method a coroutine ------------------------------------------------


class AsyncCounterEnv(ecotone.AsyncEnvironment[CounterAction, CounterObservation, CounterState]):
    """The counter, with async reset/step/state/close that really suspend."""

    name = "async_counter"
    closes: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self._state = CounterState()

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, start: int = 0
    ) -> CounterObservation:
        await anyio.lowlevel.checkpoint()
        self._state = CounterState(episode_id=episode_id, count=start)
        return CounterObservation(count=start)

    async def step(self, action: CounterAction) -> CounterObservation:
        await anyio.lowlevel.checkpoint()
        self._state.step_count += 1
        self._state.count += action.delta
        return CounterObservation(count=self._state.count, reward=float(action.delta))

    async def state(self) -> CounterState:
        await anyio.lowlevel.checkpoint()
        return self._state

    async def load_state(self, state: CounterState) -> None:
        await anyio.lowlevel.checkpoint()
        self._state = state

    async def close(self) -> None:
        await anyio.lowlevel.checkpoint()
        AsyncCounterEnv.closes.append(self._state.episode_id or "")


# --- failing / broken: exceptions in every method -------------------------------------------


class FailAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    fail: bool = False


class FailingEnv(ecotone.Environment[FailAction, CounterObservation, CounterState]):
    """Raises ValueError in step when asked to, and RuntimeError in reset(fail=True)."""

    name = "failing"
    inline = True

    def __init__(self) -> None:
        self._state = CounterState()

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        fail: bool = False,
        type_error: bool = False,
    ) -> CounterObservation:
        if fail:
            raise RuntimeError("reset exploded")
        if type_error:  # a bug inside the env, worded like a bad argument
            raise TypeError("helper() missing 1 required positional argument: 'x'")
        self._state = CounterState(episode_id=episode_id)
        return CounterObservation(count=0)

    def step(self, action: FailAction) -> CounterObservation:
        if action.fail:
            raise ValueError("step exploded")
        self._state.step_count += 1
        self._state.count += 1
        return CounterObservation(count=self._state.count, reward=1.0)

    def state(self) -> CounterState:
        return self._state


class BrokenEnv(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
    """Cannot be constructed."""

    name = "broken"

    def __init__(self) -> None:
        raise RuntimeError("constructor exploded")

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> CounterObservation:  # pragma: no cover - never constructed
        return CounterObservation(count=0)

    def step(self, action: CounterAction) -> CounterObservation:  # pragma: no cover
        return CounterObservation(count=0)

    def state(self) -> CounterState:  # pragma: no cover
        return CounterState()


# --- closing: records every close() call ----------------------------------------------------


class ClosingEnv(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
    """A counter that records its instances and how often each was closed."""

    name = "closing"
    instances: ClassVar[list[ClosingEnv]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._state = CounterState()
        self.close_calls = 0
        with ClosingEnv._lock:
            ClosingEnv.instances.append(self)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id)
        return CounterObservation(count=0)

    def step(self, action: CounterAction) -> CounterObservation:
        self._state.step_count += 1
        self._state.count += action.delta
        return CounterObservation(count=self._state.count, reward=float(action.delta))

    def state(self) -> CounterState:
        return self._state

    def close(self) -> None:
        with ClosingEnv._lock:
            self.close_calls += 1


# --- dataclass- and attrs-typed envs --------------------------------------------------------


@dataclasses.dataclass
class MoveAction:
    dx: int
    dy: int = 0


@dataclasses.dataclass
class PositionObservation:
    x: int
    y: int
    reward: float | None = None
    done: bool = False
    truncated: bool = False


@dataclasses.dataclass
class PositionState:
    x: int = 0
    y: int = 0
    step_count: int = 0
    episode_id: str | None = None


class DataclassEnv(ecotone.Environment[MoveAction, PositionObservation, PositionState]):
    """A point on a grid, with dataclass payloads."""

    name = "dataclass_grid"
    inline = True

    def __init__(self) -> None:
        self._state = PositionState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> PositionObservation:
        self._state = PositionState(episode_id=episode_id)
        return PositionObservation(x=0, y=0)

    def step(self, action: MoveAction) -> PositionObservation:
        st = self._state
        st.x += action.dx
        st.y += action.dy
        st.step_count += 1
        return PositionObservation(x=st.x, y=st.y, reward=-1.0)

    def state(self) -> PositionState:
        return self._state

    def load_state(self, state: PositionState) -> None:
        self._state = state


@attrs.define
class TurnAction:
    degrees: int
    clockwise: bool = True


@attrs.define
class HeadingObservation:
    heading: int
    reward: float | None = None
    done: bool = False
    truncated: bool = False


@attrs.define
class HeadingState:
    heading: int = 0
    step_count: int = 0
    episode_id: str | None = None


class AttrsEnv(ecotone.Environment[TurnAction, HeadingObservation, HeadingState]):
    """A compass heading, with attrs payloads."""

    name = "attrs_compass"
    inline = True

    def __init__(self) -> None:
        self._state = HeadingState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> HeadingObservation:
        self._state = HeadingState(episode_id=episode_id)
        return HeadingObservation(heading=0)

    def step(self, action: TurnAction) -> HeadingObservation:
        sign = 1 if action.clockwise else -1
        self._state.heading = (self._state.heading + sign * action.degrees) % 360
        self._state.step_count += 1
        return HeadingObservation(heading=self._state.heading, reward=0.0)

    def state(self) -> HeadingState:
        return self._state

    def load_state(self, state: HeadingState) -> None:
        self._state = state


class RestoreFailsEnv(AttrsEnv):
    """A compass whose restore fails half way: the heading is loaded, then it raises."""

    name = "restore_fails"

    def load_state(self, state: HeadingState) -> None:
        self._state.heading = state.heading
        raise OSError("the saved heading is corrupt")


class Card(ecotone.Action):
    card: int


class CardsView(ecotone.Observation):
    hand: list[int] = []
    """This seat's hand (empty in the public view)."""
    table: list[list[int]] = []
    """The cards played, by round: [first seat's, second seat's]."""
    hand_sizes: dict[str, int] = {}
    scores: dict[str, int] = {}


class CardsState(ecotone.State):
    hands: dict[str, list[int]] = {}


class CardsEnv(ecotone.MultiAgentEnvironment[Card, CardsView, CardsState]):
    """A hidden-hand card game for two: each is dealt 3 cards from 1-20 (seeded); they take
    turns laying one (`north` leads); the higher card of a round scores. A seat sees its own
    hand only; everyone sees the cards laid."""

    name = "cards"
    seats = ("north", "south")
    inline = True

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> CardsView:
        import random

        deck = random.Random(seed).sample(range(1, 21), 6)
        self._hands = {"north": sorted(deck[:3]), "south": sorted(deck[3:])}
        self._table: list[list[int]] = []
        self._scores = {"north": 0, "south": 0}
        self._rewards = {"north": 0.0, "south": 0.0}
        self._steps = 0
        self._episode = episode_id
        return self.observe(None)

    def current_seat(self) -> str | None:
        if not any(self._hands.values()):
            return None
        return "north" if self._steps % 2 == 0 else "south"

    def step(self, seat: str, action: Card) -> None:
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

    def observe(self, seat: str | None) -> CardsView:
        over = not any(self._hands.values())
        return CardsView(
            hand=[] if seat is None else list(self._hands[seat]),
            table=[list(r) for r in self._table],
            hand_sizes={s: len(h) for s, h in self._hands.items()},
            scores=dict(self._scores),
            reward=None if seat is None else self._rewards[seat],
            done=over,
        )

    def state(self) -> CardsState:
        hands = {s: list(h) for s, h in self._hands.items()}
        return CardsState(episode_id=self._episode, step_count=self._steps, hands=hands)

    def render(self, seat: str | None) -> str:
        """The table, and `seat`'s hand (none in the public picture)."""
        hand = "" if seat is None else f"{seat} holds {self._hands[seat]}; "
        return f"{hand}on the table: {self._table}"


class ThreadedCardsEnv(CardsEnv):
    """`cards` in a worker thread, whose episode ends when a seat is lost."""

    name = "cards_threaded"
    inline = False
    seat_lost = "truncate"


class Bid(ecotone.Action):
    amount: int = 0


class BidsView(ecotone.Observation):
    round: int = 0
    bids: dict[str, int] = {}
    """Last round's bids (everyone sees them once the round is played)."""
    out: list[str] = []
    """The seats out of the game: silent past a round's deadline."""
    total: int = 0
    """This seat's own winnings (0 in the public view)."""


class BidsState(ecotone.State):
    totals: dict[str, int] = {}


class BidsEnv(ecotone.SimultaneousEnvironment[Bid, BidsView, BidsState]):
    """Three seats bid at once, three rounds; the highest bid wins it (ties: nobody). A seat
    silent past a round's deadline is out of the game (the env's rule); a bid above 10 is
    refused (the whole round starts over)."""

    name = "bids"
    seats = ("a", "b", "c")
    move_deadline = 30.0
    inline = True

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> BidsView:
        self._round = 0
        self._bids: dict[str, int] = {}
        self._out: list[str] = []
        self._totals = dict.fromkeys(self.seats, 0)
        self._rewards = dict.fromkeys(self.seats, 0.0)
        self._episode = episode_id
        return self.observe(None)

    def live_seats(self) -> tuple[str, ...]:
        live = tuple(s for s in self.seats if s not in self._out)
        return () if self._round >= 3 or len(live) < 2 else live

    def step(self, actions: dict[str, Bid]) -> None:
        if any(bid.amount > 10 for bid in actions.values()):
            raise ecotone.InvalidAction("a bid is 10 at most", field="amount")
        live = self.live_seats()
        self._out.extend(s for s in live if s not in actions)
        self._bids = {s: bid.amount for s, bid in actions.items()}
        self._rewards = dict.fromkeys(self.seats, 0.0)
        best = max(self._bids.values(), default=0)
        winners = [s for s, amount in self._bids.items() if amount == best]
        if len(winners) == 1:
            self._totals[winners[0]] += best
            self._rewards[winners[0]] = float(best)
        self._round += 1

    def observe(self, seat: str | None) -> BidsView:
        return BidsView(
            round=self._round,
            bids=dict(self._bids),
            out=list(self._out),
            total=0 if seat is None else self._totals[seat],
            reward=None if seat is None else self._rewards[seat],
            done=not self.live_seats(),
        )

    def state(self) -> BidsState:
        return BidsState(
            episode_id=self._episode, step_count=self._round, totals=dict(self._totals)
        )


class HastyBidsEnv(BidsEnv):
    """`bids` whose rounds wait a second for silent seats."""

    name = "bids_hasty"
    move_deadline = 1.0


class SlowStateBidsEnv(BidsEnv):
    """`bids` in a worker thread, whose `state()` takes two seconds (a call that holds the
    session past a round's deadline)."""

    name = "bids_threaded"
    inline = False
    move_deadline = 1.0

    def state(self) -> BidsState:
        time.sleep(2.0)
        return super().state()


class HastyDilemmaEnv(DilemmaEnv):
    """`dilemma` whose rounds wait a second for a silent seat."""

    name = "dilemma_hasty"
    move_deadline = 1.0


TEST_ENVS: dict[str, type] = {
    "slow": SlowEnv,
    "inline_probe": InlineProbeEnv,
    "async_counter": AsyncCounterEnv,
    "failing": FailingEnv,
    "broken": BrokenEnv,
    "closing": ClosingEnv,
    "dataclass_grid": DataclassEnv,
    "attrs_compass": AttrsEnv,
    "restore_fails": RestoreFailsEnv,
    "cards": CardsEnv,
    "cards_threaded": ThreadedCardsEnv,
    "bids": BidsEnv,
    "bids_hasty": HastyBidsEnv,
    "bids_threaded": SlowStateBidsEnv,
    "dilemma_hasty": HastyDilemmaEnv,
}


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return dict(TEST_ENVS)
