"""The clients: blocking `ecotone.connect`, async `ecotone.aconnect` under trio and under asyncio,
and the in-process `inproc://` transport, all against real servers."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.lowlevel

import ecotone
from ecotone.kernel import RegistryError
from ecotone.kernel.config import ServerConfig
from ecotone.plugins.counter import CounterObservation, CounterState
from ecotone.serving import serve
from tests.conftest import RunningServer, SessionRecorder, make_registry, run_server

# --- blocking client -------------------------------------------------------------------------


def test_connect_resets_steps_reads_state_and_closes(counter_server: RunningServer) -> None:
    env = ecotone.connect(counter_server.url)
    assert env.env == "counter"
    assert counter_server.recorder.open_sessions == {env.session_id}

    first = env.reset(episode_id="ep-1", start=2)
    assert first.observation == {
        "reward": None,
        "done": False,
        "truncated": False,
        "metadata": {},
        "count": 2,
    }
    assert first.reward is None
    result = env.step({"delta": 3})
    assert (result.observation["count"], result.reward, result.finished) == (5, 3.0, False)
    assert env.state() == {
        "episode_id": "ep-1",
        "step_count": 1,
        "count": 5,
        "target": None,
        "max_steps": None,
    }
    assert env.describe().action_schema["required"] == ["delta"]

    env.close()
    assert counter_server.recorder.open_sessions == set()
    assert counter_server.recorder.close_reason(env.session_id) == "client"
    env.close()  # idempotent
    with pytest.raises(ecotone.ConnectionLost):
        env.step({"delta": 1})


def test_connect_decodes_into_the_given_types(counter_url: str) -> None:
    with ecotone.connect(
        counter_url, observation_type=CounterObservation, state_type=CounterState
    ) as env:
        reset = env.reset(target=4)
        assert reset.observation == CounterObservation(count=0)
        result = env.step({"delta": 4})
        assert isinstance(result.observation, CounterObservation)
        assert (result.observation.count, result.done, result.finished) == (4, True, True)
        state = env.state()
        assert isinstance(state, CounterState)
        assert (state.count, state.target, state.step_count) == (4, 4, 1)


def test_an_action_may_be_the_envs_action_type(counter_url: str) -> None:
    from ecotone.plugins.counter import CounterAction

    with ecotone.connect(counter_url, codec="msgpack") as env:
        env.reset()
        assert env.step(CounterAction(delta=-2)).observation["count"] == -2


def test_an_invalid_action_raises_invalid_action_error_naming_the_field(counter_url: str):
    with ecotone.connect(counter_url) as env:
        env.reset()
        with pytest.raises(ecotone.InvalidActionError) as bad:
            env.step({"delta": "lots"})
        assert bad.value.field == "delta"
        assert bad.value.code == "invalid_action"
        assert bad.value.session == env.session_id
        assert isinstance(bad.value, ValueError)
        assert env.step({"delta": 1}).observation["count"] == 1


def test_server_errors_carry_their_code(counter_url: str) -> None:
    with ecotone.connect(counter_url) as env:
        with pytest.raises(ecotone.ServerError) as early:
            env.step({"delta": 1})
        assert early.value.code == "reset_required"
        env.reset(target=1)
        env.step({"delta": 1})
        with pytest.raises(ecotone.ServerError) as late:
            env.step({"delta": 1})
        assert late.value.code == "episode_done"


def test_an_env_exception_raises_env_error_and_the_session_goes_on() -> None:
    with run_server("failing") as server, ecotone.connect(server.url) as env:
        env.reset()
        with pytest.raises(ecotone.EnvError) as failed:
            env.step({"fail": True})
        assert failed.value.details == {"type": "ValueError", "message": "step exploded"}
        assert env.step({}).observation["count"] == 1


def test_a_timed_out_call_raises_and_the_next_call_gets_its_own_answer(
    slow_server: RunningServer,
) -> None:
    with ecotone.connect(slow_server.url) as env:
        env.reset()
        with pytest.raises(TimeoutError):
            env.step({"sleep": 0.5, "tag": "late"}, timeout=0.1)
        result = env.step({"tag": "next"})
        assert (result.observation["tag"], result.observation["steps"]) == ("next", 2)
        assert env.state()["last_tag"] == "next"
        assert env.step({"tag": "after"}).observation["tag"] == "after"


def test_the_context_manager_closes_the_session_on_the_server(counter_server: RunningServer):
    with ecotone.connect(counter_server.url) as env:
        session = env.session_id
        env.reset()
        assert counter_server.recorder.open_sessions == {session}
    assert counter_server.recorder.open_sessions == set()
    assert counter_server.recorder.close_reason(session) == "client"


def test_the_context_manager_closes_the_session_when_the_body_raises(
    counter_server: RunningServer,
) -> None:
    with pytest.raises(KeyError), ecotone.connect(counter_server.url) as env:
        raise KeyError(env.session_id)
    assert counter_server.recorder.open_sessions == set()


def test_connecting_to_a_closed_port_raises_connection_lost() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ecotone.ConnectionLost):
        ecotone.connect(f"ws://127.0.0.1:{port}", connect_timeout=2)


def test_a_url_with_an_unknown_scheme_is_rejected() -> None:
    with pytest.raises(ValueError, match="ftp"):
        ecotone.connect("ftp://127.0.0.1:1")


# --- async client under trio -----------------------------------------------------------------

StartServer = Callable[[str], Awaitable[RunningServer]]


@pytest.fixture
def trio_serve(nursery: trio.Nursery) -> StartServer:
    """Start a server in the test's own trio nursery (cancelled when the test ends)."""

    async def start(env: str) -> RunningServer:
        recorder = SessionRecorder()
        config = ServerConfig(env=env, port=0)
        url = await nursery.start(
            functools.partial(serve, config, registry=make_registry(recorder))
        )
        return RunningServer(url, recorder)

    return start


async def test_aconnect_under_trio_resets_steps_and_reads_state(trio_serve: StartServer):
    server = await trio_serve("counter")
    env = await ecotone.aconnect(server.url)
    try:
        assert (await env.reset(start=10)).observation["count"] == 10
        result = await env.step({"delta": -4})
        assert (result.observation["count"], result.reward) == (6, -4.0)
        assert (await env.state())["step_count"] == 1
        assert (await env.describe()).name == "counter"
        with pytest.raises(ecotone.InvalidActionError) as bad:
            await env.step({"delta": []})
        assert bad.value.field == "delta"
    finally:
        await env.aclose()
    assert server.recorder.open_sessions == set()


async def test_async_with_aconnect_decodes_types_and_closes(trio_serve: StartServer) -> None:
    server = await trio_serve("counter")
    async with ecotone.aconnect(
        server.url, observation_type=CounterObservation, state_type=CounterState, codec="msgpack"
    ) as env:
        session = env.session_id
        await env.reset(max_steps=2)
        await env.step({"delta": 1})
        last = await env.step({"delta": 1})
        assert isinstance(last.observation, CounterObservation)
        assert (last.observation.count, last.truncated) == (2, True)
        state = await env.state()
        assert isinstance(state, CounterState)
        assert (state.step_count, state.count, state.max_steps) == (2, 2, 2)
    assert server.recorder.close_reason(session) == "client"


async def test_sixteen_concurrent_sessions_share_one_async_connection_under_trio(
    trio_serve: StartServer,
) -> None:
    server = await trio_serve("counter")
    finals: dict[int, list[int]] = {}

    async def worker(connection: ecotone.AsyncConnection, i: int) -> None:
        env = await connection.open()
        await env.reset(start=1000 * i)
        counts = []
        for _ in range(10):
            counts.append((await env.step({"delta": i + 1})).observation["count"])
            await trio.lowlevel.checkpoint()
        finals[i] = counts
        await env.aclose()

    connection = await ecotone.AsyncConnection.open_url(server.url)
    async with connection, trio.open_nursery() as tasks:
        for i in range(16):
            tasks.start_soon(worker, connection, i)

    assert sorted(finals) == list(range(16))
    for i, counts in finals.items():
        assert counts == [1000 * i + (i + 1) * k for k in range(1, 11)]
    assert len(server.recorder.opened) == 16
    assert server.recorder.open_sessions == set()


async def test_async_step_many_and_per_session_errors_under_trio(trio_serve: StartServer):
    server = await trio_serve("counter")
    async with await ecotone.AsyncConnection.open_url(server.url) as connection:
        a, b = await connection.open(), await connection.open()
        await a.reset()
        results = await connection.step_many([(a, {"delta": 2}), (b, {"delta": 2})])
        assert isinstance(results[0], ecotone.StepResult)
        assert results[0].observation["count"] == 2
        assert isinstance(results[1], ecotone.ServerError)
        assert results[1].code == "reset_required"


async def test_an_async_timeout_under_trio_leaves_the_next_call_its_own_answer(
    trio_serve: StartServer,
) -> None:
    server = await trio_serve("slow")
    async with ecotone.aconnect(server.url) as env:
        await env.reset()
        with pytest.raises(TimeoutError):
            await env.step({"sleep": 0.5, "tag": "late"}, timeout=0.1)
        result = await env.step({"tag": "next"})
        assert (result.observation["tag"], result.observation["steps"]) == ("next", 2)
        assert (await env.state())["last_tag"] == "next"


# --- async client under asyncio --------------------------------------------------------------


def test_aconnect_under_asyncio_resets_steps_and_reads_state(counter_server: RunningServer):
    async def main() -> tuple[Any, ...]:
        env = await ecotone.aconnect(counter_server.url)
        try:
            await env.reset(start=1)
            result = await env.step({"delta": 2})
            state = await env.state()
        finally:
            await env.aclose()
        async with ecotone.aconnect(counter_server.url, codec="msgpack") as other:
            await other.reset()
            other_count = (await other.step({"delta": 9})).observation["count"]
        return result.observation["count"], state["step_count"], other_count

    assert asyncio.run(main()) == (3, 1, 9)
    assert counter_server.recorder.open_sessions == set()
    assert len(counter_server.recorder.closed) == 2


def test_sixteen_concurrent_sessions_share_one_async_connection_under_asyncio(
    counter_server: RunningServer,
) -> None:
    async def worker(connection: ecotone.AsyncConnection, i: int) -> list[int]:
        env = await connection.open()
        await env.reset(start=1000 * i)
        counts = []
        for _ in range(10):
            counts.append((await env.step({"delta": i + 1})).observation["count"])
            await asyncio.sleep(0)
        await env.aclose()
        return counts

    async def main() -> list[list[int]]:
        async with await ecotone.AsyncConnection.open_url(counter_server.url) as connection:
            return list(await asyncio.gather(*(worker(connection, i) for i in range(16))))

    for i, counts in enumerate(asyncio.run(main())):
        assert counts == [1000 * i + (i + 1) * k for k in range(1, 11)]
    assert counter_server.recorder.open_sessions == set()


def test_an_async_timeout_under_asyncio_leaves_the_next_call_its_own_answer(
    slow_server: RunningServer,
) -> None:
    async def main() -> tuple[str, int]:
        async with ecotone.aconnect(slow_server.url) as env:
            await env.reset()
            with pytest.raises(TimeoutError):
                await env.step({"sleep": 0.5, "tag": "late"}, timeout=0.1)
            result = await env.step({"tag": "next"})
            return result.observation["tag"], result.observation["steps"]

    assert asyncio.run(main()) == ("next", 2)


# --- inproc ----------------------------------------------------------------------------------


def test_inproc_sync_client_plays_an_episode_without_a_socket() -> None:
    with ecotone.connect("inproc://echo") as env:
        assert env.env == "echo"
        env.reset(max_steps=5)
        assert env.step({"message": "hi"}).observation["echoed"] == "hi"
        with pytest.raises(ecotone.InvalidActionError) as bad:
            env.step({"mesage": "typo"})
        assert bad.value.field == "mesage"
        last = env.step({"message": ""})
        assert (last.done, last.finished) == (True, True)
        assert env.state()["step_count"] == 2


def test_inproc_sync_client_decodes_types() -> None:
    with ecotone.connect(
        "inproc://counter", observation_type=CounterObservation, state_type=CounterState
    ) as env:
        env.reset(start=3)
        assert env.step({"delta": 4}).observation == CounterObservation(count=7, reward=4.0)
        assert env.state().count == 7


def test_inproc_connection_carries_several_sessions_and_step_many() -> None:
    with ecotone.Connection("inproc://counter") as connection:
        a, b = connection.open(), connection.open()
        a.reset()
        b.reset(start=5)
        results = connection.step_many([(a, {"delta": 1}), (b, {"delta": 2})])
        counts = [r.observation["count"] for r in results if isinstance(r, ecotone.StepResult)]
        assert counts == [1, 7]
        assert a.step({"delta": 1}).observation["count"] == 2
        b.close()
        (gone,) = connection.step_many([(b, {"delta": 1})])
        assert isinstance(gone, ecotone.ServerError)
        assert (gone.code, gone.session) == ("unknown_session", b.session_id)


async def test_inproc_async_client_under_trio() -> None:
    async with ecotone.aconnect("inproc://counter") as env:
        await env.reset()
        for _ in range(3):
            result = await env.step({"delta": 2})
        assert result.observation["count"] == 6
        with pytest.raises(ecotone.InvalidActionError):
            await env.step({})


def test_inproc_async_client_under_asyncio() -> None:
    async def main() -> int:
        env = await ecotone.aconnect("inproc://counter", codec="msgpack")
        try:
            await env.reset(start=-1)
            return int((await env.step({"delta": 1})).observation["count"])
        finally:
            await env.aclose()

    assert asyncio.run(main()) == 0


def test_inproc_names_an_env_that_is_not_installed() -> None:
    with pytest.raises(RegistryError, match="nosuchenv"):
        ecotone.connect("inproc://nosuchenv")


@pytest.mark.parametrize("how", ["reset", "close"])
def test_a_server_that_drops_the_handshake_gives_connection_lost(how: str) -> None:
    """A server going away just as a client connects (reset, or closed before answering the
    WebSocket handshake) is `ConnectionLost`, never a bare socket error."""
    import struct
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def drop_one() -> None:
        conn, _ = listener.accept()
        if how == "reset":  # SO_LINGER 0: close sends RST
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            conn.recv(4096)  # read the handshake, then close without answering it
        conn.close()

    dropper = threading.Thread(target=drop_one)
    dropper.start()
    try:
        with pytest.raises(ecotone.ConnectionLost):
            ecotone.connect(f"ws://127.0.0.1:{port}", connect_timeout=5)
    finally:
        dropper.join(5)
        listener.close()


def test_poll_any_returns_the_answers_of_whichever_connections_have_them() -> None:
    import time

    from ecotone.client.sync import Connection, poll_any
    from ecotone.specs import Ping, Pong

    with run_server("counter") as a, run_server("counter") as b:
        conns = [Connection(a.url), Connection(b.url)]
        try:
            assert poll_any(conns, time.monotonic() + 0.05) == []  # nothing asked: the deadline
            conns[1].send(Ping(id=41))
            conns[0].send(Ping(id=42))
            got: dict[int, list[Any]] = {0: [], 1: []}
            while not (got[0] and got[1]):
                for index, answers in poll_any(conns, time.monotonic() + 5):
                    assert isinstance(answers, list)
                    got[index] += answers
            assert [type(p) for p in got[0] + got[1]] == [Pong, Pong]
            assert (got[0][0].id, got[1][0].id) == (42, 41)  # each its own connection's
            conns[1].send(Ping(id=43))
            conns[1].close()  # with a request in flight: lost, not a select on a dead socket
            ((index, lost),) = poll_any(conns, time.monotonic() + 5)
            assert index == 1 and isinstance(lost, ecotone.ConnectionLost)
        finally:
            for conn in conns:
                conn.close()
