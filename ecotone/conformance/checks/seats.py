"""Multi-agent envs: turns, each seat's view, seeded play, and a seat whose connection dropped.

Each check plays the env as its users do: the session's owner resets it and hands out the
seat keys, and every seat is joined from a connection of its own (a spectator from another).
Moves come from the env's `sample_action(rng, seat)` in process; else, for a seat whose move
is one integer field and whose view carries an action mask (PettingZoo's convention:
`action_mask` in the view, or in its `obs` for the `pettingzoo:` bridge), from the indexes
the mask allows; else from the seat's action schema (drawn again while the env refuses them).
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

from ecotone.client.errors import EcotoneError, ServerError
from ecotone.client.results import SeatResult
from ecotone.conformance.expect import expect, fail, same_trajectory, show, without_episode_id
from ecotone.conformance.generate import generate, object_schema
from ecotone.conformance.registry import check
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import REDRAWS, Runner
from ecotone.specs import Error, ErrorCode, Play

PLIES = 40
"""Moves a check plays at most (the episode may end first)."""


class Table:
    """One seated session: its owner, its keys, and a connection holding each seat."""

    def __init__(self, r: Runner) -> None:
        self.r = r
        self.owner = r.open()
        self.connections: list[Any] = []
        self.keys = self.owner.seat_keys()
        self.seats: dict[str, Any] = {}

    def sit(self) -> None:
        """Join every seat from a connection of its own."""
        for seat, key in self.keys.keys.items():
            self.r.doing = f"joining seat {seat!r} from another connection"
            self.seats[seat] = self.connect().join(key)

    def connect(self) -> Any:
        connection = self.r.target.connect()
        self.connections.append(connection)
        return connection

    def close(self) -> None:
        for connection in self.connections:
            with contextlib.suppress(EcotoneError, TimeoutError):
                connection.close()
        with contextlib.suppress(EcotoneError, TimeoutError):
            self.owner.close()


@contextlib.contextmanager
def table(r: Runner, *, seated: bool = True) -> Iterator[Table]:
    """A session with its seats joined (`seated`), closed after."""
    t = Table(r)
    try:
        if seated:
            t.sit()
        yield t
    finally:
        t.close()


def _move(r: Runner, t: Table, seat: str, rng: random.Random, label: str) -> tuple[Any, Any]:
    """A move of `seat` by its holder that the env accepts: `(action, view)`."""
    holder = t.seats[seat]
    refusal: ServerError | None = None
    for _ in range(REDRAWS):
        action = r.target.sample_seat_action(t.owner, seat, rng)
        if action is None:
            action = _masked(r, seat, holder.observe(), rng)
        sampled = action is not None
        if not sampled:
            schema = r.info.seat_schemas.get(seat, {}).get("action") or r.info.action_schema
            action = generate(schema, rng)
        r.doing = f"{label}: seat {seat!r} plays {show(action)}"
        try:
            return action, holder.play(action)
        except ServerError as exc:
            if exc.code != ErrorCode.INVALID_ACTION or sampled:
                raise
            refusal = exc
    assert refusal is not None
    raise CheckSkipped(
        f"cannot choose a move seat {seat!r} may make: {REDRAWS} drawn from its action schema "
        f"were refused at {label} (last: {refusal.message[:100]}); give the env a "
        "sample_action(rng, seat) and check it in process"
    )


def _play(r: Runner, t: Table, seed: int, out_of_turn: bool) -> list[Any]:
    """A seeded episode, each seat moving in its turn (every live seat in each round, for an
    env whose seats move at once): every move and view, in order. With `out_of_turn`, every
    move is first tried by the seats whose turn it is not, which must change nothing (in a
    round: each move but the round's last is sent twice, and the copy refused)."""
    rng = random.Random(seed)
    first = r.reset(t.owner, seed=seed)
    seen: list[Any] = [("reset", first.observation)]
    for ply in range(1, PLIES + 1):
        r.doing = f"ply {ply}: reading whose turn it is"
        now = t.owner.observe()
        if r.info.simultaneous:
            if not now.acting:
                break
            actions, views = _round(r, t, list(now.acting), rng, ply, out_of_turn)
            seen.append((actions, {seat: _plain(view) for seat, view in views.items()}))
            ended = any(v.result.done or v.result.truncated for v in views.values())
        else:
            turn = now.turn
            if turn is None:
                break
            if out_of_turn:
                _refused_out_of_turn(r, t, turn, rng, ply)
            action, view = _move(r, t, turn, rng, f"ply {ply}")
            what = f"the view answering ply {ply}"
            expect(view.seat == turn, what, repr(turn), repr(view.seat))
            seen.append((turn, action, _plain(view)))
            ended = view.result.done or view.result.truncated
        if ended:
            break
    return seen


def _round(
    r: Runner, t: Table, acting: list[str], rng: random.Random, ply: int, twice: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One round of an env whose seats move at once, every live seat's move sent together by
    the owner, whose seats are not joined (each move waits for the round: one connection of
    this blocking client sends them all at once); with `twice`, each seat's move but the
    last's goes twice and the second must be `not_your_turn`. The moves and each seat's view
    after the round."""
    core = t.owner.connection.core
    for _ in range(REDRAWS):
        actions = {seat: _seat_action(r, t, seat, rng) for seat in acting}
        frames, seats = [], []
        last = acting[-1]  # its move plays the round: a copy after it would be the next one's
        for seat, action in actions.items():
            for _copy in range(2 if twice and seat != last else 1):
                raw = core.raw(action)
                frames.append(
                    Play(id=core.next_id(), session=t.owner.session_id, action=raw, seat=seat)
                )
                seats.append(seat)
        r.doing = f"round {ply}: {show(actions)}{' (moves sent twice)' if twice else ''}"
        answers = t.owner.connection.request_all(frames)
        refused = [a for a in answers if isinstance(a, Error)]
        if (
            any(a.code == ErrorCode.INVALID_ACTION for a in refused)
            and not r.target.has_sample_action
        ):
            continue  # the env refused the round: draw the moves again
        views: dict[str, Any] = {}
        for seat, answer in zip(seats, answers, strict=True):
            if seat in views:
                what = f"seat {seat!r}'s second move in round {ply}"
                code = answer.code if isinstance(answer, Error) else "a move taken"
                expect(code == ErrorCode.NOT_YOUR_TURN, what, "not_your_turn", str(code))
            elif isinstance(answer, Error):
                fail(
                    f"seat {seat!r}'s move in round {ply}",
                    "its view",
                    f"{answer.code}: {answer.message}",
                )
            else:
                views[seat] = t.owner._seat_result(answer)
                what = f"the view answering seat {seat!r}'s move"
                expect(views[seat].seat == seat, what, repr(seat), repr(views[seat].seat))
        return actions, views
    raise CheckSkipped(
        f"cannot choose moves the env accepts: {REDRAWS} rounds drawn from the action schemas "
        f"were refused at round {ply}; give the env a sample_action(rng, seat) and check it "
        "in process"
    )


def _seat_action(r: Runner, t: Table, seat: str, rng: random.Random) -> Any:
    action = r.target.sample_seat_action(t.owner, seat, rng)
    if action is None:
        action = _masked(r, seat, t.owner.observe(seat), rng)
    if action is None:
        schema = r.info.seat_schemas.get(seat, {}).get("action") or r.info.action_schema
        action = generate(schema, rng)
    return action


def _masked(r: Runner, seat: str, view: SeatResult[Any], rng: random.Random) -> Any | None:
    """A move from the action mask in `seat`'s view (`action_mask`, or `obs.action_mask`),
    when its move is one integer field: `{field: an index the mask allows}`; None otherwise
    (no mask, a mask with nothing allowed, or a move of another shape)."""
    data = view.result.observation
    inner = data.get("obs") if isinstance(data, dict) else None
    mask = data.get("action_mask") if isinstance(data, dict) else None
    if mask is None and isinstance(inner, dict):
        mask = inner.get("action_mask")
    if not isinstance(mask, list):
        return None
    schema = r.info.seat_schemas.get(seat, {}).get("action") or r.info.action_schema
    props = object_schema(schema).get("properties", {})
    fields = [name for name in props if name != "metadata"]
    if len(fields) != 1 or object_schema(props[fields[0]], schema).get("type") != "integer":
        return None
    allowed = [i for i, bit in enumerate(mask) if bit]
    return {fields[0]: rng.choice(allowed)} if allowed else None


def _refused_out_of_turn(r: Runner, t: Table, turn: str, rng: random.Random, ply: int) -> None:
    before = without_episode_id(r.state(t.owner))
    for other in t.seats:
        if other == turn:
            continue
        schema = r.info.seat_schemas.get(other, {}).get("action") or r.info.action_schema
        action = r.target.sample_seat_action(t.owner, turn, rng) or generate(schema, rng)
        r.doing = f"ply {ply}: seat {other!r} plays out of turn ({turn!r}'s)"
        try:
            t.seats[other].play(action)
        except ServerError as exc:
            expect(
                exc.code == ErrorCode.NOT_YOUR_TURN,
                f"seat {other!r}'s move in {turn!r}'s turn (ply {ply})",
                "not_your_turn",
                f"{exc.code}: {exc.message}",
            )
            expect(
                exc.details.get("turn") == turn,
                "not_your_turn's details",
                f"turn = {turn!r}",
                show(exc.details),
            )
        else:
            fail(f"seat {other!r}'s move in {turn!r}'s turn (ply {ply})", "not_your_turn", "ok")
        after = without_episode_id(r.state(t.owner))
        expect(after == before, "the state after a refused move", show(before), show(after))


def _plain(view: SeatResult[Any]) -> dict[str, Any]:
    result = view.result
    return {
        "observation": result.observation,
        "reward": result.reward,
        "done": result.done,
        "truncated": result.truncated,
        "turn": view.turn,
    }


@check("seat_turns", seated=True)
def check_seat_turns(r: Runner) -> str:
    """a move before reset is reset_required; a move out of turn is not_your_turn naming whose
    turn it is and changes nothing; each seat moves in its turn, answered with its own view

    Raises:
        CheckFailed: a move out of turn was taken or refused otherwise, or changed the state;
            a move before reset was not refused with reset_required; a move was answered with
            another seat's view.
        CheckSkipped: no move the env accepts could be drawn.
    """
    at_once = r.info.simultaneous  # the owner moves every seat of a round (see `_round`)
    with table(r, seated=not at_once) as t:
        seat = next(iter(t.keys.keys))
        r.doing = f"seat {seat!r} plays before any reset"
        mover = functools.partial(t.owner.play, seat=seat) if at_once else t.seats[seat].play
        try:
            mover(generate(r.info.action_schema, random.Random(0)))
        except ServerError as exc:
            expect(
                exc.code == ErrorCode.RESET_REQUIRED,
                "a move before reset",
                "reset_required",
                f"{exc.code}: {exc.message}",
            )
        else:
            fail("a move before reset", "reset_required", "ok")
        played = _play(r, t, r.seed, out_of_turn=True)
    if at_once:
        return f"{len(played) - 1} rounds, each move but the last sent twice (the copy refused)"
    return f"{len(played) - 1} moves, each tried out of turn by every other seat first"


@check("seat_views", seated=True)
def check_seat_views(r: Runner) -> str:
    """a seat's holder reads its own view only, a spectator the public view only and cannot
    move; the owner reads every view, each the same as its holder's

    Raises:
        CheckFailed: a holder read another seat's view, or a spectator a seat's view or made a
            move; a view read by the owner differs from its holder's.
    """
    with table(r) as t:
        r.reset(t.owner, seed=r.seed)
        spectator = t.connect().join(t.keys.spectate)
        public = spectator.observe()
        expect(public.seat is None, "the spectator's view", "the public view", repr(public.seat))
        for seat, holder in t.seats.items():
            r.doing = f"seat {seat!r} reads its own view, and the owner reads it"
            own, owners = _plain(holder.observe()), _plain(t.owner.observe(seat))
            expect(
                own == owners,
                f"seat {seat!r}'s view as the owner reads it",
                show(own),
                show(owners),
            )
            for other in t.seats:
                if other != seat:
                    what = f"seat {seat!r} reads {other!r}'s view"
                    _forbidden(r, what, holder.observe, other)
            _forbidden(r, f"the spectator reads {seat!r}'s view", spectator.observe, seat)
            action = generate(r.info.action_schema, random.Random(1))
            what = f"the spectator moves for {seat!r}"
            _forbidden(r, what, functools.partial(spectator.play, seat=seat), action)
    return f"{len(t.seats)} seats and a spectator"


def _forbidden(r: Runner, what: str, call: Callable[..., Any], *args: Any) -> None:
    r.doing = what
    try:
        call(*args)
    except ServerError as exc:
        expect(exc.code == ErrorCode.FORBIDDEN, what, "forbidden", f"{exc.code}: {exc.message}")
    else:
        fail(what, "forbidden", "ok")


@check("seat_determinism", needs=("seat_turns",), seated=True)
def check_seat_determinism(r: Runner) -> str:
    """the same seed and the same moves give every seat the same views, on a fresh session

    Raises:
        CheckFailed: a view of the replayed episode differs from the first play's.
        CheckSkipped: no move the env accepts could be drawn.
    """
    runs = []
    for _ in range(2):
        with table(r, seated=not r.info.simultaneous) as t:
            runs.append(_play(r, t, r.seed + 1, out_of_turn=False))
    labels = [f"move {i}" if i else "reset" for i in range(len(runs[0]))]
    same_trajectory(runs[0], runs[1], labels, f"seed {r.seed + 1}, played again on a new session")
    return f"{len(runs[0]) - 1} moves replayed"


@check("seat_loss", needs=("seat_turns",), seated=True)
def check_seat_loss(r: Runner) -> str:
    """a seat is held by one connection at a time: a second join is seat_taken; once its
    connection closes the same key takes the seat back and the episode goes on; another
    session of the env is untouched

    Raises:
        CheckFailed: a second join of a held seat was not refused with seat_taken; the key
            did not take back a seat whose connection closed; the episode or another
            session's state changed.
    """
    with table(r) as t, table(r, seated=False) as bystander:
        r.reset(bystander.owner, seed=r.seed + 2)
        untouched = without_episode_id(r.state(bystander.owner))
        r.reset(t.owner, seed=r.seed)
        seat, key = next(iter(t.keys.keys.items()))
        r.doing = f"joining seat {seat!r}, held by another live connection"
        try:
            t.connect().join(key)
        except ServerError as exc:
            expect(exc.code == ErrorCode.SEAT_TAKEN, "a second join", "seat_taken", exc.code)
        else:
            fail(f"a second join of seat {seat!r}", "seat_taken", "joined")
        before = without_episode_id(r.state(t.owner))
        r.doing = f"closing the connection that holds seat {seat!r}"
        holder_connection = t.connections[0]
        holder_connection.close()
        r.doing = f"taking seat {seat!r} back with its key"
        again = t.connect().join(key)
        expect(again.seat == seat, "the seat taken back", repr(seat), repr(again.seat))
        view = again.observe()
        expect(
            not view.lost, "the episode after the seat was taken back", "going on", show(view.lost)
        )
        after = without_episode_id(r.state(t.owner))
        expect(after == before, "the state after the seat was dropped", show(before), show(after))
        now = without_episode_id(r.state(bystander.owner))
        expect(now == untouched, "another session's state", show(untouched), show(now))
    return f"seat {seat!r} dropped and taken back"
