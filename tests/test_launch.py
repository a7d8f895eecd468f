"""`ecotone launch` and `ecotone gc` on the command line, the `[launch]` config table, and
`ecotone.launch`'s errors for a provider that does not exist. Real subprocesses, real servers
on 127.0.0.1 (the process provider)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ecotone
from ecotone.kernel.config import ConfigError, load
from ecotone.providers.process import FOLDER_PREFIX
from tests.conftest import wait_until


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    env["TMPDIR"] = str(tmp_path)  # the provider's folders go here: this test sees only its own
    return env


def _cli(*args: str, tmp_path: Path, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ecotone", *args],
        cwd=cwd or tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _folders(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(FOLDER_PREFIX + "*"))


def test_cli_launch_prints_the_url_serves_it_and_stops_on_sigint(tmp_path: Path) -> None:
    proc = _cli("launch", "counter", "--transport", "tcp", tmp_path=tmp_path)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("tcp://127.0.0.1:"), url
        assert len(_folders(tmp_path)) == 1
        with ecotone.connect(url) as env:
            env.reset(seed=0)
            assert env.step({"delta": 4}).observation["count"] == 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _folders(tmp_path) == []  # the server and its folder are gone
    with pytest.raises(ecotone.ConnectionLost):
        ecotone.connect(url, connect_timeout=2)


def test_cli_launch_takes_its_settings_from_the_launch_table(tmp_path: Path) -> None:
    (tmp_path / "ecotone.toml").write_text(
        'env = "echo"\n[launch]\nprovider = "process"\ntransport = "unix"\n'
        "[launch.options]\nsandbox = false\n"
    )
    proc = _cli("launch", tmp_path=tmp_path)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("unix://"), url
        with ecotone.connect(url) as env:
            env.reset()
            assert env.step({"message": "hi"}).observation["echoed"] == "hi"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not Path(url[len("unix://") :]).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["launch", "counter", "--provider", "nosuch"], "unknown provider 'nosuch'; installed:"),
        (["launch", "counter", "--option", "colour=1"], "colour"),
        (["launch", "counter", "--option", "novalue"], "--option must be KEY=VALUE"),
        (["launch", "nosuchenv"], "nosuchenv"),
        (["launch"], "name an environment"),
        (["gc", "--provider", "nosuch"], "unknown provider 'nosuch'"),
    ],
)
def test_cli_launch_and_gc_errors_are_one_clear_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = _cli(*args, tmp_path=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (1, 2), (out, err)
    assert message in err, err
    assert "Traceback" not in err
    assert _folders(tmp_path) == []


def test_cli_gc_removes_what_a_killed_launcher_left(tmp_path: Path) -> None:
    proc = _cli("launch", "counter", tmp_path=tmp_path)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("ws://")
    proc.kill()  # the orchestrator crashes: no teardown runs
    proc.wait()
    (folder,) = _folders(tmp_path)
    # The server notices its launcher is gone and exits; its folder stays for gc.
    wait_until(lambda: _server_gone(url), timeout=10)
    out = subprocess.run(
        [sys.executable, "-m", "ecotone", "gc", "--provider", "process"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"process: removed {folder}" in out or str(folder) in out, out
    assert "removed 1 leftover" in out
    assert _folders(tmp_path) == []


def _server_gone(url: str) -> bool:
    try:
        ecotone.connect(url, connect_timeout=1).close()
    except ecotone.ConnectionLost:
        return True
    return False


def test_launch_names_the_installed_providers_when_one_is_unknown() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'nosuch'; installed: .*process"):
        with ecotone.launch("counter", provider="nosuch"):
            pass


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[launch.resources]\ncpus = -1\n", "cpus must be > 0, got -1.0 @ launch.resources"),
        ('[launch]\ntransport = "pigeon"\n', "transport must be one of websocket, http, tcp"),
        ('[launch]\nprovder = "podman"\n', "unknown key launch.provder"),
    ],
)
def test_launch_table_errors_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "ecotone.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(path, environ={})
