"""Warm servers where users start them: `ecotone.launch(..., pool=N)` and
`launch_vector(..., pool=N)` take servers from a pool of N kept for the process
(`ecotone.launcher.warm`), each server handed out once and stopped after, its replacement
started meanwhile. Real `ecotone serve` subprocesses (the process provider)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest

import ecotone
from ecotone.launcher.vector import LaunchedVectorEnv
from ecotone.launcher.warm import close_pools, warm_pool
from tests.conftest import wait_until
from tests.test_launch_vector import _running


@pytest.fixture(autouse=True)
def _no_pools_left() -> Iterator[None]:
    yield
    close_pools()


def _ready_urls(pool: ecotone.ServerPool) -> set[str]:
    """The URLs of the servers the pool holds ready (started, not handed out), without their
    tokens (as a connection shows its URL)."""
    return {handle.url.split("?")[0] for handle in pool.pool._ready}


def test_launch_with_a_pool_hands_out_a_warm_server_of_its_own_each_time() -> None:
    pool = warm_pool("counter", 2, provider="process")
    assert warm_pool("counter", 2, provider="process") is pool  # one per provider, spec, size
    pool.wait_ready(timeout=60)
    seen: list[str] = []
    pids: list[int] = []
    for _ in range(3):
        pool.wait_ready(timeout=60)
        ready = _ready_urls(pool)
        with ecotone.launch("counter", provider="process", pool=2) as env:
            url = env.connection.url
            assert url in ready  # started before this launch began: warm
            assert env.reset(seed=0).observation["count"] == 0  # nobody touched it
            assert env.step({"delta": 2}).observation["count"] == 2
            handle = next(h for h in pool.pool._out if h.url.split("?")[0] == url)
            pids.append(handle.pid)  # type: ignore[attr-defined]
        seen.append(url)
    assert len(set(seen)) == 3  # never the same server twice
    assert wait_until(lambda: not any(_running(pid) for pid in pids), timeout=10)  # stopped
    assert pool.started >= 4  # the two first, and a replacement for each handed out


def test_another_spec_or_size_has_a_pool_of_its_own_and_close_pools_stops_them() -> None:
    two = warm_pool("counter", 2, provider="process")
    one = warm_pool("counter", 1, provider="process")
    echo = warm_pool("echo", 1, provider="process")
    assert len({id(two), id(one), id(echo)}) == 3
    for pool in (two, one, echo):
        pool.wait_ready(timeout=60)
    pids = [h.pid for p in (two, one, echo) for h in p.pool._ready]  # type: ignore[attr-defined]
    close_pools()
    assert two.closed and one.closed and echo.closed
    assert wait_until(lambda: not any(_running(pid) for pid in pids), timeout=10)
    again = warm_pool("counter", 2, provider="process")  # made anew after a close
    assert again is not two and not again.closed


@pytest.mark.parametrize("size", [0, -1, True, 2.5, "2"])
def test_a_pool_size_that_is_not_a_whole_number_above_zero_is_refused(size: object) -> None:
    with pytest.raises(ValueError, match="pool= is how many servers to keep warm"):
        with ecotone.launch("counter", provider="process", pool=size):  # type: ignore[arg-type]
            pass
    with pytest.raises(ValueError, match="pool= is how many servers to keep warm"):
        ecotone.launch_vector("counter", 2, provider="process", pool=size)


def test_launch_vector_takes_its_servers_warm_and_a_dead_ones_stand_in_too() -> None:
    pool = warm_pool("counter", 3, provider="process")
    pool.wait_ready(timeout=60)
    ready = _ready_urls(pool)
    with ecotone.launch_vector(
        "counter", 4, servers=2, provider="process", pool=3, errors="info", step_timeout=10
    ) as envs:
        assert isinstance(envs, LaunchedVectorEnv)
        assert {server.url.split("?")[0] for server in envs.servers} <= ready
        envs.reset(seed=0)
        obs, *_ = envs.step([{"delta": 1}] * 4)
        assert [o["count"] for o in obs] == [1] * 4
        victim = envs.servers[1]
        pid = victim.handle.pid  # type: ignore[attr-defined]
        on_victim = [i for i, url in enumerate(envs.env_urls) if url == victim.url]
        pool.wait_ready(timeout=60)
        spare = _ready_urls(pool)
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not _running(pid), timeout=10)
        _, _, _, _, infos = envs.step([{"delta": 1}] * 4)
        assert np.asarray(infos["episode_lost"])[on_victim].all()
        envs.restart(on_victim, seed=1)
        assert envs.servers[1].url.split("?")[0] in spare  # the stand-in came warm
        obs, *_ = envs.step([{"delta": 1}] * 4)
        assert [obs[i]["count"] for i in on_victim] == [1] * len(on_victim)
        pids = [s.handle.pid for s in envs.servers]  # type: ignore[attr-defined]
    assert wait_until(lambda: not any(_running(p) for p in pids), timeout=10)
    assert not pool.closed  # the pool stays for the next launch
