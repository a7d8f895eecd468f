"""step_columns, where the server lists it: the same answers as step_many by position."""

from __future__ import annotations

import contextlib
import random
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

_COLUMNS_ROUNDS: Final = 4
"""How many step_columns the `step_columns` check compares with step_many (then one that
resets a position)."""


def _features(r: Runner) -> list[str]:
    """What the server lists in its `welcome`."""
    welcome = r.request(Hello(id=r.next_id()))
    if not isinstance(welcome, Welcome):
        fail("the answer to hello", "a welcome frame", answer(welcome))
    return list(welcome.features)


def _as_items(response: StepColumnsResult) -> list[ObservationFrame | Error]:
    """A step_columns_result as the step_many_result items it stands for (no session ids)."""
    return [
        response.errors.get(j)
        or ObservationFrame(session="", observation=obs, task=response.tasks.get(j))
        for j, obs in enumerate(response.observations)
    ]


def _outcome(r: Runner, item: ObservationFrame | Error, names: dict[str, str]) -> Any:
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
        want = _outcome(r, many.results[j], names[1])
        got = _outcome(r, item, names[0])
        if want != got:
            want, got = difference(want, got)
            fail(
                f"position {j} of {what}, against the step_many of its items", show(want), show(got)
            )


@check(
    "step_columns",
    "where the server lists step_columns: a step_columns of two sessions answers what the "
    "step_many of the same items answers (steps and a reset, by position), and a malformed "
    "one is one clear error that steps nothing",
    needs=("seeded_determinism", "concurrent_sessions"),
    openenv_skip="OpenEnv's protocol has no step_columns",
)
def check_step_columns(r: Runner) -> str:
    r.doing = "asking for the server's features (hello)"
    features = _features(r)
    if "step_columns" not in features:
        raise CheckSkipped("the server does not list step_columns in its welcome's features")
    seeds = r.settings.seeds
    pair_seeds = (seeds[0], seeds[1] if len(seeds) > 1 else seeds[0] + 1)
    options = dict(r.settings.reset_options)
    connection = r.target.connection
    clients: list[EnvClient[Any, Any]] = []
    try:
        for _ in range(4):
            try:
                clients.append(r.open())
            except CapacityError as exc:  # a server may hold fewer: this check needs four
                raise CheckSkipped(
                    f"the check holds four sessions at once and the server allows fewer: {exc}"
                ) from exc
        # Two pairs alike: (A, B) stepped by columns, (A', B') by step_many, the same actions.
        by_columns, by_items = clients[:2], clients[2:]
        for pair in (by_columns, by_items):
            for client, seed in zip(pair, pair_seeds, strict=True):
                r.reset(client, seed=seed)
        columns_ids = [c.session_id for c in by_columns]
        items_ids = [c.session_id for c in by_items]
        names = (
            {sid: f"<session {'AB'[j]}>" for j, sid in enumerate(columns_ids)},
            {sid: f"<session {'AB'[j]}>" for j, sid in enumerate(items_ids)},
        )
        rngs = [random.Random(3000 + seed) for seed in pair_seeds]
        for i in range(1, _COLUMNS_ROUNDS + 2):
            resets = [1] if i == _COLUMNS_ROUNDS + 1 else []
            actions = [
                None if j in resets else r.action(client, rng)
                for j, (client, rng) in enumerate(zip(by_columns, rngs, strict=True))
            ]
            reset = ResetArgs(seed=pair_seeds[1], options=options) if resets else None
            what = f"step_columns {i} (actions {show(actions, 80)}" + (
                ", resetting position 1)" if resets else ")"
            )
            r.doing = f"sending {what}"
            columns = r.request(
                StepColumns(
                    id=r.next_id(),
                    sessions=columns_ids,
                    actions=connection.core.raw(actions),
                    resets=resets,
                    reset=reset,
                )
            )
            many: Response
            if resets and "step_many.reset" not in features:  # the reset as a reset frame
                step = r.request(
                    StepMany(
                        id=r.next_id(),
                        steps=[
                            StepItem(session=items_ids[0], action=connection.core.raw(actions[0]))
                        ],
                    )
                )
                alone = r.request(
                    Reset(id=r.next_id(), session=items_ids[1], seed=pair_seeds[1], options=options)
                )
                if not isinstance(step, StepManyResult):
                    fail("the answer to a step_many", "a step_many_result", answer(step))
                if not isinstance(alone, ObservationFrame | Error):
                    fail("the answer to a reset", "an observation", answer(alone))
                many = StepManyResult(id=step.id, results=[*step.results, alone])
            else:
                r.doing = "sending the step_many of the same items"
                items = [
                    StepItem(session=sid, reset=reset)
                    if j in resets
                    else StepItem(session=sid, action=connection.core.raw(actions[j]))
                    for j, sid in enumerate(items_ids)
                ]
                many = r.request(StepMany(id=r.next_id(), steps=items))
            _same_as_step_many(r, what, columns, many, names)
        # Malformed ones: each one error, the server goes on, nothing is stepped.
        before = [without_episode_id(r.state(client)) for client in clients]
        # Valid actions where a position steps: a server that stepped what it could before
        # refusing the frame would change a state.
        valid = [r.action(client, rng) for client, rng in zip(by_columns, rngs, strict=True)]
        pair = connection.core.raw(valid)
        malformed: list[tuple[str, dict[str, Any]]] = [
            ("one action for two sessions", {"actions": connection.core.raw(valid[:1])}),
            ("actions that are not an array", {"actions": connection.core.raw({"a": 1})}),
            ("a reset position beyond the sessions", {"actions": pair, "resets": [2]}),
            ("a negative reset position", {"actions": pair, "resets": [-1]}),
            ("a reset position twice", {"actions": pair, "resets": [0, 0]}),
        ]
        for label, fields in malformed:
            frame = StepColumns(id=r.next_id(), sessions=columns_ids, **fields)
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
        r.doing = "pinging after the malformed step_columns"
        pong = r.request(Ping(id=r.next_id()))
        expect(isinstance(pong, Pong), "a ping after them", "pong", answer(pong))
        after = [without_episode_id(r.state(client)) for client in clients]
        for j, (want, got) in enumerate(zip(before, after, strict=True)):
            if want != got:
                want, got = difference(want, got)
                fail(
                    f"state() of session {'ABAB'[j]} after the malformed step_columns",
                    f"unchanged {show(want)}",
                    show(got),
                )
    finally:
        for client in clients:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()
    return f"{_COLUMNS_ROUNDS + 1} step_columns of 2 sessions, {len(malformed)} malformed"
