"""What a multi-agent session holds: its env behind the seats, and who sits where.

Rules:

* A multi-agent env (`ecotone.MultiAgentEnvironment`, `ecotone.SimultaneousEnvironment`) is
  held by its session as a `SeatedEnv`: after every reset and every move (a simultaneous
  env's: every round), in the same env call, it reads whose turn it is (or which seats are
  live) and every seat's view and the public view, so the engine answers `observe` and checks
  turns without calling the env again, and never on its own thread for a threaded env. An
  async env's (`AsyncMultiAgentEnvironment`, `AsyncSimultaneousEnvironment`) is held as an
  `AsyncSeatedEnv`: the same, every method a coroutine its driver awaits.
* A plain `step` of a seated session is refused (`invalid_action`): a move names its seat
  (`play`). So the single-agent step path carries no seat logic at all.
* `SeatTable` is the engine's side: the seat keys, which connection holds which seat, the
  spectators, the seats whose connection dropped (held since when), the `observe`s waiting
  for a turn and a simultaneous round's moves waiting for the others (`Move`), which both
  wait outside the session's queue.
* `SeatTable.log` keeps the episode's events (reset, every move and round), each with every
  seat's view after it; a seat reads its own trajectory from it (`Seen`: its own moves and
  views only, never another seat's).
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable
from typing import Any, Final

import attrs

from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.states import ends_episode


class _Held:
    """What the engine reads of a multi-agent env, kept after each reset and move."""

    __slots__ = ("acting", "env", "public", "seats", "simultaneous", "turn", "views")

    def __init__(self, env: Any, seats: tuple[str, ...], simultaneous: bool = False) -> None:
        self.env = env
        self.seats = seats
        self.simultaneous = simultaneous
        self.turn: str | None = None
        """Whose turn it is, as the env said after the last reset or move (None for a
        simultaneous env)."""
        self.acting: tuple[str, ...] = ()
        """The seats that move next: whose turn it is, or a simultaneous env's live seats
        (none once the episode is over)."""
        self.views: dict[str, Any] = {}
        """Each seat's view after the last reset or move."""
        self.public: Any = None
        """The public view after the last reset or move."""

    def _seen(self, acting: Any, views: dict[str, Any], public: Any) -> None:
        """Keep what the env said after a reset or a move: `acting` its `live_seats()` (a
        simultaneous env) or its `current_seat()`, each seat's view and the public one.

        Raises:
            ValueError: The env named a seat it does not have.
        """
        turn: str | None = None
        if self.simultaneous:
            acting = tuple(acting)
            strange = [seat for seat in acting if seat not in self.seats]
            if strange:
                raise ValueError(f"live_seats() named {strange!r}, not among {list(self.seats)}")
            if ends_episode(public):
                acting = ()
        else:
            turn = acting
            if turn is not None and turn not in self.seats:
                raise ValueError(f"current_seat() returned {turn!r}, not one of {list(self.seats)}")
            acting = () if turn is None else (turn,)
        self.views = views
        self.public = public
        self.turn = turn
        self.acting = acting


class SeatedEnv(_Held):
    """A multi-agent env as its session holds it (see the module's rules).

    Args:
        env: The env instance.
        seats: Its seats.
        simultaneous: Its seats move at once (`SimultaneousEnvironment`).
    """

    __slots__ = ()

    def _look(self) -> None:
        env = self.env
        acting = env.live_seats() if self.simultaneous else env.current_seat()
        views = {seat: env.observe(seat) for seat in self.seats}
        self._seen(acting, views, env.observe(None))

    def reset(self, **kwargs: Any) -> Any:
        """The env's reset; its public view."""
        self.env.reset(**kwargs)
        self._look()
        return self.public

    def play(self, seat: str, action: Any) -> Any:
        """The move of `seat`; its view after it."""
        self.env.step(seat, action)
        self._look()
        return self.views[seat]

    def play_round(self, actions: dict[str, Any]) -> dict[str, Any]:
        """A simultaneous env's round (the moves made in time); every seat's view after it."""
        self.env.step(actions)
        self._look()
        return self.views

    def step(self, action: Any) -> Any:
        """A plain `step`: refused, a move names its seat."""
        raise _unseated(self.seats)

    def state(self) -> Any:
        return self.env.state()

    def snapshot(self) -> Any:
        """The env's own snapshot (the views are read again after a restore)."""
        return self.env.snapshot()

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        self.env.restore(data, episode_id=episode_id)
        self._look()

    def load_state(self, state: Any) -> None:
        self.env.load_state(state)
        self._look()

    def render(self) -> Any:
        return self.env.render()

    def list_tools(self) -> Any:
        return self.env.list_tools()

    def call_tool(self, name: str, arguments: Any) -> Any:
        return self.env.call_tool(name, arguments)

    def close(self) -> None:
        self.env.close()


class AsyncSeatedEnv(_Held):
    """A multi-agent env whose methods are coroutines, as its session holds it: `SeatedEnv`'s
    rules, every method a coroutine the driver awaits (`Mode.AWAIT`), as an `AsyncEnvironment`'s
    are. After a reset or a move it awaits `current_seat()` (or `live_seats()`) and every view
    in the same call, so the engine reads `turn`, `acting`, `views` and `public` as it does
    `SeatedEnv`'s.

    Args:
        env: The env instance.
        seats: Its seats.
        simultaneous: Its seats move at once (`AsyncSimultaneousEnvironment`).
    """

    __slots__ = ()

    async def _look(self) -> None:
        env = self.env
        acting = await (env.live_seats() if self.simultaneous else env.current_seat())
        views = {seat: await env.observe(seat) for seat in self.seats}
        self._seen(acting, views, await env.observe(None))

    async def reset(self, **kwargs: Any) -> Any:
        """The env's reset; its public view."""
        await self.env.reset(**kwargs)
        await self._look()
        return self.public

    async def play(self, seat: str, action: Any) -> Any:
        """The move of `seat`; its view after it."""
        await self.env.step(seat, action)
        await self._look()
        return self.views[seat]

    async def play_round(self, actions: dict[str, Any]) -> dict[str, Any]:
        """A simultaneous env's round (the moves made in time); every seat's view after it."""
        await self.env.step(actions)
        await self._look()
        return self.views

    async def step(self, action: Any) -> Any:
        """A plain `step`: refused, a move names its seat."""
        raise _unseated(self.seats)

    async def state(self) -> Any:
        return await self.env.state()

    async def snapshot(self) -> Any:
        """The env's own snapshot (awaited when it is a coroutine)."""
        return await _maybe(self.env.snapshot())

    async def restore(self, data: bytes, *, episode_id: str | None) -> None:
        await _maybe(self.env.restore(data, episode_id=episode_id))
        await self._look()

    async def load_state(self, state: Any) -> None:
        await _maybe(self.env.load_state(state))
        await self._look()

    async def render(self) -> Any:
        return await self.env.render()

    async def list_tools(self) -> Any:
        return await _maybe(self.env.list_tools())

    async def call_tool(self, name: str, arguments: Any) -> Any:
        return await _maybe(self.env.call_tool(name, arguments))

    async def close(self) -> None:
        await self.env.close()


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _unseated(seats: tuple[str, ...]) -> InvalidAction:
    return InvalidAction(
        "this env has seats: a move names its seat (`play`, or a joined seat's client)",
        seats=list(seats),
    )


def seated_factory(
    factory: Callable[[], Any],
    seats: tuple[str, ...],
    simultaneous: bool = False,
    asynchronous: bool = False,
) -> Callable[[], Any]:
    """Makes a session's env: `factory()` behind its seats (`asynchronous`: its methods are
    coroutines)."""
    held = AsyncSeatedEnv if asynchronous else SeatedEnv

    def make() -> SeatedEnv | AsyncSeatedEnv:
        return held(factory(), seats, simultaneous)

    return make


LOG_KEPT: Final = 10_000
"""Events a seated session's log keeps (`SeatTable.log`): an episode's latest; a longer
one's first are dropped (each event's `index` says where it stands)."""

LOG_STARTS: Final = ("reset", "restore", "start")
"""The kinds of event a log starts again from: a reset, a restore, or (`start`) the seats of
a session that was already running when they were first asked for (a fork's copy)."""


@attrs.frozen(slots=True)
class Logged:
    """One event of a seated session's episode, as every seat saw it (`SeatTable.log`). The
    engine keeps it; what one seat may read of it is `Seen`."""

    kind: str
    """`reset`, `restore`, `start` (see `LOG_STARTS`), `move` (a seat's) or `round` (a
    simultaneous env's)."""
    index: int
    """Moves since the log's start (0 for the start itself)."""
    mover: str | None
    """The seat that moved (a `move`); None otherwise."""
    actions: dict[str, Any]
    """The moves made: a move's one, a round's of each seat that moved in time."""
    views: dict[str, Any]
    """Each seat's view after it (the env's objects, as `SeatedEnv.views` held them)."""
    public: Any
    """The public view after it."""
    time: float
    """When it happened (UNIX seconds)."""


@attrs.frozen(slots=True)
class Seen:
    """One event of the episode as one seat may see it: its own move, never another's; its
    own view, never another's (a spectator's: the public view, and no move)."""

    kind: str
    index: int
    mover: str | None
    """The seat that moved (whose turn it was is public: every view says it)."""
    moved: bool
    """This seat moved in it (its move is `action`)."""
    action: Any
    view: Any
    time: float

    @classmethod
    def of(cls, logged: Logged, seat: str | None) -> Seen:
        """What `seat` (None: a spectator) may see of `logged`."""
        moved = seat is not None and seat in logged.actions
        return cls(
            kind=logged.kind,
            index=logged.index,
            mover=logged.mover,
            moved=moved,
            action=logged.actions[seat] if seat is not None and moved else None,
            view=logged.public if seat is None else logged.views.get(seat),
            time=logged.time,
        )


@attrs.define(slots=True, eq=False)
class Waiter:
    """An `observe` waiting: for `seat`'s turn (or the episode's end), or (seat None) for
    the next move after move number `after`."""

    peer: Any
    rid: Any
    seat: str | None
    after: int


@attrs.define(slots=True, eq=False)
class Move:
    """A `play` of a simultaneous env's seat, waiting for its round: answered after it."""

    peer: Any
    rid: Any
    action: Any


@attrs.define(slots=True, eq=False)
class SeatTable:
    """Who sits where in one multi-agent session (the engine's side)."""

    seats: tuple[str, ...]
    rule: str
    """The env's `seat_lost`: `wait` or `truncate`."""
    keys: dict[str, str] = attrs.field(factory=dict)
    """Seat -> key (empty until the owner asks for them)."""
    spectate: str = ""
    holders: dict[str, Any] = attrs.field(factory=dict)
    """Seat -> the owner (connection) holding it."""
    spectators: set[Any] = attrs.field(factory=set)
    dropped: dict[str, float] = attrs.field(factory=dict)
    """Seat -> when its connection dropped (held for it since)."""
    renewed: dict[str, float] = attrs.field(factory=dict)
    """Seat -> when its lease was last renewed, for each seat taken with `join` and not
    released yet (`leases.py`)."""
    lost: list[str] = attrs.field(factory=list)
    """Seats released as their lease ran out, in the episode the rule ended."""
    waiters: list[Waiter] = attrs.field(factory=list)
    moves: int = 0
    """Moves and resets so far (what a waiting public `observe` counts from)."""
    moved: dict[str, Move] = attrs.field(factory=dict)
    """A simultaneous env's round: the moves made so far, by seat, waiting for the others."""
    deadline: float | None = None
    """When the round is played with the moves it has (the engine's clock; None: no
    deadline, or no move yet)."""
    overdue: bool = False
    """The round's deadline passed while a call held the session: played once it is free."""
    log: collections.deque[Logged] = attrs.field(factory=lambda: collections.deque(maxlen=LOG_KEPT))
    """The episode so far, event by event (the latest `LOG_KEPT`): what a seat's trajectory
    is read from (`Seating.seat_trajectory`)."""

    def held_by(self, owner: Any) -> list[str]:
        """The seats `owner` holds, in seat order."""
        return [seat for seat in self.seats if self.holders.get(seat) is owner]

    def admits(self, owner: Any) -> bool:
        """`owner` holds a seat or spectates."""
        return owner in self.spectators or any(h is owner for h in self.holders.values())
