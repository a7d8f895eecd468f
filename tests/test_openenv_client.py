"""ecotone's `openenv+` client (the `openenv` transport's client end, both faces) against the
OpenEnv profile of ecotone's own server, serving the `probe` env, whose steps sleep as asked:
OpenEnv's messages carry no ids, and the client keeps each session's requests in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

import ecotone
from tests.conftest import RunningServer, run_server


@pytest.fixture
def probe() -> Iterator[str]:
    server: RunningServer
    with run_server("probe", transport="http") as server:
        yield "openenv+ws://" + server.url.split("://", 1)[1]


def test_a_call_that_timed_out_leaves_its_session_answering_in_order(probe: str) -> None:
    with ecotone.connect(probe) as env:
        env.reset()
        with pytest.raises(TimeoutError):
            env.step({"sleep": 0.25, "tag": "slow"}, timeout=0.05)
        after = env.step({"tag": "next"})  # the late answer is read first, and dropped
        assert after.observation["tag"] == "next"
        assert after.observation["steps"] == 2


async def test_async_a_call_that_timed_out_leaves_its_session_answering_in_order(
    probe: str,
) -> None:
    async with ecotone.aconnect(probe) as env:
        await env.reset()
        with pytest.raises(TimeoutError):
            await env.step({"sleep": 0.25, "tag": "slow"}, timeout=0.05)
        after = await env.step({"tag": "next"})
        assert after.observation["tag"] == "next"
        assert after.observation["steps"] == 2


async def test_async_a_slow_session_holds_up_no_other(probe: str) -> None:
    connection = await ecotone.AsyncConnection.open_url(probe)
    async with connection:
        slow, fast = await connection.open(), await connection.open()
        await slow.reset()
        await fast.reset()
        finished: list[str] = []

        async def step(env: ecotone.AsyncEnvClient, sleep: float, tag: str) -> None:
            await env.step({"sleep": sleep, "tag": tag})
            finished.append(tag)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(step, slow, 0.25, "slow")
            await trio.sleep(0.02)  # the slow step is out, its reader waiting
            nursery.start_soon(step, fast, 0.0, "fast")
        assert finished == ["fast", "slow"]


def test_a_batch_over_sessions_is_answered_in_its_order(probe: str) -> None:
    with ecotone.Connection(probe) as connection:
        first, second = connection.open(), connection.open()
        first.reset()
        second.reset()
        results = connection.step_many(
            [(first, {"sleep": 0.1, "tag": "a"}), (second, {"tag": "b"})]
        )
        assert [r.observation["tag"] for r in results] == ["a", "b"]  # type: ignore[union-attr]
