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
from ecotone.launcher.compose import make_spec
from ecotone.launcher.config import launch_config
from ecotone.providers.contract import LaunchSpec, Resources
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
    assert wait_until(lambda: _server_gone(url), timeout=10)
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


def test_make_spec_takes_the_launch_specs_fields_and_hands_the_rest_to_the_provider() -> None:
    assert make_spec("counter") == LaunchSpec(env="counter")
    spec = make_spec(
        "counter", transport="tcp", image="i", resources={"memory_mb": 256}, environment=None,
        secrets={"S": "s"}, labels={"l": "v"}, ready_timeout=5, max_sessions=2, user="1000",
        sandbox=False,
    )  # fmt: skip
    assert spec == LaunchSpec(
        env="counter", transport="tcp", image="i", resources=Resources(memory_mb=256),
        secrets={"S": "s"}, labels={"l": "v"}, ready_timeout=5, max_sessions=2,
        options={"user": "1000", "sandbox": False},
    )  # fmt: skip


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
        launch_config(load(path, environ={}).launch, f"config file {path}")


SLOW_START = """
import os, time
# Only in the server (`ecotone serve ... --lifeline-fd`), not in the launcher that starts it.
with open("/proc/self/cmdline", "rb") as f:
    if b"--lifeline-fd" in f.read():
        time.sleep(float(os.environ.get("SLOW_START_S", "30")))
"""

LAUNCH_AND_WAIT = """
import ecotone, sys
print("starting", flush=True)
ecotone.start_server("counter", provider="process")
print("started", flush=True)
"""


def _slow_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which `ecotone serve` sleeps 30 s before it starts serving (a
    sitecustomize module on PYTHONPATH): a start that is still waiting when we interrupt it."""
    site = tmp_path / "slow-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def _server_processes(tmp_path: Path) -> list[int]:
    """Pids of `ecotone serve` processes whose private folder is under tmp_path."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            b"--lifeline-fd" in cmdline
            and str(tmp_path).encode() in (entry / "environ").read_bytes()
        ):
            pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("how", ["api", "cli"])
def test_ctrl_c_during_a_start_cancels_it_and_leaves_nothing(tmp_path: Path, how: str) -> None:
    args = ["-c", LAUNCH_AND_WAIT] if how == "api" else ["-m", "ecotone", "launch", "counter"]
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=tmp_path,
        env=_slow_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(_folders(tmp_path)) == 1, timeout=20)
        assert wait_until(lambda: bool(_server_processes(tmp_path)), timeout=10)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)  # not the 30 s the server would take
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "started" not in out
    assert proc.returncode in (-signal.SIGINT, 130), (out, err)
    assert wait_until(lambda: not _server_processes(tmp_path), timeout=10)
    assert _folders(tmp_path) == []
