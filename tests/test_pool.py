"""Warm pools (`ecotone.server_pool`, `AsyncServerPool`): servers started ahead, each handed
out once, replaced in the background, and all stopped on every way out (the block's end, an
exception, Ctrl-C, the owner killed outright, and `ecotone gc` for containers)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import anyio
import pytest

import ecotone
from ecotone.launcher.pool import AsyncServerPool, PoolClosed
from tests.conftest import run_program, wait_until
from tests.engines import engine_client, env_image, podman_engine  # noqa: F401 - fixtures


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is gone for this purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int) -> bool:
    return not pid_alive(pid)


def test_each_episode_gets_a_server_of_its_own_and_the_pool_refills() -> None:
    with ecotone.server_pool("counter", 2, provider="process") as pool:
        pool.wait_ready(timeout=60)
        assert pool.ready == 2
        seen = []
        for _ in range(4):
            server = pool.take()
            with server, server.connect() as env:
                assert env.reset(seed=0).observation["count"] == 0
                assert env.step({"delta": 1}).observation["count"] == 1
                seen.append(server.id)
        assert len(set(seen)) == 4  # never one server twice
        pool.wait_ready(timeout=60)
        assert pool.ready == 2 and pool.started == 6
        for pid in [int(i) for i in seen]:
            assert wait_until(functools.partial(gone, pid), 10)
        ready = [int(h.id) for h in pool.pool._ready]
        held = pool.take()
    for pid in [*ready, int(held.id)]:  # the ready ones, and the one never given back
        assert not pid_alive(pid)


def test_launch_is_a_session_on_a_fresh_server_stopped_on_the_way_out() -> None:
    with ecotone.server_pool("counter", 1, provider="process") as pool:
        with pool.launch() as env:
            env.reset(seed=0)
            env.step({"delta": 5})
            url = env.connection.url
        with pool.launch() as env:
            assert env.reset(seed=0).observation["count"] == 0
            assert env.connection.url != url


def test_a_ready_server_that_died_is_never_handed_out() -> None:
    with ecotone.server_pool("counter", 2, provider="process") as pool:
        pool.wait_ready(timeout=60)
        dead = pool.pool._ready[0]
        os.kill(int(dead.id), signal.SIGKILL)
        assert wait_until(lambda: not pid_alive(int(dead.id)), 10)
        with pool.take() as server:
            assert server.id != dead.id
            with server.connect() as env:
                env.reset(seed=0)


def test_starts_that_keep_failing_are_an_error_not_a_hang() -> None:
    with ecotone.server_pool("no-such-env", 2, provider="process", max_failures=2) as pool:
        with pytest.raises(ecotone.ProviderError, match="no-such-env"):
            pool.take()
    with pytest.raises(PoolClosed):
        pool.take()


def test_a_pool_smaller_than_its_failure_budget_retries_then_gives_up() -> None:
    with ecotone.server_pool("no-such-env", 1, provider="process", max_failures=3) as pool:
        with pytest.raises(ecotone.ProviderError, match="no-such-env"):
            pool.take()  # three starts in a row failed (not one, then a wait forever)
        with pytest.raises(ecotone.ProviderError):
            pool.wait_ready(timeout=30)


def test_bad_sizes_are_refused() -> None:
    for size in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="whole number"):
            AsyncServerPool("counter", size)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_async_pool_under_trio_and_asyncio(backend: str) -> None:
    async def main() -> list[str]:
        async with AsyncServerPool("counter", 2, provider="process") as pool:
            await pool.wait_ready(timeout=60)
            urls = []
            for _ in range(3):
                async with pool.alaunch() as env:
                    await env.reset(seed=0)
                    result = await env.step({"delta": 2})
                    assert result.observation["count"] == 2
                    urls.append(env.connection.url)
            return urls

    urls = anyio.run(main, backend=backend)
    assert len(set(urls)) == 3


OWNER = """
import json, os, signal, sys, time
import ecotone
pool = ecotone.server_pool("counter", 3, provider="process")
pool.wait_ready(timeout=60)
held = pool.take()
pool.wait_ready(timeout=60)  # the replacement too
pids = [int(h.id) for h in pool.pool._ready] + [int(held.id)]
if sys.argv[1] == "ctrl-c":
    try:
        with pool:
            print(json.dumps(pids), flush=True)  # inside: the test's Ctrl-C lands in the try
            time.sleep(60)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
else:
    print(json.dumps(pids), flush=True)
    time.sleep(60)
"""


def run_owner(how: str) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, how],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pids = json.loads(proc.stdout.readline())
    assert len(pids) == 4 and all(pid_alive(p) for p in pids)
    return proc, pids


def test_ctrl_c_stops_every_server_of_the_pool() -> None:
    proc, pids = run_owner("ctrl-c")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert "interrupted" in out
    assert [p for p in pids if pid_alive(p)] == []


def test_killing_the_owner_outright_ends_its_pools_servers() -> None:
    proc, pids = run_owner("kill")
    proc.kill()
    proc.wait()
    assert wait_until(lambda: not any(pid_alive(p) for p in pids), 15), pids


UNSTOPPED = """
import json, sys
import ecotone
server = ecotone.start_server("counter", provider="process")
pool = ecotone.server_pool("counter", 2, provider="process")
pool.wait_ready(timeout=60)
print(json.dumps([int(server.id)] + [int(h.id) for h in pool.pool._ready]), flush=True)
if sys.argv[1] == "ctrl-c":
    raise KeyboardInterrupt  # as a Ctrl-C before any with block would
"""


@pytest.mark.parametrize("how", ["end", "ctrl-c"])
def test_a_program_that_ends_without_stopping_its_servers_exits_and_stops_them(how: str) -> None:
    # A start_server() handle never stopped and a server_pool() never closed: the program
    # still exits at once (their loops' threads used to hang it at exit) and its servers end.
    returncode, out, err = run_program("-c", UNSTOPPED, how, timeout=60)
    assert out, err
    pids = json.loads(out.splitlines()[0])
    assert len(pids) == 3
    assert returncode == (0 if how == "end" else -signal.SIGINT)
    assert [p for p in pids if pid_alive(p)] == []


PODMAN_OWNER = """
import json, sys, time
import ecotone
pool = ecotone.server_pool("counter", 2, provider="podman", image=sys.argv[1],
                           labels={"test.ecotone": sys.argv[2]})
pool.wait_ready(timeout=120)
print(json.dumps([h.id for h in pool.pool._ready]), flush=True)
time.sleep(120)
"""


def test_a_podman_pool_of_a_killed_owner_is_removed_by_gc(
    podman_engine: str,  # noqa: F811 - fixture
    env_image: Any,  # noqa: F811 - fixture
) -> None:
    image = env_image(podman_engine, "counter")
    tag = os.urandom(6).hex()
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PODMAN_OWNER), image, tag],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ids = json.loads(proc.stdout.readline())
    client = engine_client(podman_engine)

    def ours() -> list[Any]:
        return client.containers.list(all=True, filters={"label": f"test.ecotone={tag}"})

    assert len(ids) == 2 and len(ours()) == 2
    proc.kill()
    proc.wait()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "gc"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert ours() == [], done.stdout
    assert time.monotonic() - started < 120
