"""`python -m ecotone ...` run as a subprocess, as a person would run it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ecotone
from tests.conftest import ecotone_serving


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """The test process's environment without ECOTONE_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}


def ecotone_cli(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ecotone", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_list_shows_the_bundled_plugins_and_their_distribution(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = ecotone_cli("list", cwd=tmp_path, env=cli_env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for section in ("environments:", "environment name patterns:", "transports:", "providers:"):
        assert section in out
    for name in ("counter", "echo", "websocket", "inproc", "process", "podman", "docker"):
        assert re.search(rf"^  {name}\s+from ecotone\s", out, re.M), out
    assert "Adds each action's delta to a count" in out
    # Names resolved by pattern cannot be listed one by one: their pattern is.
    assert re.search(r"^  gymnasium:ID\[\?kw=\.\.\.\] from ecotone\s+any registered", out, re.M)


def test_version_flag_prints_the_version(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = ecotone_cli("--version", cwd=tmp_path, env=cli_env)
    assert (done.returncode, done.stdout.strip()) == (0, f"ecotone {ecotone.__version__}")


def test_play_echo_plays_an_episode_to_the_end(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = ecotone_cli("play", "echo", cwd=tmp_path, env=cli_env)
    assert done.returncode == 0, done.stderr
    assert "episode done" in done.stdout
    assert 'step 1 {"message": "hello"}' in done.stdout
    assert "return 2.8" in done.stdout


def test_play_against_a_running_server_with_given_actions(
    tmp_path: Path, cli_env: dict[str, str], counter_url: str
) -> None:
    done = ecotone_cli(
        "play", counter_url, "--steps", "3", "--action", '{"delta": 2}', cwd=tmp_path, env=cli_env
    )
    assert done.returncode == 0, done.stderr
    assert '"count": 6' in done.stdout
    assert "return 6" in done.stdout


def test_serve_prints_its_url_serves_clients_and_stops_on_sigterm(tmp_path: Path) -> None:
    with ecotone_serving("counter", "--port", "0", cwd=tmp_path) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.fullmatch(
            r"ecotone: serving 'counter' over websocket at (ws://127\.0\.0\.1:\d+)\n", line
        )
        assert match, line
        with ecotone.connect(match[1]) as env:
            env.reset()
            assert env.step({"delta": 5}).observation["count"] == 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "SIGTERM, shutting down" in proc.stderr.read()


def test_serve_of_an_unknown_env_exits_2_naming_it(tmp_path: Path, cli_env: dict[str, str]):
    done = ecotone_cli("serve", "nosuchenv", "--port", "0", cwd=tmp_path, env=cli_env)
    assert done.returncode == 2
    assert "no environment named 'nosuchenv'" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_with_an_unknown_transport_exits_2_naming_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = ecotone_cli(
        "serve", "counter", "--transport", "carrier-pigeon", cwd=tmp_path, env=cli_env
    )
    assert done.returncode == 2
    assert "no transport named 'carrier-pigeon'" in done.stderr


def test_serve_with_a_misspelt_config_key_exits_2_naming_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    (tmp_path / "ecotone.toml").write_text('env = "counter"\n[limits]\nmax_sesions = 3\n')
    done = ecotone_cli("serve", cwd=tmp_path, env=cli_env)
    assert done.returncode == 2
    assert "limits.max_sesions" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_with_an_invalid_flag_value_exits_2_saying_why(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = ecotone_cli("serve", "counter", "--max-sessions", "0", cwd=tmp_path, env=cli_env)
    assert done.returncode == 2
    assert "max_sessions must be > 0" in done.stderr


def test_serve_without_an_env_exits_2(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = ecotone_cli("serve", cwd=tmp_path, env=cli_env)
    assert done.returncode == 2
    assert "no environment to serve" in done.stderr


def test_help_says_what_ecotone_is() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "Serve reinforcement-learning environments over the network" in done.stdout
    assert "Nothing imports" not in done.stdout and "imports this module" not in done.stdout
