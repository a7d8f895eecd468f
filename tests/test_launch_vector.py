"""`ecotone.launch_vector`: a VectorEnv over servers a provider starts, and a dead server
replaced through that provider while the sub-envs on the other server keep their episodes.
Real `ecotone serve` subprocesses (the process provider)."""

from __future__ import annotations

import os
import signal

import anyio
import numpy as np
import pytest

import ecotone
from ecotone.launcher.vector import LaunchedVectorEnv
from tests.conftest import wait_until


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_server_is_replaced_through_its_provider_and_only_its_envs_restart() -> None:
    with ecotone.launch_vector(
        "counter", 6, servers=2, provider="process", errors="info", step_timeout=10
    ) as envs:
        assert isinstance(envs, LaunchedVectorEnv) and len(envs.servers) == 2
        envs.reset(seed=0)
        for _ in range(3):
            obs, *_ = envs.step([{"delta": 1}] * 6)
        assert [o["count"] for o in obs] == [3] * 6

        victim = envs.servers[1]
        old_url, pid = victim.url, victim.handle.pid  # type: ignore[attr-defined]
        on_victim = [i for i, url in enumerate(envs.env_urls) if url == old_url]
        others = [i for i in range(6) if i not in on_victim]
        assert on_victim and others
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not _running(pid), timeout=10)

        obs, _, terminated, truncated, infos = envs.step([{"delta": 1}] * 6)
        assert not terminated.any()
        lost = np.asarray(infos["episode_lost"])
        assert lost[on_victim].all() and not lost[others].any()
        assert truncated[on_victim].all()
        assert [obs[i]["count"] for i in others] == [4] * len(others)

        envs.restart(on_victim, seed=7)
        assert envs.servers[1].url != old_url  # a new server, from the provider
        assert set(envs.urls) == {envs.servers[0].url, envs.servers[1].url}
        obs, *_ = envs.step([{"delta": 1}] * 6)
        assert [obs[i]["count"] for i in on_victim] == [1] * len(on_victim)  # a new episode
        assert [obs[i]["count"] for i in others] == [5] * len(others)  # never noticed
        pids = [s.handle.pid for s in envs.servers]  # type: ignore[attr-defined]
    # Closing the vector env stopped both servers, the replacement included.
    assert wait_until(lambda: not any(_running(p) for p in pids), timeout=10)


def test_a_failed_start_leaves_no_server_running(tmp_path: object) -> None:
    with pytest.raises(ecotone.StartFailed, match="no-such-env"):
        ecotone.launch_vector("no-such-env", 4, servers=3, provider="process")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_alaunch_vector_replaces_a_killed_server_under_trio_and_asyncio(backend: str) -> None:
    async def main() -> list[int]:
        async with ecotone.alaunch_vector(
            "counter", 4, servers=2, provider="process", errors="info", step_timeout=10
        ) as envs:
            await envs.reset(seed=0)
            obs, *_ = await envs.step([{"delta": 2}] * 4)
            assert [o["count"] for o in obs] == [2] * 4
            victim = envs.servers[0]
            old_url, pid = victim.url, victim.pid  # type: ignore[attr-defined]
            on_victim = [i for i, url in enumerate(envs.env_urls) if url == old_url]
            os.kill(pid, signal.SIGKILL)
            assert wait_until(lambda: not _running(pid), timeout=10)
            _, _, _, truncated, infos = await envs.step([{"delta": 2}] * 4)
            assert truncated[on_victim].all()
            assert np.asarray(infos["episode_lost"])[on_victim].all()
            await envs.restart(on_victim)
            assert envs.servers[0].url != old_url
            obs, *_ = await envs.step([{"delta": 2}] * 4)
            assert [obs[i]["count"] for i in on_victim] == [2] * len(on_victim)
            assert all(obs[i]["count"] == 6 for i in range(4) if i not in on_victim)
            return [s.pid for s in envs.servers]  # type: ignore[attr-defined]

    pids = anyio.run(main, backend=backend)
    assert wait_until(lambda: not any(_running(p) for p in pids), timeout=10)
