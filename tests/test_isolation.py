"""A crash of env code costs one session, not the server; and SIGTERM ends the server within
its grace period whatever env code does.

* Each session of an isolated env (`isolation = "process"`, or `serve --isolate`) runs in a
  process of its own, forked by the env's zygote: `os.abort()`, a segfault
  (`ctypes.string_at(0)`) and `os._exit(3)` in one session's env are that session's
  `env_error` (saying how its process died), while 63 other sessions on the same server
  step before and after; the session takes a reset (a fresh process) and goes on.
* A hung call is killed at its deadline; a killed env's session, on a server with
  checkpoints, resumes with `ecotone.connect(..., resume=True)` from its last checkpoint.
* No worker outlives its session or its server: closed sessions leave no process, and
  neither does a server stopped, or killed with SIGKILL (read from /proc).
* SIGTERM to a real `ecotone serve` whose inline env blocks the event loop (a step that
  sleeps): the process ends at the hard deadline (drain + 2 x shutdown + margin), saying why.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.client.errors import EnvError, ServerError
from ecotone.kernel import Limits
from ecotone.kernel.config import ServerConfig, SnapshotConfig
from ecotone.rubrics import Fn
from ecotone.serving import BackgroundServer, build_engine
from tests import hostile_envs
from tests.conftest import ecotone_serving, make_registry, run_server, wait_until

ZYGOTE = "ecotone.server.isolation.zygote"


# --- what /proc says ------------------------------------------------------------------------------


def _parent(pid: int) -> int | None:
    """The parent of `pid` (None: no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """Whether `pid` is a process, a zombie included (it is gone once reaped)."""
    return Path(f"/proc/{pid}").exists()


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == pid:
            found.add(int(entry.name))
    return found


def zygotes(server: int) -> set[int]:
    """The zygotes `server` started."""
    return {
        pid
        for pid in children(server)
        if ZYGOTE.encode() in _cmdline(pid)  # not a test's other children
    }


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def workers(server: int) -> set[int]:
    """The worker processes of `server`'s zygotes."""
    return {pid for zygote in zygotes(server) for pid in children(zygote)}


# --- crashes cost one session ---------------------------------------------------------------

CRASHES = {
    "abort": "killed by signal SIGABRT (6)",
    "segfault": "killed by signal SIGSEGV (11)",
    "exit": "exited with status 3",
}


@pytest.fixture(scope="module")
def crashing() -> Iterator[str]:
    with run_server("crashing", plugins=[hostile_envs]) as server:
        yield server.url
    assert not zygotes(os.getpid()), "a zygote outlived its server"


@pytest.mark.parametrize("how", list(CRASHES))
def test_a_crash_in_one_sessions_env_costs_that_session_and_63_others_go_on(
    crashing: str, how: str
) -> None:
    with ecotone.Connection(crashing) as conn:
        sessions = [conn.open() for _ in range(64)]
        pids = {session.reset().observation["pid"] for session in sessions}
        assert len(pids) == 64 and os.getpid() not in pids  # a process per session
        assert pids <= workers(os.getpid())
        for session in sessions:  # every session steps before
            assert session.step({}).observation["count"] == 1
        victim, others = sessions[0], sessions[1:]
        with pytest.raises(EnvError) as raised:
            victim.step({"do": how})
        error = raised.value
        assert error.code == "env_error"
        assert f"the env's process died in step: {CRASHES[how]}" in error.message
        assert error.details["reason"] == "env_lost"
        for session in others:  # and every other after
            assert session.step({}).observation["count"] == 2
        with pytest.raises(EnvError, match="earlier"):  # the session says so until a reset
            victim.step({})
        first = victim.reset()  # a fresh process
        assert first.observation["pid"] not in pids
        assert victim.step({}).observation["count"] == 1
        for session in sessions:
            session.close()
        # a closed session's process is gone (reaped) by the time the close is answered
        assert not workers(os.getpid())


def test_a_hung_call_is_killed_at_its_deadline_and_the_session_resets() -> None:
    limits = Limits(call_timeout=1.0)
    with run_server("crashing", limits=limits, plugins=[hostile_envs]) as server:
        with ecotone.connect(server.url) as env:
            pid = env.reset().observation["pid"]
            started = time.monotonic()
            with pytest.raises(ServerError) as raised:
                env.step({"do": "hang"})
            assert raised.value.code == "timeout"
            assert time.monotonic() - started < 10.0
            assert wait_until(lambda: not alive(pid), timeout=10)  # killed, and reaped
            fresh = env.reset().observation["pid"]
            assert fresh != pid
            assert env.step({}).observation["count"] == 1


def test_a_killed_envs_session_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    flag = tmp_path / "abort-once"
    snapshots = SnapshotConfig(checkpoint_dir=str(tmp_path / "checkpoints"))
    with run_server("crashing", snapshots=snapshots, plugins=[hostile_envs]) as server:
        env = ecotone.connect(server.url, resume=True, checkpoint_every=3)
        try:
            env.reset(seed=1)
            for _ in range(5):
                first_pid = env.step({}).observation["pid"]
            flag.touch()  # the next step aborts its env's process, once
            result = env.step({"do": "abort_once", "flag": str(flag)})
            assert not flag.exists()  # it did abort
            # resumed from the checkpoint at step 3, steps 4 and 5 replayed, 6 made again
            assert result.observation["count"] == 6
            assert result.observation["pid"] != first_pid
            assert env.state()["step_count"] == 6
            assert env._resumer is not None and env._resumer.resumes == 1  # in place, once
            assert env.step({}).observation["count"] == 7
            # a step that kills its env each time is raised after one resume, not retried
            with pytest.raises(EnvError, match="SIGABRT"):
                env.step({"do": "abort"})
        finally:
            env.close()


def test_a_killed_zygote_costs_its_sessions_and_the_next_open_starts_another() -> None:
    with run_server("crashing", plugins=[hostile_envs]) as server:
        with ecotone.Connection(server.url) as conn:
            first = conn.open()
            pid = first.reset().observation["pid"]
            zygote = _parent(pid)
            assert zygote is not None and ZYGOTE.encode() in _cmdline(zygote)
            os.kill(zygote, signal.SIGKILL)
            assert wait_until(lambda: not alive(pid))  # its worker went with it
            with pytest.raises(EnvError) as raised:
                first.step({})
            assert raised.value.details["reason"] == "env_lost"
            assert "its zygote died too" in raised.value.message
            second = conn.open()  # a new zygote
            fresh = second.reset().observation["pid"]
            assert _parent(fresh) not in (None, zygote)
            assert first.reset().observation["pid"] != pid  # the first session goes on too
            assert first.step({}).observation["count"] == 1


def test_an_isolated_session_snapshots_restores_and_forks() -> None:
    with run_server("crashing", plugins=[hostile_envs]) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.step({})
            saved = env.snapshot()
            env.step({})
            assert env.restore(saved).step_count == 1
            assert env.step({}).observation["count"] == 2
            copies = env.fork(2)
            pids = {copy.step({}).observation["pid"] for copy in copies}
            assert len(pids) == 2 and env.step({}).observation["pid"] not in pids
            assert [copy.state()["count"] for copy in copies] == [3, 3]
            for copy in copies:
                copy.close()


def test_serve_isolate_runs_any_env_apart_and_a_base_exception_is_still_an_env_error() -> None:
    # thread_hostile says nothing of isolation: the server's `isolate` puts it in processes
    with run_server("thread_hostile", isolate=True, plugins=[hostile_envs]) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            assert len(workers(os.getpid())) == 1
            with pytest.raises(EnvError, match="SystemExit"):
                env.step({"do": "system_exit"})
            assert env.step({}).observation["steps"] == 1  # raised, not died: it goes on


def test_an_async_env_with_a_rubric_runs_isolated() -> None:
    config = ServerConfig(
        env="async_counter", port=0, isolate=True, rubric="tests.test_isolation:TWICE"
    )
    with BackgroundServer(config, registry=make_registry()) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            assert env.step({"delta": 3}).reward == 6.0  # the rubric scores in the server
            assert workers(os.getpid())


def test_a_multi_agent_env_cannot_be_isolated() -> None:
    with pytest.raises(ValueError, match="multi-agent env, which cannot run in a process"):
        build_engine(ServerConfig(env="cards", isolate=True), make_registry())


def test_an_env_class_asks_for_isolation_with_a_known_word() -> None:
    from ecotone.kernel import EnvDefinitionError, EnvSpec

    class Odd(hostile_envs.CrashingEnv):
        isolation = "thread"

    with pytest.raises(EnvDefinitionError, match="isolation must be one of process"):
        EnvSpec.from_class(Odd)


# --- no worker outlives its server --------------------------------------------------------------


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_no_worker_outlives_a_real_server_stopped_or_killed(stop: str) -> None:
    with ecotone_serving("counter", "--isolate", "--port", "0", "--shutdown-timeout", "2") as proc:
        assert proc.stderr is not None
        url = re.search(r"at (ws://\S+)", proc.stderr.readline())
        assert url
        conn = ecotone.Connection(url.group(1))
        sessions = [conn.open() for _ in range(3)]
        for session in sessions:
            session.reset()
            session.step({"delta": 1})
        (zygote,) = zygotes(proc.pid)
        spawned = children(zygote)
        assert len(spawned) == 3
        proc.send_signal(getattr(signal, stop))
        proc.wait(timeout=30)
        # the server's death takes the zygote (PR_SET_PDEATHSIG), and the zygote's its workers
        assert wait_until(lambda: not any(alive(pid) for pid in {zygote, *spawned}), timeout=10)
        conn.close()


# --- SIGTERM ends the process whatever env code does -----------------------------------------


def test_sigterm_ends_a_server_whose_inline_env_blocks_the_event_loop() -> None:
    # The inline env's step sleeps on the event loop: trio never sees the signal, so only a
    # deadline armed by the signal's handler itself can end the process.
    with ecotone_serving(
        "inline_hostile",
        "--port",
        "0",
        "--drain-timeout",
        "1",
        "--shutdown-timeout",
        "1",
        python=("-m", "tests.serve_with_test_envs"),
    ) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"at (ws://\S+)", line)
        assert url, line
        conn = ecotone.Connection(url.group(1))
        client = conn.open()
        client.reset()
        action = conn.core.raw({"do": "sleep", "seconds": 120})
        conn.send(
            ecotone.specs.Step(id=conn.core.next_id(), session=client.session_id, action=action)
        )
        time.sleep(0.5)  # the step is sleeping, and the loop with it
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)  # without the deadline: the step's 120 s
        took = time.monotonic() - started
        # drain 1 + 2 x shutdown 1 + the 3 s margin = 6 s; generous for a busy machine
        assert 5.0 < took < 20.0, took
        assert code == 1
        said = proc.stderr.read()
        assert "SIGTERM came 6s ago and the shutdown has not ended" in said, said
        assert "env code holds the event loop" in said
        conn.close()


def _twice(action: Any, observation: Any) -> float:
    return 2.0 * action.delta


TWICE = Fn(_twice, name="twice")
"""A rubric doubling each step's delta (a server's `rubric`, by MODULE:NAME)."""
