"""Shared fixtures: real servers on 127.0.0.1, a registry with the test envs, a hook recorder."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

import attrs
import pytest

import ecotone
from ecotone.kernel import Limits, Registry, exposure
from ecotone.kernel.config import (
    AccessConfig,
    AuthConfig,
    McpConfig,
    OpenEnvConfig,
    ServerConfig,
    SnapshotConfig,
    TlsConfig,
)
from ecotone.serving import BackgroundServer
from tests import envs

pytest_plugins = ["tests.engines"]  # the container engines' fixtures


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many of the docs' code blocks ran, and how many say they cannot run here
    (tests/test_docs.py), when that test ran."""
    docs = sys.modules.get("tests.test_docs")
    tally = getattr(docs, "TALLY", None)
    if not tally:
        return
    ran = tally.get("ran", 0)
    marks = {k.removeprefix("marked: "): v for k, v in tally.items() if k.startswith("marked")}
    shown = ", ".join(f"{n} {why}" for why, n in sorted(marks.items())) or "none"
    terminalreporter.write_line(
        f"docs: {ran} code blocks run, {sum(marks.values())} marked not runnable here "
        f"({shown}), {tally.get('skipped', 0)} skipped (what they need is not here)"
    )


class SessionRecorder:
    """A plugin that records the lifecycle hooks a server fires (called from its thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.opened: list[tuple[str, str]] = []
        self.closed: list[tuple[str, str, str]] = []
        self.steps: list[tuple[str, str, Any, Any]] = []
        self.episodes: list[tuple[str, str, Any]] = []

    @ecotone.hookimpl
    def ecotone_session_opened(self, session_id: str, env: str) -> None:
        with self._lock:
            self.opened.append((session_id, env))

    @ecotone.hookimpl
    def ecotone_session_closed(self, session_id: str, env: str, reason: str) -> None:
        with self._lock:
            self.closed.append((session_id, env, reason))

    @ecotone.hookimpl
    def ecotone_episode_started(
        self, session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
    ) -> None:
        with self._lock:
            self.episodes.append((session_id, env, observation))

    @ecotone.hookimpl
    def ecotone_step_completed(
        self, session_id: str, env: str, action: Any, observation: Any, duration_s: float
    ) -> None:
        with self._lock:
            self.steps.append((session_id, env, action, observation))

    @property
    def open_sessions(self) -> set[str]:
        """Sessions the server opened and has not closed: its session table, seen from hooks."""
        with self._lock:
            return {s for s, _ in self.opened} - {s for s, _, _ in self.closed}

    def close_reason(self, session_id: str) -> str | None:
        with self._lock:
            for sid, _, reason in self.closed:
                if sid == session_id:
                    return reason
        return None


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (a bounded loop); return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def run_program(*args: str, timeout: float) -> tuple[int, str, str]:
    """Run a Python program in its own session: its return code, stdout and stderr. One still
    running after `timeout` is killed with everything it started, then TimeoutExpired raised."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


def make_registry(*plugins: object) -> Registry:
    """Installed plugins (entry points) plus the test envs plus `plugins`."""
    registry = Registry.discover()
    registry.register(envs, "ecotone-tests")
    for plugin in plugins:
        registry.register(plugin)
    return registry


@attrs.define
class RunningServer:
    url: str
    recorder: SessionRecorder

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    @property
    def ws_url(self) -> str:
        """The same host and port as a ws:// URL (the http transport also serves WebSocket)."""
        return "ws://" + self.url.split("://", 1)[1]


class ServerOptions(TypedDict, total=False):
    """What `run_server` takes besides the env: the `ServerConfig` fields a test sets."""

    limits: Limits
    host: str
    transport: str
    web: bool
    auth: AuthConfig
    access: AccessConfig
    mcp: McpConfig
    tls: TlsConfig
    openenv: OpenEnvConfig
    tasks: dict[str, str]
    snapshots: SnapshotConfig
    isolate: bool


@contextlib.contextmanager
def run_server(
    env: str, *, plugins: Sequence[object] = (), **options: Unpack[ServerOptions]
) -> Iterator[RunningServer]:
    """A real server in a background thread, serving `env` on a free port (websocket by
    default; `transport` picks another: http, tcp, or unix with the socket's path as `host`;
    `web` serves the web UI too, over http; the other options as in the config file)."""
    recorder = SessionRecorder()
    registry = make_registry(recorder, *plugins)
    config = ServerConfig(env=env, port=0, **options)
    with BackgroundServer(config, registry=registry) as server:
        yield RunningServer(server.url, recorder)


@contextlib.contextmanager
def run_bare_server(env: str, *, plugins: Sequence[object] = ()) -> Iterator[str]:
    """A real server like `run_server`'s without its hook recorder, whose step hook sends
    every batch down the engine's per-item path: this one's batches take the fast passes
    (`step_many`'s and `step_columns`'s). Yields its URL."""
    config = ServerConfig(env=env, port=0)
    with BackgroundServer(config, registry=make_registry(*plugins)) as server:
        yield server.url


@pytest.fixture
def counter_server() -> Iterator[RunningServer]:
    with run_server("counter") as server:
        yield server


@pytest.fixture
def counter_url(counter_server: RunningServer) -> str:
    return counter_server.url


@pytest.fixture
def slow_server() -> Iterator[RunningServer]:
    with run_server("slow") as server:
        yield server


OPENENV_PYTHON_VAR = "OPENENV_PYTHON"
_OPENENV_PYTHON = os.environ.get(OPENENV_PYTHON_VAR, "")


@pytest.fixture(scope="session")
def openenv_python() -> str:
    """The python of the separate venv holding the real `openenv` package (OpenEnv's client,
    CLI and servers run in subprocesses with it). Unset: a failure on CI, a skip elsewhere."""
    path = _OPENENV_PYTHON
    if not path:
        reason = (
            f"{OPENENV_PYTHON_VAR} is not set: point it at the python of a venv with openenv "
            "installed (`make pytest` sets it to .venv-openenv/bin/python)"
        )
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{OPENENV_PYTHON_VAR}={path} is not an executable python", pytrace=False)
    return path


@pytest.fixture(autouse=True)
def _fresh_env_records() -> Iterator[None]:
    envs.ClosingEnv.instances.clear()
    envs.AsyncCounterEnv.closes.clear()
    yield
    envs.ClosingEnv.instances.clear()
    envs.AsyncCounterEnv.closes.clear()
    # A test that served beyond loopback in this process (a test-made namespace's address)
    # must not make the coding env of a later test fail closed as if it were exposed.
    exposure._reset_for_tests()


@contextlib.contextmanager
def ecotone_serving(
    *args: object, cwd: Path | None = None, python: Sequence[str] = ("-m", "ecotone")
) -> Iterator[subprocess.Popen[str]]:
    """`python -m ecotone serve ARGS` as a subprocess, without this process's ECOTONE_*
    settings; stderr is piped (the server names its URL there). Killed and reaped at exit if
    it is still running. `python`: what runs instead of `-m ecotone` (a script that ends in
    `ecotone.cli.main`, say), given the same `serve ARGS`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    proc = subprocess.Popen(
        [sys.executable, *python, "serve", *map(str, args)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
