"""step_columns, where the server lists it: the same answers as step_many by position."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from ecotone.client.errors import CapacityError, EcotoneError
from ecotone.client.sync import EnvClient
from ecotone.conformance.expect import answer, difference, expect, fail, show, without_episode_id
from ecotone.conformance.registry import check
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import Runner
from ecotone.specs import (
    Error,
    ErrorCode,
    Hello,
    ObservationFrame,
    Ping,
    Pong,
    Reset,
    ResetArgs,
    Response,
    StepColumns,
    StepColumnsResult,
    StepItem,
    StepMany,
    StepManyResult,
    Welcome,
)

_ROUNDS: Final = 4
"""How many step_columns `step_columns` compares with step_many (then one that resets a
position)."""

_OPENENV = "OpenEnv's protocol has no step_columns"
_HOW_MANY = {2: "two", 4: "four"}


def _require_columns(r: Runner) -> list[str]:
    """The features the server lists in its `welcome`.

    Raises:
        CheckFailed: hello is not answered with a welcome.
        CheckSkipped: the features do not list step_columns.
    """
    r.doing = "asking for the server's features (hello)"
    welcome = r.request(Hello(id=r.next_id()))
    if not isinstance(welcome, Welcome):
        fail("the answer to hello", "a welcome frame", answer(welcome))
    if "step_columns" not in welcome.features:
        raise CheckSkipped("the server does not list step_columns in its welcome's features")
    return list(welcome.features)


@contextlib.contextmanager
def _sessions(r: Runner, n: int) -> Iterator[list[EnvClient[Any, Any]]]:
    """`n` sessions open at once, closed on the way out.

    Raises:
        CheckSkipped: the server holds fewer than `n` sessions at once (a server may: it is
            not wrong for it).
    """
    clients: list[EnvClient[Any, Any]] = []
    try:
        for _ in range(n):
            try:
                clients.append(r.open())
            except CapacityError as exc:
                raise CheckSkipped(
                    f"the check holds {_HOW_MANY[n]} sessions at once and the server allows "
                    f"fewer: {exc}"
                ) from exc
        yield clients
    finally:
        for client in clients:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()


def _pair_seeds(r: Runner) -> tuple[int, int]:
    """The seeds of sessions A and B: the first two of the settings."""
    seeds = r.settings.seeds
    return seeds[0], seeds[1] if len(seeds) > 1 else seeds[0] + 1


def _names(ids: list[str]) -> dict[str, str]:
    """Session ids as the positions' names (`<session A>`, `<session B>`), so that the
    answers of two pairs of sessions compare."""
    return {sid: f"<session {'AB'[j]}>" for j, sid in enumerate(ids)}


def _reference_answer(
    r: Runner,
    features: list[str],
    ids: list[str],
    actions: list[Any],
    resets: list[int],
    reset: ResetArgs | None,
) -> Response:
    """What the step_many of a step_columns' items answers: `ids` stepped with `actions`, the
    positions of `resets` reset with `reset`. Where the server does not list step_many.reset,
    a step_many of the steps and a reset frame per reset, put back in position.

    Raises:
        CheckFailed: that step_many is not answered with a step_many_result, or a reset
            frame with an observation or an error.
    """
    raw = r.target.connection.core.raw
    if not resets or "step_many.reset" in features:
        r.doing = "sending the step_many of the same items"
        items = [
            StepItem(session=sid, reset=reset)
            if j in resets
            else StepItem(session=sid, action=raw(actions[j]))
            for j, sid in enumerate(ids)
        ]
        return r.request(StepMany(id=r.next_id(), steps=items))
    assert reset is not None
    steps = [
        StepItem(session=sid, action=raw(actions[j]))
        for j, sid in enumerate(ids)
        if j not in resets
    ]
    step = r.request(StepMany(id=r.next_id(), steps=steps))
    if not isinstance(step, StepManyResult):
        fail("the answer to a step_many", "a step_many_result", answer(step))
    results = list(step.results)
    for j in sorted(resets):  # the reset as a reset frame
        alone = r.request(
            Reset(id=r.next_id(), session=ids[j], seed=reset.seed, options=reset.options)
        )
        if not isinstance(alone, ObservationFrame | Error):
            fail("the answer to a reset", "an observation", answer(alone))
        results.insert(j, alone)
    return StepManyResult(id=step.id, results=results)


def _as_items(response: StepColumnsResult) -> list[ObservationFrame | Error]:
    """A step_columns_result as the step_many_result items it stands for (no session ids)."""
    return [
        response.errors.get(j)
        or ObservationFrame(session="", observation=obs, task=response.tasks.get(j))
        for j, obs in enumerate(response.observations)
    ]


def item_outcome(r: Runner, item: ObservationFrame | Error, names: dict[str, str]) -> Any:
    """One item's outcome, comparable across sessions: its observation and task, or its
    error's code, session and details, the session ids named as `names` says (not its message:
    a server may word the same error for a step_columns and a step_many differently)."""
    if isinstance(item, Error):
        named = names.get(item.session or "", item.session)
        details = {
            key: names.get(value, value) if isinstance(value, str) else value
            for key, value in item.details.items()
        }
        return {"error": str(item.code), "session": named, **details}
    codec = r.target.connection.core.codec
    observation = codec.decode_as(item.observation, Any)
    task = None if item.task is None else msgspec.to_builtins(item.task)
    return {"observation": observation, "task": task}


def _same_as_step_many(
    r: Runner,
    what: str,
    columns: Response,
    many: Response,
    names: tuple[dict[str, str], dict[str, str]],
) -> None:
    if not isinstance(columns, StepColumnsResult):
        fail(f"the answer to {what}", "a step_columns_result", answer(columns))
    if not isinstance(many, StepManyResult):
        fail("the answer to the step_many of its items", "a step_many_result", answer(many))
    expect(
        len(columns.observations) == len(many.results),
        f"the observations of {what}",
        f"{len(many.results)}, one per session",
        str(len(columns.observations)),
    )
    stray = sorted({*columns.errors, *columns.tasks} - set(range(len(columns.observations))))
    expect(not stray, f"the positions {what} names", "0 to the last session's", show(stray))
    for j, item in enumerate(_as_items(columns)):
        if isinstance(item, Error):
            expect(
                r.target.connection.core.codec.decode_as(columns.observations[j], Any) is None,
                f"observations[{j}] of {what} (an error at {j})",
                "null",
                "an observation",
            )
        want = item_outcome(r, many.results[j], names[1])
        got = item_outcome(r, item, names[0])
        if want != got:
            want, got = difference(want, got)
            fail(
                f"position {j} of {what}, against the step_many of its items", show(want), show(got)
            )


@check(
    "step_columns",
    needs=("seeded_determinism", "concurrent_sessions"),
    openenv_skip=_OPENENV,
    seated=False,
)
def check_step_columns(r: Runner) -> str:
    """where the server lists step_columns: a step_columns of two sessions answers what the
    step_many of the same items answers (steps and a reset, by position)

    Raises:
        CheckFailed: an answer is not a step_columns_result; it has not one observation per session,
            names a position beyond them, or has an observation where it has an error; a position's
            outcome (its observation and task, or its error's code, session and details) differs
            from the step_many's; the step_many is not answered as one.
        CheckSkipped: the server does not list step_columns; it holds fewer than four sessions at
            once; no action the env accepts could be drawn.
    """
    features = _require_columns(r)
    seeds = _pair_seeds(r)
    with _sessions(r, 4) as clients:
        # Two pairs alike: (A, B) stepped by columns, (A', B') by step_many, the same actions.
        pairs = (clients[:2], clients[2:])
        for pair in pairs:
            for client, seed in zip(pair, seeds, strict=True):
                r.reset(client, seed=seed)
        ids = [[c.session_id for c in pair] for pair in pairs]
        names = (_names(ids[0]), _names(ids[1]))
        rngs = [random.Random(3000 + seed) for seed in seeds]
        for i in range(1, _ROUNDS + 2):
            resets = [1] if i == _ROUNDS + 1 else []
            actions = [
                None if j in resets else r.action(client, rng)
                for j, (client, rng) in enumerate(zip(pairs[0], rngs, strict=True))
            ]
            reset = ResetArgs(seed=seeds[1], options=dict(r.settings.reset_options))
            reset_or_none = reset if resets else None
            what = f"step_columns {i} (actions {show(actions, 80)}" + (
                ", resetting position 1)" if resets else ")"
            )
            r.doing = f"sending {what}"
            columns = r.request(
                StepColumns(
                    id=r.next_id(),
                    sessions=ids[0],
                    actions=r.target.connection.core.raw(actions),
                    resets=resets,
                    reset=reset_or_none,
                )
            )
            many = _reference_answer(r, features, ids[1], actions, resets, reset_or_none)
            _same_as_step_many(r, what, columns, many, names)
    return f"{_ROUNDS + 1} step_columns of 2 sessions"


def _malformed(r: Runner, valid: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The malformed step_columns of two sessions, as (what is wrong, the frame's fields
    beside its id and sessions). `valid`: an action per session, so that a server that
    stepped what it could before refusing the frame would change a state."""
    raw = r.target.connection.core.raw
    pair = raw(valid)
    return [
        ("one action for two sessions", {"actions": raw(valid[:1])}),
        ("actions that are not an array", {"actions": raw({"a": 1})}),
        ("a reset position beyond the sessions", {"actions": pair, "resets": [2]}),
        ("a negative reset position", {"actions": pair, "resets": [-1]}),
        ("a reset position twice", {"actions": pair, "resets": [0, 0]}),
    ]


def _expect_one_error(r: Runner, label: str, frame: StepColumns) -> None:
    """Send a malformed step_columns; it must be answered by one error frame.

    Raises:
        CheckFailed: the answer is not an invalid_argument (or invalid_frame) error with the
            request's id and a message.
    """
    r.doing = f"sending a step_columns with {label}"
    response = r.request(frame)
    expect(
        isinstance(response, Error)
        and response.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.INVALID_FRAME)
        and response.id == frame.id
        and bool(response.message),
        f"the answer to a step_columns with {label}",
        "one error frame (invalid_argument) with the request's id and a message",
        answer(response),
    )


def _states(r: Runner, clients: list[EnvClient[Any, Any]]) -> list[dict[str, Any]]:
    """Each session's state (its episode id aside: a step does not change it)."""
    return [without_episode_id(r.state(client)) for client in clients]


def _expect_unchanged(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """Raises CheckFailed naming the first session whose state changed."""
    for j, (want, got) in enumerate(zip(before, after, strict=True)):
        if want != got:
            want, got = difference(want, got)
            fail(
                f"state() of session {'AB'[j]} after the malformed step_columns",
                f"unchanged {show(want)}",
                show(got),
            )


@check("step_columns_malformed", openenv_skip=_OPENENV, seated=False)
def check_step_columns_malformed(r: Runner) -> str:
    """where the server lists step_columns: a malformed step_columns is one clear error that steps
    nothing

    Raises:
        CheckFailed: a malformed step_columns (one action for two sessions, actions that are not an
            array, a reset position beyond the sessions, negative or twice) is not answered by one
            invalid_argument (or invalid_frame) error with its id and a message; a ping after them
            is not answered; a session's state changed.
        CheckSkipped: the server does not list step_columns; it holds fewer than two sessions at
            once; no action the env accepts could be drawn.
    """
    _require_columns(r)
    seeds = _pair_seeds(r)
    with _sessions(r, 2) as clients:
        for client, seed in zip(clients, seeds, strict=True):
            r.reset(client, seed=seed)
        ids = [c.session_id for c in clients]
        before = _states(r, clients)
        rngs = [random.Random(3000 + seed) for seed in seeds]
        cases = _malformed(r, [r.action(c, rng) for c, rng in zip(clients, rngs, strict=True)])
        for label, fields in cases:
            _expect_one_error(r, label, StepColumns(id=r.next_id(), sessions=ids, **fields))
        r.doing = "pinging after the malformed step_columns"
        pong = r.request(Ping(id=r.next_id()))
        expect(isinstance(pong, Pong), "a ping after them", "pong", answer(pong))
        _expect_unchanged(before, _states(r, clients))
    return f"{len(cases)} malformed step_columns refused"
