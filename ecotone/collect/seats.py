"""`ecotone collect` on a multi-agent env: a policy per seat (one policy for every seat is
self-play), each seat's episode its own actor's.

The run's session owner plays every seat (no seat key is handed out: one process collects).
Each move, the seat whose turn it is (every live seat of a round, for an env whose seats move
at once) is shown its own view, never another seat's, and its actor chooses; the moves go as
`play` (a round's together). A seat's view carries its reward since its last move (as
PettingZoo's `last()` does): its return is the sum of the rewards of the views it acted on,
and of its view when the episode ended. The recording holds one step per move, each naming
its `seat` (`ecotone.recording`'s `Episode.seats`). With `fork`, the episode's session is
forked after its first moves and each copy played on by actors of its own (`SeatedRun.fork`:
the moves and returns so far carried over).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ecotone.client.aio import AsyncEnvClient
from ecotone.client.errors import InvalidActionError
from ecotone.client.results import SeatResult
from ecotone.collect.protocol import Decision, Episode, Policy
from ecotone.recording.recorder import EpisodeWriter
from ecotone.specs import EnvInfo


@attrs.define
class SeatedRun:
    """One episode of a multi-agent env: its session, each seat's actor, where it stands."""

    client: AsyncEnvClient[Any, Any]
    info: EnvInfo
    actors: dict[str, Any]
    writer: EpisodeWriter
    returns: dict[str, float]
    moves: int = 0
    reason: str = ""
    done: bool = False
    truncated: bool = False
    last: dict[str, SeatResult[Any]] = attrs.field(factory=dict)
    """Each seat's view after the last moves."""
    on_decision: Callable[[Decision], None] = lambda decision: None
    """Told of a `Decision` as an actor returns it (collect records it before the move)."""
    first: Any = None
    """The episode's first (public) view, its reset's."""
    played: list[tuple[str, Any, Any, float]] = attrs.field(factory=list)
    """Every move recorded (seat, action, result, seconds): what the recordings of the forks
    made from here start with."""

    def fork(self, client: AsyncEnvClient[Any, Any], actors: dict[str, Any]) -> SeatedRun:
        """A copy of this run for `client`, a fork of its session, played by `actors` from
        where this one stands: its moves and each seat's return so far carried over; the
        recording is the caller's (`writer`, here this run's until replaced)."""
        return SeatedRun(
            client,
            self.info,
            actors,
            self.writer,
            dict(self.returns),
            moves=self.moves,
            last=dict(self.last),
            first=self.first,
            played=list(self.played),
        )


def seat_policies(policy: Policy | Mapping[str, Policy], seats: list[str]) -> dict[str, Policy]:
    """Each seat's policy: one for all (self-play), or one per seat, every seat named.

    Raises:
        ValueError: A seat without a policy, or a policy for a seat the env does not have.
    """
    if not isinstance(policy, Mapping):
        return dict.fromkeys(seats, policy)
    unknown = sorted(set(policy) - set(seats))
    missing = [seat for seat in seats if seat not in policy]
    if unknown or missing:
        raise ValueError(
            f"a policy per seat names the env's seats ({', '.join(seats)})"
            + (f"; no seat {', '.join(map(repr, unknown))}" if unknown else "")
            + (f"; none for {', '.join(map(repr, missing))}" if missing else "")
        )
    return dict(policy)


def actors(policies: Mapping[str, Policy], episode: Episode) -> dict[str, Any]:
    """An actor per seat for one episode, each told its seat (`Episode.seat`)."""
    return {seat: p.actor(attrs.evolve(episode, seat=seat)) for seat, p in policies.items()}


async def play_seats(run: SeatedRun, limit: int, refusals_limit: int | None = None) -> None:
    """Play `run` to its end (done, truncated, a policy's None, `limit` moves in all, or
    `refusals_limit` refused moves in a row: `limit` by default)."""
    client = run.client
    view = await client.observe()
    refusals = 0
    most_refused = limit if refusals_limit is None else refusals_limit
    while True:
        due = list(view.acting) if run.info.simultaneous else [view.turn] if view.turn else []
        if not due:
            run.done, run.truncated = view.result.done, view.result.truncated
            run.reason = "done" if run.done else "truncated"
            break
        if run.moves >= limit or refusals >= most_refused:
            run.reason = "max_steps"
            break
        actions: dict[str, Any] = {}
        for seat in due:
            own = await client.observe(seat)
            run.returns[seat] += float(own.result.reward or 0.0)
            action = await run.actors[seat].act(own.result.observation)
            if isinstance(action, Decision):
                run.on_decision(action)
                action = action.action
            if action is None:
                run.reason = "policy"
                return
            actions[seat] = action
        started = time.perf_counter()
        try:
            if run.info.simultaneous:
                views = await client.play_round(actions)
            else:
                ((seat, action),) = actions.items()
                views = {seat: await client.play(action, seat=seat)}
        except InvalidActionError as exc:
            refusals += 1
            for seat, action in actions.items():
                await run.actors[seat].refused(action, exc.message)
            continue
        refusals = 0
        took = (time.perf_counter() - started) / len(views)
        for seat, seat_view in views.items():
            _moved(run, seat, actions[seat], seat_view, took)
        view = next(iter(views.values()))
    await _final_views(run)


def _moved(run: SeatedRun, seat: str, action: Any, view: SeatResult[Any], seconds: float) -> None:
    run.moves += 1
    run.last[seat] = view
    run.writer.move(seat, action, view.result, seconds)
    run.played.append((seat, action, view.result, seconds))


async def _final_views(run: SeatedRun) -> None:
    """The episode ended: each seat gets the reward its final view holds (what came since
    its last move: a loss on the winner's move, its own move's payoff)."""
    if not (run.done or run.truncated):
        return
    for seat in run.actors:
        final = await run.client.observe(seat)
        run.returns[seat] += float(final.result.reward or 0.0)
        run.last[seat] = final
