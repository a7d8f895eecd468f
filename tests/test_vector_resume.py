"""`VectorEnv(..., resume=True)`: the sub-envs of a server killed (`kill -9`) or stopped
(SIGTERM) mid-episode are reopened on a new server on the same checkpoint directory, restored
and replayed; the caller's `step` returns as if nothing happened and every sub-env's episode
equals an uninterrupted run, step for step, automatic resets included."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ecotone
from tests.conftest import run_server
from tests.test_checkpoints import Served, _free_port

SUBS = 6


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Served, Served]]:
    servers = (
        Served("chess", tmp_path / "a", _free_port()),
        Served("chess", tmp_path / "b", _free_port()),
    )
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        if server.process is not None and server.process.poll() is None:
            server.stop(signal.SIGKILL)


def _moves(observations: list[Any], t: int) -> list[dict[str, str]]:
    """Sub-env i plays its (t + i)-th legal move, mod their number."""
    moves = []
    for i, obs in enumerate(observations):
        legal = obs["legal_moves"] or ["0000"]
        moves.append({"move": legal[(t + i) % len(legal)]})
    return moves


def _play(venv: Any, steps: int, interrupt: dict[int, Callable[[], None]] | None = None) -> list:
    observations, _ = venv.reset(seed=5)
    seen = [[o["fen"] for o in observations]]
    for t in range(steps):
        if interrupt and t in interrupt:
            interrupt[t]()
        observations, rewards, terminated, _, infos = venv.step(_moves(observations, t))
        assert "error" not in infos, infos
        seen.append([o["fen"] for o in observations] + [list(rewards), list(terminated)])
    return seen


def test_a_killed_server_and_a_stopped_one_are_resumed_step_for_step(
    two: tuple[Served, Served],
) -> None:
    a, b = two
    urls = [a.url, b.url]
    with ecotone.VectorEnv(urls, SUBS) as venv:
        uninterrupted = _play(venv, 24)

    def kill_a() -> None:
        a.stop(signal.SIGKILL)  # nothing written at the end: the checkpoints of step 4
        a.start()

    def stop_b() -> None:
        assert b.stop(signal.SIGTERM) == 0  # writes its sessions' checkpoints: step 15
        b.start()

    with ecotone.VectorEnv(urls, SUBS, resume=True, checkpoint_every=4) as venv:
        resumed = _play(venv, 24, {7: kill_a, 15: stop_b})
        assert venv._resumer is not None and venv._resumer.trails.resumes == 2
    assert resumed == uninterrupted


def test_without_periodic_checkpoints_each_episode_is_replayed_from_its_start(
    two: tuple[Served, Served],
) -> None:
    a, b = two
    with ecotone.VectorEnv([a.url, b.url], SUBS) as venv:
        uninterrupted = _play(venv, 10)

    def kill_both() -> None:
        for server in (a, b):
            server.stop(signal.SIGKILL)
            server.start()

    with ecotone.VectorEnv([a.url, b.url], SUBS, resume=True) as venv:
        assert _play(venv, 10, {6: kill_both}) == uninterrupted


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_automatic_resets_are_checkpointed_and_resumed(tmp_path: Path, mode: str) -> None:
    """Counter episodes truncated every 3 steps, reset automatically: a kill lands in every
    phase of an episode across the sub-envs, each resumed where it stood."""
    server = Served("counter", tmp_path / "c", _free_port())
    server.start()

    def run(interrupt: dict[int, Callable[[], None]] | None, **resume: Any) -> list:
        rows = []
        urls = [server.url] * 2
        options: Any = {"reset_options": {"max_steps": 3}, "autoreset_mode": mode, **resume}
        with ecotone.VectorEnv(urls, 4, **options) as venv:
            venv.reset(seed=0)
            for t in range(14):
                if interrupt and t in interrupt:
                    interrupt[t]()
                actions = [{"delta": (t * 7 + i) % 5 - 2} for i in range(4)]
                obs, rewards, _, truncated, _ = venv.step(actions)
                rows.append(([o["count"] for o in obs], rewards.tolist(), truncated.tolist()))
        return rows

    def kill() -> None:
        server.stop(signal.SIGKILL)
        server.start()

    try:
        uninterrupted = run(None)
        assert any(any(row[2]) for row in uninterrupted)  # episodes do end and autoreset
        assert run({5: kill, 9: kill}, resume=True, checkpoint_every=2) == uninterrupted
    finally:
        server.stop(signal.SIGKILL)


def test_resume_needs_servers_that_keep_checkpoints() -> None:
    with (
        run_server("counter") as server,
        pytest.raises(ValueError, match=r"keeps no checkpoints .*--checkpoint-dir"),
    ):
        ecotone.VectorEnv(server.url, 2, resume=True)


def test_an_unseeded_episode_with_no_checkpoint_is_reported_lost(tmp_path: Path) -> None:
    """A server that cannot be saved keeps no checkpoint of an unseeded episode: the sub-env
    is reported lost (never silently restarted), and `restart` brings it back."""
    server = Served("counter", tmp_path / "c", _free_port())
    server.start()
    try:
        with ecotone.VectorEnv(server.url, 2, resume=True, errors="info") as venv:
            venv.reset()  # no seed: the episode cannot be replayed
            assert venv._resumer is not None
            for trail in venv._resumer.trails.of:  # as if its checkpoints were never written
                trail.checkpointed, trail.key = None, "0" * 32
            server.stop(signal.SIGKILL)
            server.start()
            _, _, _, truncated, infos = venv.step([{"delta": 1}] * 2)
            assert truncated.all() and infos["episode_lost"].all(), infos
            assert "cannot be resumed" in infos["error"][0]
            assert list(infos["error_code"]) == ["not_resumed"] * 2
            observations, _ = venv.restart([0, 1], seed=0)
            assert [o["count"] for o in observations] == [0, 0]
            _, rewards, *_ = venv.step([{"delta": 2}] * 2)
            assert np.array_equal(rewards, [2.0, 2.0])
    finally:
        server.stop(signal.SIGKILL)


async def test_the_async_face_resumes_too(two: tuple[Served, Served]) -> None:
    a, b = two

    async def play(kill_at: int | None) -> list[Any]:
        seen = []
        async with ecotone.AsyncVectorEnv([a.url, b.url], 4, resume=True) as venv:
            observations, _ = await venv.reset(seed=1)
            for t in range(8):
                if t == kill_at:
                    a.stop(signal.SIGKILL)
                    a.start()
                observations, *_ = await venv.step(_moves(observations, t))
                seen.append([o["fen"] for o in observations])
        return seen

    assert await play(kill_at=3) == await play(kill_at=None)
