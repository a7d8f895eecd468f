"""Interop with the real `openenv` package (0.10.0), both ways. OpenEnv runs in subprocesses
with the python of its own venv (OPENENV_PYTHON; see the `openenv_python` fixture):

* OpenEnv's `GenericEnvClient` (async and `.sync()`) and its `openenv validate` CLI against
  ecotone servers;
* ecotone's client (`openenv+http://`) against a real OpenEnv server under uvicorn
  (tests/openenv_fixtures/echo_server.py).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import selectors
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import ecotone
from ecotone.kernel import Limits
from tests.conftest import RunningServer, run_server, wait_until

FIXTURES = Path(__file__).parent / "openenv_fixtures"
DRIVER = FIXTURES / "generic_client_driver.py"
SUBPROCESS_TIMEOUT = 60


def run_openenv(python: str, *args: str) -> Any:
    """Run a fixture program with the openenv venv's python; return its JSON output."""
    done = subprocess.run(
        [python, *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT
    )
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stderr}"
    return json.loads(done.stdout)


def results(run: list[dict[str, Any]]) -> list[Any]:
    """The values of a driver run, insisting that every op succeeded."""
    for item in run:
        assert "result" in item, item
    return [item["result"] for item in run]


# --- OpenEnv's client against ecotone servers ------------------------------------------------

ECHO_OPS: list[list[Any]] = [
    ["reset", {"seed": 3, "episode_id": "ep-echo", "max_steps": 5}],
    ["step", {"message": "hello"}],
    ["step", {"message": "interop"}],
    ["state"],
    ["step", {"message": ""}],
]
COUNTER_OPS: list[list[Any]] = [
    ["reset", {"seed": 1, "start": 2}],
    ["step", {"delta": 3}],
    ["step", {"delta": "x"}],  # invalid: OpenEnv's client raises, the session goes on
    ["step", {"delta": -1}],
    ["state"],
]
TRANSPORTS = ("http", "websocket")


@pytest.fixture(scope="module")
def generic_client_runs(
    openenv_python: str,
) -> Iterator[tuple[dict[str, Any], dict[str, RunningServer]]]:
    """echo and counter on both transports, each played by OpenEnv's client (async, then
    sync) in one subprocess; yields its report and the servers (still running)."""
    with contextlib.ExitStack() as stack:
        servers: dict[str, RunningServer] = {}
        targets: dict[str, Any] = {}
        for transport in TRANSPORTS:
            for env, ops in (("echo", ECHO_OPS), ("counter", COUNTER_OPS)):
                name = f"{env}-{transport}"
                servers[name] = stack.enter_context(run_server(env, transport=transport))
                url = f"http://127.0.0.1:{servers[name].port}"
                targets[name] = {"url": url, "ops": ops}
        spec = json.dumps({"targets": targets})
        report = run_openenv(openenv_python, str(DRIVER), "episodes", spec)
        yield report, servers


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_openenv_client_plays_ecotone_echo(
    generic_client_runs: tuple[dict[str, Any], dict[str, RunningServer]],
    transport: str,
    mode: str,
) -> None:
    report, _ = generic_client_runs
    reset, hello, interop, state, empty = results(report[f"echo-{transport}"][mode])
    assert reset["observation"]["echoed"] == ""
    assert (reset["reward"], reset["done"]) == (None, False)
    assert hello["observation"]["echoed"] == "hello"
    assert hello["observation"]["length"] == 5
    assert hello["reward"] == pytest.approx(0.5)
    assert hello["done"] is False
    assert interop["observation"]["length"] == 7
    assert state["episode_id"] == "ep-echo"
    assert (state["step_count"], state["max_steps"], state["last_message"]) == (2, 5, "interop")
    assert empty["done"] is True
    assert empty["reward"] == 0


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_openenv_client_plays_ecotone_counter_and_sees_validation_errors(
    generic_client_runs: tuple[dict[str, Any], dict[str, RunningServer]],
    transport: str,
    mode: str,
) -> None:
    report, _ = generic_client_runs
    reset, up, invalid, down, state = report[f"counter-{transport}"][mode]
    assert reset["result"]["observation"]["count"] == 2
    assert up["result"]["observation"]["count"] == 5
    assert up["result"]["reward"] == 3
    assert invalid["error"].startswith("RuntimeError: Server error: Invalid message")
    assert "(code: VALIDATION_ERROR)" in invalid["error"]
    assert "Expected `int`, got `str` (field `delta`)" in invalid["error"]  # why, and where
    assert down["result"]["observation"]["count"] == 4  # the same episode went on
    assert (state["result"]["count"], state["result"]["step_count"]) == (4, 2)


def released(server: RunningServer) -> bool:
    return not server.recorder.open_sessions


def test_openenv_client_close_releases_ecotone_sessions(
    generic_client_runs: tuple[dict[str, Any], dict[str, RunningServer]],
) -> None:
    _, servers = generic_client_runs
    for name, server in servers.items():
        assert len(server.recorder.opened) == 2, name  # one session per client (async, sync)
        assert wait_until(functools.partial(released, server)), name
        reasons = {reason for _, _, reason in server.recorder.closed}
        assert reasons == {"client"}, (name, reasons)  # closed by its `close` message


def test_openenv_client_past_capacity_gets_capacity_reached(openenv_python: str) -> None:
    with run_server("counter", transport="http", limits=Limits(max_sessions=2)) as server:
        url = f"http://127.0.0.1:{server.port}"
        first, second, third, late = run_openenv(openenv_python, str(DRIVER), "capacity", url, "3")
    assert first["result"]["observation"]["count"] == 0
    assert second["result"]["observation"]["count"] == 0
    assert "CAPACITY_REACHED" in third["error"]
    assert "Server at capacity: 2/2 sessions active" in third["error"]
    assert late["result"]["observation"]["count"] == 0  # closing the first freed a slot


def test_openenv_validate_passes_against_an_ecotone_server(openenv_python: str) -> None:
    cli = Path(openenv_python).parent / "openenv"
    with run_server("counter", transport="http") as server:
        url = f"http://127.0.0.1:{server.port}"
        done = subprocess.run(
            [str(cli), "validate", "--url", url, "--json"],
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert report["standard_version"] == "1.0.0"
    assert report["mode"] == "simulation"
    checks = {c["id"]: c["passed"] for c in report["criteria"]}
    assert checks == {
        "openapi_version_available": True,
        "health_endpoint": True,
        "metadata_endpoint": True,
        "schema_endpoint": True,
        "mcp_endpoint": True,
        "mode_endpoint_consistency": True,
    }


# --- ecotone's client against a real OpenEnv server ------------------------------------------


class EchoObservation(msgspec.Struct, kw_only=True):
    """The OpenEnv echo env's observation, decoded by ecotone's client."""

    echoed_message: str
    message_length: int
    reward: float | None = None
    done: bool = False


def _read_port(proc: subprocess.Popen[str], timeout: float) -> int:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"the OpenEnv server printed no port within {timeout}s")
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        raise RuntimeError(f"the OpenEnv server did not start: {line!r}")
    return int(line.split()[1])


def _wait_healthy(proc: subprocess.Popen[str], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the OpenEnv server exited with {proc.returncode}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise TimeoutError(f"the OpenEnv server was not healthy within {timeout}s")


@pytest.fixture(scope="module")
def openenv_echo_url(openenv_python: str) -> Iterator[str]:
    """A real OpenEnv server (OpenEnv's create_fastapi_app under uvicorn) serving an echo env."""
    proc = subprocess.Popen(
        [openenv_python, str(FIXTURES / "echo_server.py")],
        stdout=subprocess.PIPE,
        stderr=None,  # shown by pytest if a test fails
        text=True,
    )
    try:
        port = _read_port(proc, timeout=30)
        _wait_healthy(proc, port, timeout=30)
        yield f"openenv+http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_ecotone_sync_client_plays_an_openenv_server(openenv_echo_url: str) -> None:
    with ecotone.connect(openenv_echo_url) as env:
        reset = env.reset(episode_id="ep-1")
        assert reset.observation["echoed_message"] == ""
        assert (reset.reward, reset.done) == (None, False)
        step = env.step({"message": "hello"})
        assert step.observation["echoed_message"] == "hello"
        assert step.observation["message_length"] == 5
        assert (step.reward, step.done) == (5, False)
        state = env.state()
        assert state["episode_id"] == "ep-1"
        assert (state["step_count"], state["last_message"]) == (1, "hello")
        last = env.step({"message": ""})
        assert last.done is True


def test_ecotone_client_decodes_openenv_observations_into_types(openenv_echo_url: str) -> None:
    with ecotone.connect(openenv_echo_url, observation_type=EchoObservation) as env:
        assert env.reset().observation == EchoObservation(echoed_message="", message_length=0)
        step = env.step({"message": "typed"})
        assert step.observation == EchoObservation(
            echoed_message="typed", message_length=5, reward=5.0, done=False
        )
        assert step.reward == 5.0


def test_an_invalid_action_to_an_openenv_server_names_the_field(openenv_echo_url: str) -> None:
    with ecotone.connect(openenv_echo_url) as env:
        env.reset()
        with pytest.raises(ecotone.InvalidActionError) as caught:
            env.step({"message": 42})
        assert caught.value.field == "message"
        assert caught.value.code == "invalid_action"
        with pytest.raises(ecotone.InvalidActionError) as extra:
            env.step({"message": "x", "loudness": 11})
        assert extra.value.field == "loudness"
        assert env.step({"message": "still here"}).observation["message_length"] == 10


def test_ecotone_describes_an_openenv_server(openenv_echo_url: str) -> None:
    with ecotone.connect(openenv_echo_url) as env:
        info = env.describe()
    assert info.name == "EchoEnvironment"
    assert info.action_schema["required"] == ["message"]
    assert "echoed_message" in info.observation_schema["properties"]


async def play_async(url: str) -> list[Any]:
    async with ecotone.aconnect(url, observation_type=EchoObservation) as env:
        out: list[Any] = [(await env.reset()).observation]
        for message in ("one", "three"):
            out.append((await env.step({"message": message})).observation)
        out.append((await env.state())["step_count"])
        try:
            await env.step({"message": None})
        except ecotone.InvalidActionError as exc:
            out.append(exc.field)
        out.append((await env.step({"message": ""})).done)
    return out


EXPECTED_ASYNC = [
    EchoObservation(echoed_message="", message_length=0),
    EchoObservation(echoed_message="one", message_length=3, reward=3.0),
    EchoObservation(echoed_message="three", message_length=5, reward=5.0),
    2,
    "message",
    True,
]


async def test_ecotone_async_client_plays_an_openenv_server_under_trio(
    openenv_echo_url: str,
) -> None:
    assert await play_async(openenv_echo_url) == EXPECTED_ASYNC


def test_ecotone_async_client_plays_an_openenv_server_under_asyncio(
    openenv_echo_url: str,
) -> None:
    assert anyio.run(play_async, openenv_echo_url, backend="asyncio") == EXPECTED_ASYNC


async def test_ecotone_async_client_runs_concurrent_openenv_sessions(
    openenv_echo_url: str,
) -> None:
    got: dict[str, int] = {}

    async def one(message: str) -> None:
        async with ecotone.aconnect(openenv_echo_url) as env:
            await env.reset()
            for _ in range(3):
                result = await env.step({"message": message})
            got[message] = result.observation["message_length"]
            assert (await env.state())["step_count"] == 3

    async with anyio.create_task_group() as tg:
        for message in ("a", "bb", "ccc"):
            tg.start_soon(one, message)
    assert got == {"a": 1, "bb": 2, "ccc": 3}
