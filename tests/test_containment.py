"""Env code cannot take the server down: every env call is a boundary.

Against a real server (websocket on 127.0.0.1), for an env that runs in worker threads, one
that runs inline on the event loop, and one of coroutines: whatever a reset or step raises,
BaseException included, is an `env_error` and the server and its other sessions go on; a
call that outlives its deadline is answered `timeout`, the session can be reset (a fresh env
instance) or closed, and the hung call never holds up anyone else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ecotone
from ecotone.kernel import Limits
from tests import hostile_envs
from tests.conftest import RunningServer, run_server

KINDS = ["thread_hostile", "inline_hostile", "async_hostile"]


def send_step(conn: ecotone.Connection, session: str, action: dict[str, object]) -> None:
    """A step sent without waiting for its answer."""
    frame = ecotone.specs.Step(
        id=conn.core.next_id(), session=session, action=conn.core.raw(action)
    )
    conn.send(frame)


RAISES = ["system_exit", "keyboard_interrupt", "base_exception"]


@pytest.fixture(scope="module")
def hostile() -> Iterator[dict[str, RunningServer]]:
    import contextlib

    limits = Limits(call_timeout=1.0)
    with contextlib.ExitStack() as stack:
        yield {
            kind: stack.enter_context(run_server(kind, limits=limits, plugins=[hostile_envs]))
            for kind in KINDS
        }
    hostile_envs.HANG.set()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("what", RAISES)
def test_a_base_exception_in_step_or_reset_is_env_error_and_the_server_lives(
    hostile: dict[str, RunningServer], kind: str, what: str
) -> None:
    url = hostile[kind].url
    with ecotone.connect(url) as bystander, ecotone.connect(url) as env:
        bystander.reset()
        env.reset()
        with pytest.raises(ecotone.EnvError) as raised:
            env.step({"do": what})
        assert raised.value.code == "env_error"
        with pytest.raises(ecotone.EnvError):
            env.reset(do=what)
        assert env.reset().observation["steps"] == 0  # the session goes on
        assert env.step({}).observation["steps"] == 1
        assert bystander.step({}).observation["steps"] == 1  # and so does everyone else's


@pytest.mark.parametrize("kind", ["thread_hostile", "async_hostile"])
def test_a_hung_step_is_answered_timeout_and_the_session_can_be_reset(
    hostile: dict[str, RunningServer], kind: str
) -> None:
    with ecotone.connect(hostile[kind].url) as env:
        env.reset()
        with pytest.raises(ecotone.ServerError) as raised:
            env.step({"do": "hang"})
        assert raised.value.code == "timeout"
        assert "1.0" in raised.value.message
        with pytest.raises(ecotone.ServerError) as broken:
            env.step({})
        assert broken.value.code == "reset_required"
        assert env.reset().observation["steps"] == 0  # a fresh env instance
        assert env.step({}).observation["steps"] == 1


def test_a_request_may_ask_for_a_shorter_deadline_never_a_longer_one(
    hostile: dict[str, RunningServer],
) -> None:
    with ecotone.connect(hostile["thread_hostile"].url) as env:
        env.reset()
        with pytest.raises(ecotone.ServerError) as raised:
            env.step({"do": "sleep", "seconds": 0.5}, call_timeout=0.1)
        assert raised.value.code == "timeout"
        env.reset()
        with pytest.raises(ecotone.ServerError):  # 5 s asked, the server's 1 s holds
            env.step({"do": "sleep", "seconds": 3.0}, call_timeout=5.0)


def test_many_hung_calls_do_not_starve_other_sessions(
    hostile: dict[str, RunningServer],
) -> None:
    url = hostile["thread_hostile"].url
    hung = []
    for _ in range(45):  # more than trio's 40 worker threads
        conn = ecotone.Connection(url)
        client = conn.open()
        client.reset()
        send_step(conn, client.session_id, {"do": "hang"})
        hung.append(conn)
    with ecotone.connect(url) as fresh:  # a new session on a thread env still opens and steps
        fresh.reset()
        assert fresh.step({}).observation["steps"] == 1
    for conn in hung:
        conn.close()


def test_a_hung_close_never_holds_the_server_and_closing_a_broken_session_answers() -> None:
    with run_server("thread_hostile", limits=Limits(call_timeout=0.5), plugins=[hostile_envs]) as s:
        with ecotone.connect(s.url) as env:
            env.reset()
            with pytest.raises(ecotone.ServerError):
                env.step({"do": "hang"})
        # the session closed with its connection; the hung thread is still there, abandoned


def test_sigterm_stops_a_server_whose_env_hangs_within_its_shutdown_deadline() -> None:
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    env["ECOTONE_LIMITS_SHUTDOWN_TIMEOUT"] = "1"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.serve_with_test_envs",
            "serve",
            "thread_hostile",
            "--port",
            "0",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"at (ws://\S+)", line)
        assert url, line
        conn = ecotone.Connection(url.group(1))
        client = conn.open()
        client.reset()
        action = conn.core.raw({"do": "hang"})
        conn.send(
            ecotone.specs.Step(id=conn.core.next_id(), session=client.session_id, action=action)
        )
        time.sleep(0.3)  # the step is running, and will never return
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        assert time.monotonic() - started < 6.0  # the 1 s shutdown deadline, and then some
        assert code == 0
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
