"""MCP servers nobody here wrote, as ecotone envs (`mcp+stdio:`, `mcp+http://`): the time
and git servers (PyPI, in .venv-mcp) and the reference `everything` and `filesystem` servers
(npm, in .mcp-node), run as the programs they are. Also fastmcp's client, another client
nobody here wrote, against ecotone's own MCP face. Without those installs these tests skip,
except on CI, where that is a failure (`make pytest` makes both)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
from tests.conftest import run_program, run_server, wait_until

ON_CI = os.environ.get("CI", "").lower() in ("true", "1")


def _missing(reason: str) -> None:
    if ON_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def mcp_bin() -> Path:
    """The bin directory of .venv-mcp (mcp-server-time, mcp-server-git, fastmcp)."""
    venv = os.environ.get("MCP_VENV", "")
    if not venv or not (Path(venv) / "bin" / "mcp-server-time").exists():
        _missing("MCP_VENV is not set to a venv with tests/mcp_servers/requirements.txt")
    return Path(venv) / "bin"


@pytest.fixture(scope="module")
def node_bin() -> Path:
    """The npm bin directory of .mcp-node (mcp-server-everything, mcp-server-filesystem)."""
    node = os.environ.get("MCP_NODE", "")
    bin_dir = Path(node) / "node_modules" / ".bin"
    if not node or not (bin_dir / "mcp-server-everything").exists():
        _missing("MCP_NODE is not set to a folder with tests/mcp_servers' npm packages")
    return bin_dir


def _children_running(word: str) -> list[int]:
    """Pids of this process's descendants whose command line holds `word`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                ppid_chain = f.read()
        except OSError:
            continue
        if word in cmdline and "pytest" not in cmdline and ppid_chain:
            found.append(int(entry))
    return found


def test_the_time_server_is_an_env_whose_actions_are_checked_against_each_tools_schema(
    mcp_bin: Path,
) -> None:
    name = f"mcp+stdio:{mcp_bin}/mcp-server-time --local-timezone UTC"
    with ecotone.connect(f"inproc://{name}") as env:
        first = env.reset()
        tools = {t["name"]: t for t in first.observation["tools"]}
        assert {"get_current_time", "convert_time"} <= set(tools)
        assert "get_current_time" in first.observation["text"]
        result = env.step({"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}})
        seen = result.observation
        assert seen["is_error"] is False and result.reward == 0.0
        assert seen["structured"]["timezone"] == "Asia/Tokyo"
        assert "Asia/Tokyo" in seen["text"] and seen["content"][0]["type"] == "text"
        with pytest.raises(ecotone.InvalidActionError) as unknown:
            env.step({"tool": "get_weather"})
        assert unknown.value.details["field"] == "tool"
        assert "get_current_time" in unknown.value.details["tools"]
        with pytest.raises(ecotone.InvalidActionError) as typed:
            env.step({"tool": "get_current_time", "arguments": {"timezone": 3}})
        assert typed.value.details["field"] == "arguments.timezone"
        with pytest.raises(ecotone.InvalidActionError) as missing:
            env.step({"tool": "get_current_time", "arguments": {}})
        assert missing.value.details["field"] == "arguments"
        assert "timezone" in str(missing.value)
        # A tool that fails is an observation the agent reads, not an env error.
        failed = env.step(
            {"tool": "get_current_time", "arguments": {"timezone": "Mars/Olympus_Mons"}}
        )
        assert failed.observation["is_error"] is True
        assert env.state()["calls"] == 2


def test_a_crashed_server_is_an_env_error_and_the_next_reset_starts_it_again(
    mcp_bin: Path,
) -> None:
    name = f"mcp+stdio:{mcp_bin}/mcp-server-time --local-timezone UTC"
    call = {"tool": "get_current_time", "arguments": {"timezone": "UTC"}}
    with run_server(name) as server, ecotone.connect(server.url) as env:
        env.reset()
        env.step(call)
        (pid,) = _children_running("mcp-server-time")
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ecotone.EnvError, match="the next reset starts it again"):
            env.step(call)
        # Not replaced behind the episode's back: its state is gone until a reset.
        with pytest.raises(ecotone.EnvError, match="reset to start it again"):
            env.step(call)
        assert _children_running("mcp-server-time") == []
        env.reset()
        assert not env.step(call).observation["is_error"]
        assert env.state()["starts"] == 2
    assert wait_until(lambda: _children_running("mcp-server-time") == [])


def test_the_git_server_reads_a_repository(mcp_bin: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first notes"], check=True)
    with ecotone.connect(f"inproc://mcp+stdio:{mcp_bin}/mcp-server-git") as env:
        env.reset()
        log = env.step({"tool": "git_log", "arguments": {"repo_path": str(repo)}})
        assert "first notes" in log.observation["text"]
        status = env.step({"tool": "git_status", "arguments": {"repo_path": str(repo)}})
        assert "main" in status.observation["text"]


def test_the_reference_everything_server_over_stdio_with_a_reward_and_a_timeout(
    node_bin: Path,
) -> None:
    target = f"mcp+stdio:{node_bin}/mcp-server-everything"
    name = f"{target}#reward=tests.mcp_rewards:sum_is_seven&timeout=1"
    with ecotone.connect(f"inproc://{name}") as env:
        env.reset()
        echoed = env.step({"tool": "echo", "arguments": {"message": "hi there"}})
        assert "hi there" in echoed.observation["text"] and echoed.reward == 0.0
        summed = env.step({"tool": "get-sum", "arguments": {"a": 3, "b": 4}})
        assert "7" in summed.observation["text"] and summed.reward == 1.0
        image = env.step({"tool": "get-tiny-image", "arguments": {}})
        assert any(block["type"] == "image" for block in image.observation["content"])
        with pytest.raises(ecotone.InvalidActionError) as typed:
            env.step({"tool": "get-sum", "arguments": {"a": "three", "b": 4}})
        assert typed.value.details["field"] == "arguments.a"
        # Slower than the 1 s per-call timeout: an env error, and a fresh server on reset.
        slow = {"tool": "trigger-long-running-operation", "arguments": {"duration": 5, "steps": 5}}
        started = time.monotonic()
        with pytest.raises(ecotone.EnvError):
            env.step(slow)
        assert time.monotonic() - started < 4
        env.reset()
        assert env.state()["starts"] == 2
        assert (
            "again"
            in env.step({"tool": "echo", "arguments": {"message": "again"}}).observation["text"]
        )


REWARD_IN_CWD = """
def utc_asked(action, observation):
    # The env's own structs, not dicts: `action.tool`, `observation.text` (issue 40).
    return 1.0 if action.arguments.get("timezone") == "UTC" and not observation.is_error else 0.0
"""


def test_a_reward_module_in_the_working_directory_is_found_and_gets_the_structs(
    mcp_bin: Path, tmp_path: Path
) -> None:
    """`#reward=MODULE:FUNCTION` finds MODULE in the working directory, as `--policy` and
    `--rubric` do, when `ecotone serve` runs there; the function is called with the action
    and the observation as the env's structs."""
    (tmp_path / "time_rewards.py").write_text(REWARD_IN_CWD)
    name = f"mcp+stdio:{mcp_bin}/mcp-server-time#reward=time_rewards:utc_asked"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ecotone", "serve", name, "--port", "0"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "serving" in line, line + proc.stderr.read()
        url = line.rsplit(" at ", 1)[1].strip()
        with ecotone.connect(url) as env:
            env.reset()
            ask = {"tool": "get_current_time", "arguments": {"timezone": "UTC"}}
            assert env.step(ask).reward == 1.0
            ask["arguments"] = {"timezone": "Asia/Tokyo"}
            assert env.step(ask).reward == 0.0
    finally:
        proc.terminate()
        proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def everything_over_http(node_bin: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(node_bin / "mcp-server-everything"), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening" in line, line
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


UNCLOSED = """
import sys
import ecotone
env = ecotone.connect(f"inproc://mcp+stdio:{sys.argv[1]}/mcp-server-time --local-timezone UTC")
print(len(env.reset().observation["tools"]), flush=True)
"""


def test_a_program_that_never_closes_its_in_process_mcp_env_still_exits(mcp_bin: Path) -> None:
    # TRL closes no env: the link's portal thread used to hang the program at exit.
    returncode, out, err = run_program("-c", UNCLOSED, str(mcp_bin), timeout=60)
    assert returncode == 0, err
    assert int(out) >= 2


def test_the_everything_server_over_streamable_http(everything_over_http: str) -> None:
    with ecotone.connect(f"inproc://mcp+{everything_over_http}") as env:
        env.reset()
        result = env.step({"tool": "get-structured-content", "arguments": {"location": "Chicago"}})
        assert result.observation["structured"] is not None
        assert not result.observation["is_error"]


def test_the_filesystem_server_stays_inside_the_folder_it_was_given(
    node_bin: Path, tmp_path: Path
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "task.md").write_text("solve it\n")
    (tmp_path / "secret.txt").write_text("not for agents\n")
    name = f"mcp+stdio:{node_bin}/mcp-server-filesystem {allowed}"
    with ecotone.connect(f"inproc://{name}") as env:
        env.reset()
        read = env.step({"tool": "read_text_file", "arguments": {"path": str(allowed / "task.md")}})
        assert "solve it" in read.observation["text"]
        outside = env.step(
            {"tool": "read_text_file", "arguments": {"path": str(tmp_path / "secret.txt")}}
        )
        assert outside.observation["is_error"] is True
        assert "not for agents" not in outside.observation["text"]


FASTMCP_CLIENT = """
import asyncio, json, sys
from fastmcp import Client

async def main(target):
    async with Client(target) as client:
        tools = await client.list_tools()
        result = await client.call_tool("step", {"delta": 2})
        again = await client.call_tool("step", {"delta": 3})
        bad = await client.call_tool("step", {"delta": "three"}, raise_on_error=False)
        print(json.dumps({
            "tools": [t.name for t in tools],
            "structured": result.structured_content,
            "counts": [result.structured_content["count"],
                       again.structured_content["count"]],
            "bad": bad.is_error,
            "bad_text": bad.content[0].text,
        }))

target = json.loads(sys.argv[1])
asyncio.run(main(target))
"""


def _fastmcp(mcp_bin: Path, target: Any) -> dict[str, Any]:
    done = subprocess.run(
        [str(mcp_bin / "python"), "-c", FASTMCP_CLIENT, json.dumps(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fastmcps_client_plays_over_stdio_and_streamable_http(mcp_bin: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    stdio = {
        "mcpServers": {
            "counter": {
                "command": sys.executable,
                "args": ["-m", "ecotone", "mcp", "counter"],
                "env": environ,
            }
        }
    }
    over_stdio = _fastmcp(mcp_bin, stdio)
    assert over_stdio["tools"] == ["step"]
    assert over_stdio["bad"] is True and "delta" in over_stdio["bad_text"]
    assert over_stdio["counts"] == [2, 5]  # one episode across calls
    with run_server("counter", transport="http") as server:
        over_http = _fastmcp(mcp_bin, f"{server.url}/mcp")
        assert over_http["tools"] == ["step"]
        assert "reward" not in over_http["structured"]
        assert over_http["bad"] is True
        # fastmcp speaks the 2026-07-28 protocol, which has no sessions: over HTTP each call
        # is a connection, and without a share key an episode of its own (docs/mcp.md).
        assert over_http["counts"] == [2, 3]


def test_a_stdio_server_gets_none_of_this_servers_secrets_unless_passed_on(
    node_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECOTONE_AUTH_TOKEN", "server-secret-0123")
    monkeypatch.setenv("GIVEN_TO_TOOLS", "for-the-tool")
    name = f"mcp+stdio:{node_bin}/mcp-server-everything#env=GIVEN_TO_TOOLS"
    with ecotone.connect(f"inproc://{name}") as env:
        env.reset()
        seen = env.step({"tool": "get-env", "arguments": {}}).observation["text"]
        assert "for-the-tool" in seen
        assert "server-secret-0123" not in seen and "ECOTONE_AUTH_TOKEN" not in seen


FASTMCP_PLAY = """
import asyncio, json, sys
from fastmcp import Client

async def main(target, tool, arguments):
    async with Client(target) as client:
        names = [t.name for t in await client.list_tools()]
        result = await client.call_tool(tool, arguments, raise_on_error=False)
        print(json.dumps({"tools": names, "is_error": result.is_error,
                          "structured": result.structured_content,
                          "text": result.content[0].text}))

asyncio.run(main(json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])))
"""


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("env", ["chess", "coding", "echo", "gridworld", "wordle"])
def test_fastmcps_client_plays_every_bundled_env(mcp_bin: Path, env: str, transport: str) -> None:
    from tests.test_mcp_server import PLAYS

    tool, arguments, field = PLAYS[env]

    def play(target: Any) -> dict[str, Any]:
        script = [str(mcp_bin / "python"), "-c", FASTMCP_PLAY]
        done = subprocess.run(
            [*script, json.dumps(target), tool, json.dumps(arguments)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    if transport == "stdio":
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
        command = {"command": sys.executable, "args": ["-m", "ecotone", "mcp", env]}
        seen = play({"mcpServers": {env: {**command, "env": environ}}})
    else:
        with run_server(env, transport="http") as server:
            seen = play(f"{server.url}/mcp")
    assert tool in seen["tools"]
    assert seen["is_error"] is False, seen
    if env == "echo":
        assert seen["text"] == "HI"
    else:
        assert field in seen["structured"] and "reward" not in seen["structured"]
