"""Draining in one order on SIGTERM (`ecotone serve`, a real process): the server stops
admitting (`open`, `reset`: `shutting_down`) and reports not ready, lets running episodes go
on for `drain_timeout`, checkpoints the sessions left, tells their clients, and exits. 64
sessions mid-episode behind a test-run TCP proxy standing in for a Kubernetes Service (it
sends each new connection to the first backend whose `/ready` is 200): every one either
finishes on the draining server or resumes on the second from its checkpoint, the rest of its
episode equal to an uninterrupted one."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import ecotone
from tests.conftest import wait_until
from tests.test_checkpoints import _free_port


class Serve:
    """`ecotone serve` (with the test envs) as a process of its own, on a fixed port."""

    def __init__(self, env: str, port: int, *args: str) -> None:
        self.port = port
        command = [sys.executable, "-m", "tests.serve_with_test_envs", "serve", env]
        command += ["--port", str(port), *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while ready(port) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.stderr())
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        self.process.kill()
        return self.process.stderr.read().decode()  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        self.process.stderr.close()  # type: ignore[union-attr]


def ready(port: int) -> tuple[int, dict[str, Any]] | None:
    """`GET /ready`'s status and body, or None when nothing answers."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/ready")
        reply = conn.getresponse()
        body = json.loads(reply.read())
        conn.close()
        return reply.status, body
    except (OSError, http.client.HTTPException, ValueError):
        return None


class ServiceProxy:
    """A TCP proxy standing in for a Service: each new connection goes to the first backend
    whose `/ready` answers 200, and is then piped byte for byte until either side ends."""

    def __init__(self, backends: Sequence[int]) -> None:
        self.backends = list(backends)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.routed: list[int] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._route, args=(client,), daemon=True).start()

    def _route(self, client: socket.socket) -> None:
        for port in self.backends:
            answer = ready(port)
            if answer is not None and answer[0] == 200:
                break
        else:
            client.close()  # no ready backend: the client retries
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self.routed.append(port)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def close(self) -> None:
        self._closing = True
        self.listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


@pytest.fixture
def servers() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for server in started:
        server.stop()


def test_sigterm_stops_admitting_lets_episodes_run_then_says_the_session_is_lost(
    servers: list[Serve],
) -> None:
    server = Serve("slow", _free_port(), "--drain-timeout", "2")
    servers.append(server)
    env = ecotone.connect(server.url)
    env.reset()
    env.step({"sleep": 0})
    assert ready(server.port) == (200, {"status": "ready", "sessions": 1, "capacity": 1024})
    server.process.send_signal(signal.SIGTERM)
    assert wait_until(lambda: (ready(server.port) or (0, {}))[1].get("status") == "draining")
    assert ready(server.port) == (503, {"status": "draining", "sessions": 1, "capacity": 1024})
    with pytest.raises(ecotone.ServerError) as refused:
        ecotone.connect(server.url)  # a new session: refused
    assert refused.value.code == "shutting_down" and "draining" in str(refused.value)
    with pytest.raises(ecotone.ServerError) as refused:
        env.reset()  # a new episode: refused
    assert refused.value.code == "shutting_down"
    assert env.step({"sleep": 0, "tag": "on"}).observation["tag"] == "on"  # the episode goes on
    with pytest.raises(ecotone.ServerError) as told:
        env.step({"sleep": 5})  # in flight when the drain ends: its client is told
    assert told.value.code == "shutting_down"
    assert "keeps no checkpoints" in str(told.value) and "--checkpoint-dir" in str(told.value)
    assert server.process.wait(30) == 0


def _play(env: Any, seed: int, moves: int, pace: float = 0.0) -> list[str]:
    """A seeded chess game, each move the i-th legal one (mod their number): its positions."""
    result = env.reset(seed=seed)
    seen = [result.observation["fen"]]
    for i in range(moves):
        if result.finished:
            break
        legal = result.observation["legal_moves"]
        result = env.step({"move": legal[i % len(legal)]})
        seen.append(result.observation["fen"])
        if pace:
            time.sleep(pace)
    return seen


SESSIONS = 64
SHORT, LONG = 6, 60


def test_64_sessions_each_finish_or_resume_on_another_replica_step_for_step(
    servers: list[Serve], tmp_path: Path
) -> None:
    directory = str(tmp_path / "checkpoints")
    first = Serve("chess", _free_port(), "--checkpoint-dir", directory, "--drain-timeout", "2")
    servers.append(first)
    second = Serve("chess", _free_port(), "--checkpoint-dir", directory)  # the same key
    servers.append(second)
    proxy = ServiceProxy([first.port, second.port])
    moves = [SHORT if i % 2 == 0 else LONG for i in range(SESSIONS)]
    with ecotone.connect("inproc://chess") as reference:
        expected = [_play(reference, seed, moves[seed]) for seed in range(SESSIONS)]
    results: dict[int, list[str]] = {}
    resumes: dict[int, int] = {}
    errors: list[BaseException] = []
    started = threading.Barrier(SESSIONS + 1)

    def client(seed: int) -> None:
        try:
            with ecotone.connect(proxy.url, resume=True) as env:
                env.reset(seed=seed)
                started.wait(60)
                results[seed] = _play(env, seed, moves[seed], pace=0.05)
                assert env._resumer is not None
                resumes[seed] = env._resumer.resumes
        except BaseException as exc:  # reported below
            errors.append(exc)
            started.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(SESSIONS)]
    for thread in threads:
        thread.start()
    try:
        started.wait(60)  # every session open on the first server, its episode begun
        assert set(proxy.routed) == {first.port}
        time.sleep(0.2)
        first.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(180)
        assert not errors, errors
        assert first.process.wait(60) == 0
    finally:
        proxy.close()
    assert sorted(results) == list(range(SESSIONS))
    for seed in range(SESSIONS):
        assert results[seed] == expected[seed], f"session {seed} diverged"
    resumed = [seed for seed in range(SESSIONS) if resumes[seed]]
    # The short games ended while the server drained; the long ones outlived the drain and
    # went on at the second server from their checkpoints (reached through the proxy).
    assert all(moves[seed] == LONG for seed in resumed)
    assert len(resumed) >= SESSIONS // 4, resumes
    assert second.port in proxy.routed


@pytest.mark.parametrize("columns", [False, True], ids=["step_many", "step_columns"])
def test_a_draining_server_refuses_the_reset_items_of_a_batch_and_steps_the_rest(
    columns: bool,
) -> None:
    """A reset inside `step_many` (or `step_columns`) starts an episode, as a `reset` does: a
    draining server refuses it `shutting_down`; the batch's steps go on."""
    from ecotone.specs import Error, ResetArgs, StepColumns, StepItem, StepMany

    with ecotone.Connection.open_url("inproc://counter") as connection:
        first, second = connection.open(), connection.open()
        first.reset(seed=0)
        second.reset(seed=0)
        connection.channel.engine.drain()  # type: ignore[attr-defined]  # an inproc channel
        core = connection.core
        if columns:
            frame: Any = StepColumns(
                id=core.next_id(),
                sessions=[first.session_id, second.session_id],
                actions=core.raw([{"delta": 2}, None]),
                resets=[1],
            )
        else:
            frame = StepMany(
                id=core.next_id(),
                steps=[
                    StepItem(session=first.session_id, action=core.raw({"delta": 2})),
                    StepItem(session=second.session_id, reset=ResetArgs(seed=1)),
                ],
            )
        answer: Any = connection.request(frame)
        if columns:
            stepped, refused = answer.observations[0], answer.errors[1]
        else:
            stepped, refused = answer.results
            stepped = stepped.observation
        assert isinstance(refused, Error) and refused.code == "shutting_down", refused
        assert json.loads(bytes(stepped))["count"] == 2
        with pytest.raises(ecotone.ServerError, match="shutting_down"):
            second.reset(seed=1)  # as a plain reset is
