"""The protocol checks: the rules of ordering, batching, ownership and errors that every
transport must keep, checked over the wire (`ecotone validate --url`, any transport) or in
process (through the inproc channel).

They drive the async client under trio, many requests in flight at once: pipelined on one
connection where sessions belong to a connection (websocket, tcp, unix, stdio, inproc), and
over several connections where a transport shares sessions between its connections (HTTP,
whose requests all belong to one owner). The two that must see inside the env
(`no_overlapping_calls`, `close_waits_for_step`) need the server to serve the `probe` env
(`ecotone serve probe`, see `probe.py`); against any other env the first is skipped and the
second checks only the order of the answers.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio

from ecotone.client.aio import AsyncConnection, AsyncEnvClient
from ecotone.conformance.expect import answer, expect, fail, show
from ecotone.conformance.generate import generate
from ecotone.conformance.registry import check, register
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import Runner
from ecotone.conformance.schema import SchemaDefinitionError
from ecotone.specs import (
    Close,
    Closed,
    Error,
    ErrorCode,
    GetState,
    ObservationFrame,
    Ping,
    Pong,
    Response,
    Step,
    StepItem,
    StepMany,
    StepManyResult,
)

T = TypeVar("T")

PROBE: Final = "probe"
_OPENENV: Final = "OpenEnv's protocol has no request ids, step_many or several sessions"
_ROUNDS: Final = 12
_SLEEP: Final = 0.01


def _in_trio(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return anyio.run(functools.partial(fn, *args), backend="trio")


def _is_probe(r: Runner) -> bool:
    return r.info.name == PROBE


@contextlib.asynccontextmanager
async def _connection(r: Runner) -> AsyncIterator[AsyncConnection]:
    """A new async connection to the target (in process: another channel to its engine)."""
    target = r.target
    timeout = r.settings.timeout
    if target.engine is not None:
        from ecotone.transports.inproc.client import InprocAsyncChannel

        channel = InprocAsyncChannel(target.engine, "json")
        conn = AsyncConnection(target.connection.url, timeout=timeout, channel=channel)
    else:
        conn = await AsyncConnection.open_url(
            target.connection.url, timeout=timeout, connect_timeout=min(timeout, 10.0)
        )
    try:
        yield conn
    finally:
        await conn.aclose()


async def _started(r: Runner, conn: AsyncConnection) -> AsyncEnvClient[Any, Any]:
    """A session of the target's env, its episode started."""
    r.doing = "opening a session"
    client = await conn.open(r.target.env)
    r.doing = "resetting it"
    options = dict(r.settings.reset_options)
    if _is_probe(r):
        options.setdefault("max_steps", 1_000_000)  # these checks step the probe often
    await client.reset(seed=r.seed, **options)
    return client


def _action(r: Runner, rng: random.Random, tag: str = "") -> Any:
    """An action for the env: a probe action (a short sleep, tagged) for the probe, else one
    generated from the Action schema (the env may refuse it: these checks look at how the
    server answers, not at whether the step succeeds)."""
    if _is_probe(r):
        return {"sleep": _SLEEP, "tag": tag}
    r.doing = "generating an action from the Action schema"
    try:
        return generate(r.info.action_schema, rng)
    except (SchemaDefinitionError, ValueError) as exc:
        raise CheckSkipped(f"cannot generate an action from the Action schema: {exc}") from exc


async def _collect(conn: AsyncConnection, count: int, seconds: float) -> list[Response]:
    """The next `count` answers to requests sent with `conn.send`, in arrival order."""
    out: list[Response] = []
    with anyio.fail_after(seconds):
        while len(out) < count:
            out.extend(await conn.poll())
    return out


async def _shares_sessions(r: Runner) -> bool:
    """Whether a session opened on one connection is usable on another (HTTP: yes)."""
    async with _connection(r) as first, _connection(r) as second:
        client = await first.open(r.target.env)
        r.doing = "asking for the session's state on another connection"
        frame = GetState(id=second.core.next_id(), session=client.session_id)
        response = await second.request(frame)
        return not (isinstance(response, Error) and response.code == ErrorCode.UNKNOWN_SESSION)


# --- the checks ------------------------------------------------------------------------------


@check("pipelined_in_order", openenv_skip=_OPENENV)
def check_pipelined_in_order(r: Runner) -> str:
    """requests sent back to back on one session are answered in the order they were sent

    Raises:
        CheckFailed: the answers to one session's requests, sent back to back with pings between
            them, come in another order than they were sent.
    """

    async def go() -> tuple[list[Any], list[Any]]:
        async with _connection(r) as conn:
            client = await _started(r, conn)
            sid = client.session_id
            frames: list[Any] = []
            rng = random.Random(r.seed)
            for i in range(10):
                if i % 3 == 1 and _is_probe(r):
                    action = conn.core.raw(_action(r, rng, f"p{i}"))
                    frames.append(Step(id=conn.core.next_id(), session=sid, action=action))
                else:
                    frames.append(GetState(id=conn.core.next_id(), session=sid))
                frames.append(Ping(id=conn.core.next_id()))
            r.doing = f"sending {len(frames)} requests without waiting for answers"
            for frame in frames:
                await conn.send(frame)
            answers = await _collect(conn, len(frames), r.settings.timeout)
            session_ids = [f.id for f in frames if not isinstance(f, Ping)]
            seen = [a.id for a in answers if a.id in set(session_ids)]
            return session_ids, seen

    sent, seen = _in_trio(go)
    expect(seen == sent, "the order of the answers of one session", show(sent), show(seen))
    return f"{len(sent)} requests of one session, pings between them"


@check("batch_names_session_twice", openenv_skip=_OPENENV)
def check_batch_names_session_twice(r: Runner) -> None:
    """a step_many naming a session twice steps it once: the second item is invalid_argument

    Raises:
        CheckFailed: the step_many is not answered with a step_many_result; its second item is not
            invalid_argument with details.reason duplicate_session; its first is refused as a
            duplicate.
        CheckSkipped: no action can be generated from the Action schema.
    """

    async def go() -> Response:
        async with _connection(r) as conn:
            client = await _started(r, conn)
            rng = random.Random(r.seed)
            raw = conn.core.raw(_action(r, rng))
            items = [StepItem(session=client.session_id, action=raw) for _ in range(2)]
            r.doing = "sending a step_many whose two items name one session"
            return await conn.request(StepMany(id=conn.core.next_id(), steps=items))

    response = _in_trio(go)
    if not isinstance(response, StepManyResult):
        fail("the answer to the step_many", "a step_many_result", answer(response))
    first, second = response.results
    expect(
        isinstance(second, Error)
        and second.code == ErrorCode.INVALID_ARGUMENT
        and second.details.get("reason") == "duplicate_session",
        "the second item (the session again)",
        "invalid_argument with details.reason duplicate_session",
        answer(second),
    )
    expect(
        not (isinstance(first, Error) and first.details.get("reason") == "duplicate_session"),
        "the first item",
        "stepped (or refused on its own merits)",
        answer(first),
    )


@check("no_overlapping_calls", openenv_skip=_OPENENV)
def check_no_overlapping_calls(r: Runner) -> str:
    """concurrent steps and step_many batches on overlapping sessions never run two calls of one
    session at once, and each step runs exactly once

    Raises:
        CheckFailed: a step_many is not answered with a step_many_result; a probe step is refused; a
            step ran while another call of its session did; a session's step counts are not each of
            1 to the number of its steps once.
        CheckSkipped: the server does not serve the probe env.
    """
    if not _is_probe(r):
        raise CheckSkipped(
            f"needs the {PROBE!r} env to see inside a session: serve it "
            f"(ecotone serve {PROBE}) and check that server"
        )
    sessions_n, lanes_n = 3, 4

    async def go() -> tuple[list[ObservationFrame | Error], dict[str, int]]:
        shared = await _shares_sessions(r)
        async with contextlib.AsyncExitStack() as stack:
            first = await stack.enter_async_context(_connection(r))
            lanes = [first]
            for _ in range(lanes_n - 1):
                lanes.append(await stack.enter_async_context(_connection(r)) if shared else first)
            clients = [await _started(r, first) for _ in range(sessions_n)]
            ids = [c.session_id for c in clients]
            seen: list[ObservationFrame | Error] = []
            sent: dict[str, int] = dict.fromkeys(ids, 0)

            async def lane(conn: AsyncConnection, seed: int) -> None:
                rng = random.Random(seed)
                for i in range(_ROUNDS):
                    chosen = rng.sample(ids, rng.randint(1, len(ids)))
                    raw = conn.core.raw({"sleep": _SLEEP, "tag": f"{seed}.{i}"})
                    if len(chosen) == 1 and rng.random() < 0.5:
                        sent[chosen[0]] += 1
                        frame: Any = Step(id=conn.core.next_id(), session=chosen[0], action=raw)
                        seen.append(await conn.request(frame))  # type: ignore[arg-type]
                        continue
                    for sid in chosen:
                        sent[sid] += 1
                    items = [StepItem(session=sid, action=raw) for sid in chosen]
                    response = await conn.request(StepMany(id=conn.core.next_id(), steps=items))
                    if not isinstance(response, StepManyResult):
                        fail("the answer to a step_many", "a step_many_result", answer(response))
                    seen.extend(response.results)

            r.doing = f"stepping {sessions_n} sessions from {lanes_n} concurrent tasks"
            with anyio.fail_after(r.settings.timeout):
                async with anyio.create_task_group() as group:
                    for index, conn in enumerate(lanes):
                        group.start_soon(lane, conn, 1000 * r.seed + index)
            return seen, sent

    seen, sent = _in_trio(go)
    steps: dict[str, list[int]] = {}
    for item in seen:
        if isinstance(item, Error):
            fail("every step of the probe", "an observation", answer(item))
        obs = r.target.connection.core.codec.decode_as(item.observation, dict[str, Any])
        expect(
            not obs.get("overlapped"),
            f"the step of session {item.session} tagged {obs.get('tag')!r}",
            "no other call of the session running during it",
            "another call of the same session ran at the same time",
        )
        steps.setdefault(item.session, []).append(int(obs["steps"]))
    for sid, counts in steps.items():
        expect(
            sorted(counts) == list(range(1, sent[sid] + 1)),
            f"the step counts session {sid} reported",
            f"each of 1..{sent[sid]} once",
            show(sorted(counts)),
        )
    return f"{sum(sent.values())} steps of {sessions_n} sessions from {lanes_n} tasks"


@check("close_waits_for_step", openenv_skip=_OPENENV)
def check_close_waits_for_step(r: Runner) -> str:
    """a close sent while a step (in a step_many) runs is answered after it, and the step runs to
    its end

    Raises:
        CheckFailed: the answers come in another order than step, close, state; the step's step_many
            is not answered with a step_many_result, or its item with unknown_session; the close is
            not answered with closed; the state after it is not unknown_session; the probe's close()
            was called while its step ran.
        CheckSkipped: no action can be generated from the Action schema.
    """

    async def go() -> list[tuple[str, Response]]:
        shared = await _shares_sessions(r)
        async with _connection(r) as conn, _connection(r) as other:
            client = await _started(r, conn)
            sid = client.session_id
            rng = random.Random(r.seed)
            action = {"sleep": 0.2, "tag": "slow"} if _is_probe(r) else _action(r, rng)
            # The step is a one-item step_many: batches must wait for their sessions' turn too.
            item = StepItem(session=sid, action=conn.core.raw(action))
            step = StepMany(id=conn.core.next_id(), steps=[item])
            if not shared:  # one connection: step, close and state back to back
                frames = [
                    ("step", step),
                    ("close", Close(id=conn.core.next_id(), session=sid)),
                    ("state", GetState(id=conn.core.next_id(), session=sid)),
                ]
                r.doing = "sending step, close and state back to back"
                for _, frame in frames:
                    await conn.send(frame)
                answers = await _collect(conn, len(frames), r.settings.timeout)
                names: dict[Any, str] = {frame.id: name for name, frame in frames}
                return [(names.get(a.id, "?"), a) for a in answers]
            # Sessions shared between connections (HTTP): the close comes on another one,
            # while the step runs.
            order: list[tuple[str, Response]] = []

            async def stepping() -> None:
                order.append(("step", await conn.request(step)))

            async def closing() -> None:
                await anyio.sleep(0.05)
                close = Close(id=other.core.next_id(), session=sid)
                order.append(("close", await other.request(close)))
                state = GetState(id=other.core.next_id(), session=sid)
                order.append(("state", await other.request(state)))

            r.doing = "closing the session from another connection while it steps"
            with anyio.fail_after(r.settings.timeout):
                async with anyio.create_task_group() as group:
                    group.start_soon(stepping)
                    group.start_soon(closing)
            return order

    order = _in_trio(go)
    expect(
        [name for name, _ in order] == ["step", "close", "state"],
        "the order of the answers",
        "step, then close, then state",
        ", ".join(name for name, _ in order),
    )
    batch, close, state = (response for _, response in order)
    if not isinstance(batch, StepManyResult):
        fail("the answer to the one-item step_many", "a step_many_result", answer(batch))
    step = batch.results[0]
    expect(
        not (isinstance(step, Error) and step.code == ErrorCode.UNKNOWN_SESSION),
        "the step's answer",
        "its observation (or an error of its own), not unknown_session",
        answer(step),
    )
    expect(isinstance(close, Closed), "the close's answer", "closed", answer(close))
    expect(
        isinstance(state, Error) and state.code == ErrorCode.UNKNOWN_SESSION,
        "a state request after the close",
        "unknown_session",
        answer(state),
    )
    if _is_probe(r):
        assert isinstance(step, ObservationFrame)
        obs = r.target.connection.core.codec.decode_as(step.observation, dict[str, Any])
        expect(
            not obs.get("closed_during"),
            "the slow step",
            "env.close() not called while it ran",
            "close() was called mid-step",
        )
        return "a 0.2 s probe step: close waited for it"
    return "answer order only (serve the probe env to see inside)"


@check("errors_without_id", openenv_skip=_OPENENV)
def check_errors_without_id(r: Runner) -> None:
    """a frame that cannot be read is answered with an error whose id is null (or the id, when it
    can be read), and the connection goes on

    Raises:
        CheckFailed: a frame that cannot be read is not answered with an error of the expected code
            and id (null where the id cannot be read), or not at all; a ping after them is not
            answered with pong.
    """
    connection = r.target.connection
    cases = [
        (b"this is not json", None, ErrorCode.INVALID_FRAME),
        (b'{"op": "no_such_op", "id": 7001}', 7001, ErrorCode.UNKNOWN_OP),
        (b'{"op": "step", "id": 7002}', 7002, ErrorCode.INVALID_FRAME),
        (b'{"id": 7003}', 7003, ErrorCode.INVALID_FRAME),
    ]
    for data, rid, code in cases:
        r.doing = f"sending {data!r}"
        connection.channel.send(data)
        response = _next_answer(r)
        expect(
            isinstance(response, Error) and response.id == rid and response.code == code,
            f"the answer to {data.decode()!r}",
            f"{code} with id {rid}",
            f"{answer(response)} with id {response.id}",
        )
    r.doing = "pinging after the bad frames"
    pong = r.request(Ping(id=r.next_id()))
    expect(isinstance(pong, Pong), "a ping after the bad frames", "pong", answer(pong))


def _next_answer(r: Runner) -> Response:
    """One answer from the target's blocking connection, whatever its id."""
    connection = r.target.connection
    deadline = time.monotonic() + r.settings.timeout
    for message in connection.channel.receive(deadline):
        return connection.decode(message)
    fail("the answer to a bad frame", "an error frame", "nothing")


@check("unknown_and_foreign_sessions", openenv_skip=_OPENENV)
def check_unknown_and_foreign_sessions(r: Runner) -> str:
    """a made-up session id, and another connection's session, are unknown_session

    Raises:
        CheckFailed: a made-up session is not unknown_session naming it; a step of another
            connection's session (where sessions belong to connections) is not unknown_session.
        CheckSkipped: no action can be generated from the Action schema.
    """
    made_up = "0" * 16

    async def go() -> tuple[Response, Response | None]:
        async with _connection(r) as conn:
            frame = GetState(id=conn.core.next_id(), session=made_up)
            r.doing = "asking for a made-up session's state"
            unknown = await conn.request(frame)
        if await _shares_sessions(r):
            return unknown, None
        async with _connection(r) as first, _connection(r) as second:
            client = await _started(r, first)
            rng = random.Random(r.seed)
            raw = second.core.raw(_action(r, rng))
            r.doing = "stepping another connection's session"
            foreign = await second.request(
                Step(id=second.core.next_id(), session=client.session_id, action=raw)
            )
            return unknown, foreign

    unknown, foreign = _in_trio(go)
    expect(
        isinstance(unknown, Error)
        and unknown.code == ErrorCode.UNKNOWN_SESSION
        and unknown.session == made_up,
        "state of a made-up session",
        f"unknown_session naming {made_up}",
        answer(unknown),
    )
    if foreign is None:
        return "this transport shares sessions between its connections (one owner): no foreign"
    expect(
        isinstance(foreign, Error) and foreign.code == ErrorCode.UNKNOWN_SESSION,
        "a step of another connection's session",
        "unknown_session",
        answer(foreign),
    )
    return "made-up and foreign"


PROTOCOL = (
    check_pipelined_in_order,
    check_batch_names_session_twice,
    check_no_overlapping_calls,
    check_close_waits_for_step,
    check_errors_without_id,
    check_unknown_and_foreign_sessions,
)
"""The protocol's checks in the order they run."""

register(*PROTOCOL, protocol=True)
