"""The `process` provider, for real: `ecotone serve` subprocesses on 127.0.0.1 and unix
sockets, bubblewrap sandboxes, kill -9 of the launcher. Nothing may be left behind: no
process, no listening port, no socket file, no temporary folder."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

import ecotone
from ecotone.launcher.compose import make_spec, provider_for
from ecotone.providers.contract import (
    EngineUnavailable,
    ReadinessTimeout,
    ServerHandle,
    StartFailed,
)
from ecotone.providers.owner import (
    boot_id,
    machine_id,
    owner_alive,
    owner_label,
    pid_namespace,
    running_here,
)
from ecotone.providers.process import FOLDER_PREFIX, ProcessProvider, ProcessServer
from tests.conftest import wait_until

TRANSPORTS = ("websocket", "http", "tcp", "unix")
HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed")


# --- what runs, seen through /proc (psutil is not installed) ---


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, Z...), or None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, which may be slow to reap)."""
    return proc_state(pid) not in (None, "Z", "X")


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, grandchildren...)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                parents[int(entry)] = parent
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        entries = f.read().decode(errors="replace").split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)


def server_pid(root: int) -> int:
    """The `python -m ecotone serve` process at or below `root` (below it: in a sandbox)."""
    for pid in sorted({root} | descendants(root)):
        args = cmdline(pid)
        if args and "python" in os.path.basename(args[0]) and "--lifeline-fd" in args:
            return pid
    raise AssertionError(f"no ecotone serve process at or below pid {root}")


def our_servers() -> set[int]:
    """Servers this test process started, sandboxes included (their bwrap runs them)."""
    return {pid for pid in descendants(os.getpid()) if "--lifeline-fd" in cmdline(pid)}


def our_folders() -> set[Path]:
    """The process provider's folders that this test process owns (other test runs may share
    the temporary folder)."""
    mine = owner_label()
    found = set()
    for folder in Path(tempfile.gettempdir()).glob(FOLDER_PREFIX + "*"):
        with contextlib.suppress(OSError):
            if (folder / "owner").read_text().strip() == mine:
                found.add(folder)
    return found


def process_server(handle: ServerHandle) -> ProcessServer:
    assert isinstance(handle, ProcessServer)
    return handle


def assert_left_nothing(pids: set[int], url: str, folder: Path) -> None:
    assert {pid for pid in pids if running(pid)} == set()
    parts = urlsplit(url)
    if parts.scheme == "unix":
        assert not os.path.exists(parts.path)
    else:
        assert parts.hostname is not None and parts.port is not None
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((parts.hostname, parts.port), timeout=2).close()
    assert not folder.exists()


def play(env: Any, name: str) -> None:
    """One whole episode of `echo` or `counter`."""
    if name == "echo":
        env.reset(seed=0)
        assert env.step({"message": "hello"}).observation["echoed"] == "hello"
        assert env.step({"message": ""}).done
    else:
        env.reset(seed=0, target=3)
        assert env.step({"delta": 1}).observation["count"] == 1
        assert env.step({"delta": 2}).done


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary folder of the test's own as tempfile's default, where gc looks: so test
    runs that share /tmp do not collect each other's leftovers. Short, for socket paths."""
    folder = Path(tempfile.mkdtemp(prefix="eco-"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# --- starting, serving, stopping ---


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("env_name", ["echo", "counter"])
def test_serves_an_episode_over_each_transport_then_leaves_nothing(
    env_name: str, transport: str
) -> None:
    with ecotone.start_server(env_name, provider="process", transport=transport) as server:
        handle = process_server(server.handle)
        pids = {handle.pid} | descendants(handle.pid)
        scheme = {"websocket": "ws"}.get(transport, transport)
        assert urlsplit(server.url).scheme == scheme
        if transport == "unix":
            assert server.url == f"unix://{handle.folder}/sock/server.sock"
        else:
            assert urlsplit(server.url).hostname == "127.0.0.1"
            # Every local user reaches 127.0.0.1: the server made a token, the URL has it.
            bare, _, token = server.url.partition("?token=")
            assert token
            with pytest.raises(ecotone.AccessDenied):
                ecotone.connect(bare, timeout=10)
        assert server.alive()
        with server.connect() as env:
            play(env, env_name)
        assert f"serving {env_name!r} over {transport}" in server.logs()
    assert_left_nothing(pids, server.url, handle.folder)


def test_launch_yields_a_client_and_stops_the_server_on_the_way_out() -> None:
    before = our_servers()
    with ecotone.launch("counter", provider="process", transport="tcp") as env:
        started = our_servers() - before
        assert len(started) == 1
        play(env, "counter")
    assert not any(running(pid) for pid in started)
    assert our_folders() == set()


def test_launch_stops_the_server_when_the_block_raises() -> None:
    before = our_servers()
    with pytest.raises(KeyError), ecotone.launch("echo", provider="process"):
        started = our_servers() - before
        raise KeyError("boom")
    assert started and not any(running(pid) for pid in started)
    assert our_folders() == set()


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_face_runs_under_trio_and_asyncio(backend: str) -> None:
    async def main() -> set[int]:
        async with ecotone.alaunch("counter", provider="process", transport="unix") as env:
            started = our_servers()
            await env.reset(seed=0, target=2)
            assert (await env.step({"delta": 2})).done
        handle = await ecotone.astart_server("echo", provider="process", transport="http")
        try:
            assert await handle.alive()
            assert "serving 'echo' over http" in await handle.logs()
        finally:
            await handle.stop()
        assert not await handle.alive()
        return started | {int(handle.id)}

    started = anyio.run(main, backend=backend)
    assert not any(running(pid) for pid in started)
    assert our_folders() == set()


def test_stop_twice_is_fine_and_logs_outlive_the_server() -> None:
    server = ecotone.start_server("echo", provider="process", transport="tcp")
    server.stop()
    server.stop()
    assert not process_server(server.handle).folder.exists()

    async def main() -> None:
        handle = await ecotone.astart_server("echo", provider="process", transport="tcp")
        async with anyio.create_task_group() as tg:  # two at once: one stops, one waits
            tg.start_soon(handle.stop)
            tg.start_soon(handle.stop)
        await handle.stop()
        assert not await handle.alive()
        assert "serving 'echo' over tcp" in await handle.logs()
        assert await handle.logs(tail=0) == ""
        assert not process_server(handle).folder.exists()

    anyio.run(main)


@pytest.mark.parametrize("sandbox", [False, pytest.param(True, marks=needs_bwrap)])
def test_stop_kills_a_server_that_does_not_end_on_sigterm(sandbox: bool) -> None:
    server = ecotone.start_server("echo", provider="process", transport="unix", sandbox=sandbox)
    handle = process_server(server.handle)
    tree = {handle.pid} | descendants(handle.pid)
    os.kill(server_pid(handle.pid), signal.SIGSTOP)  # deaf to SIGTERM and the lifeline
    started = time.monotonic()
    server.stop(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3
    assert_left_nothing(tree, server.url, handle.folder)


def test_sixteen_servers_start_concurrently_and_all_stop() -> None:
    provider = provider_for("process")
    handles: list[ServerHandle] = []

    async def main() -> None:
        async def start_one(i: int) -> None:
            transport = TRANSPORTS[i % len(TRANSPORTS)]
            handles.append(
                await ecotone.astart_server("echo", provider=provider, transport=transport)
            )

        try:
            async with anyio.create_task_group() as tg:
                for i in range(16):
                    tg.start_soon(start_one, i)
            assert len({h.url for h in handles}) == 16
            assert len(our_servers()) >= 16
        finally:
            async with anyio.create_task_group() as tg:
                for handle in handles:
                    tg.start_soon(handle.stop)

    pids_before = our_servers()
    anyio.run(main)
    assert len(handles) == 16
    for handle in handles:
        assert_left_nothing(set(), handle.url, process_server(handle).folder)
    assert not any(running(pid) for pid in pids_before)
    assert our_servers() == set()
    assert our_folders() == set()


# --- failures leave nothing behind ---


def test_a_server_that_exits_during_start_is_start_failed_with_its_output() -> None:
    with pytest.raises(StartFailed) as failure:
        ecotone.start_server("no-such-env", provider="process")
    assert failure.value.exit_code == 2
    assert "no environment named 'no-such-env'" in failure.value.logs
    assert "no environment named 'no-such-env'" in str(failure.value)
    assert "exited with code 2" in str(failure.value)
    assert our_servers() == set()
    assert our_folders() == set()


def test_readiness_timeout_kills_the_server_and_removes_its_folder() -> None:
    started = time.monotonic()
    with pytest.raises(ReadinessTimeout, match=r"not ready within 0.05s"):
        ecotone.start_server("echo", provider="process", ready_timeout=0.05)
    assert time.monotonic() - started < 5
    assert our_servers() == set()
    assert our_folders() == set()


def test_unknown_options_and_images_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="no option 'user'"):
        ecotone.start_server("echo", provider="process", user="nobody")
    with pytest.raises(ValueError, match="'sandbox' must be true or false"):
        ecotone.start_server("echo", provider="process", sandbox="yes")
    with pytest.raises(ValueError, match="runs no image"):
        ecotone.start_server("echo", provider="process", image="ecotone-echo:latest")
    assert our_folders() == set()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"labels": {"ecotone.owner": "someone"}}, "label 'ecotone.owner' is reserved"),
        ({"environment": {"A": 1}}, "environment variable 'A' must be a str"),
        ({"environment": {"A=B": "x"}}, "environment name 'A=B' is not an environment"),
        ({"secrets": {"TOKEN": "\udcff"}}, "secret 'TOKEN' cannot be encoded as UTF-8"),
        ({"secrets": {"A": "x"}, "environment": {"A": "y"}}, "both in environment and in secrets"),
    ],
)
def test_specs_no_provider_can_honour_are_refused_before_anything_starts(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        ecotone.start_server("echo", provider="process", **spec)
    assert "\udcff" not in str(caught.value)
    assert our_servers() == set()
    assert our_folders() == set()


def test_sandbox_without_bubblewrap_is_engine_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(EngineUnavailable, match="bubblewrap"):
        ecotone.start_server("echo", provider="process", sandbox=True)
    assert our_folders() == set()


# --- secrets ---


@pytest.mark.parametrize("sandbox", [False, pytest.param(True, marks=needs_bwrap)])
def test_secrets_reach_the_server_environment_and_no_command_line(sandbox: bool) -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    with ecotone.start_server(
        "echo",
        provider="process",
        transport="unix",
        sandbox=sandbox,
        environment={"ECOTONE_TEST_PLAIN": "plain"},
        secrets={"ECOTONE_TEST_TOKEN": secret},
    ) as server:
        handle = process_server(server.handle)
        tree = {handle.pid} | descendants(handle.pid)
        served = environ(server_pid(handle.pid))
        assert served["ECOTONE_TEST_TOKEN"] == secret
        assert served["ECOTONE_TEST_PLAIN"] == "plain"
        for pid in tree:
            assert secret not in " ".join(cmdline(pid))
        for file in handle.folder.rglob("*"):
            if file.is_file():
                assert secret not in file.read_text(errors="replace")


def test_a_token_given_as_a_secret_is_the_servers_and_is_in_its_url() -> None:
    with ecotone.start_server(
        "counter", provider="process", secrets={"ECOTONE_AUTH_TOKEN": "mine-0123456789"}
    ) as server:
        assert server.url.endswith("?token=mine-0123456789")
        with server.connect() as env:
            env.reset()
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(server.url.partition("?")[0], token="other", timeout=10)


# --- no orphans ---

LAUNCHER = textwrap.dedent(
    """
    import json, sys
    import ecotone

    server = ecotone.start_server("echo", provider="process", transport=sys.argv[1],
                                  sandbox=sys.argv[2] == "1")
    print(json.dumps({"pid": server.handle.pid, "folder": str(server.handle.folder)}),
          flush=True)
    sys.stdin.read()  # until killed
    """
)


@pytest.mark.parametrize(
    ("transport", "sandbox"),
    [("websocket", False), ("unix", False), pytest.param("unix", True, marks=needs_bwrap)],
)
def test_kill_9_of_the_launcher_takes_the_server_down_and_gc_cleans_up(
    transport: str, sandbox: bool, private_tmp: Path
) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, transport, "1" if sandbox else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    try:
        assert launcher.stdout is not None
        started = json.loads(launcher.stdout.readline())
        tree = descendants(launcher.pid)
        served = server_pid(started["pid"])
        assert served in tree and running(served)
        assert len(tree) == (3 if sandbox else 1)  # bwrap, its init, the server
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert wait_until(lambda: not any(running(pid) for pid in tree), timeout=5)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for stream in (launcher.stdin, launcher.stdout):
            if stream is not None:
                stream.close()

    folder = Path(started["folder"])
    assert folder.parent == private_tmp
    assert folder.exists()  # the launcher could not clean up: gc's job
    removed = anyio.run(provider_for("process").gc)
    assert any(str(folder) in line for line in removed)
    assert not folder.exists()


def test_the_server_outlives_the_thread_that_started_it() -> None:
    """prctl(PR_SET_PDEATHSIG) would kill the server when the thread that forked it exits;
    the lifeline pipe follows the process. asyncio forks in the loop's thread, so a loop run
    in a short-lived thread shows the difference at once."""
    result: list[ProcessServer] = []

    async def start() -> None:
        result.append(await ProcessProvider().start(make_spec("echo", transport="tcp")))

    thread = threading.Thread(target=lambda: anyio.run(start, backend="asyncio"))
    thread.start()
    thread.join()
    handle = result[0]
    served = server_pid(handle.pid)
    try:
        time.sleep(0.3)
        assert running(served)
        with ecotone.connect(handle.url) as env:
            play(env, "echo")
    finally:
        # That loop is gone, so stop() cannot wait there: close the lifeline by hand, which
        # is what the launcher's death does.
        handle._close_lifeline()
        assert wait_until(lambda: not running(served), timeout=5)
        handle._remove_folder()
        # Its asyncio transport belongs to the loop that is gone: drop it quietly.
        result.clear()
        del handle
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


# --- the sandbox ---


def mounts(pid: int) -> dict[str, tuple[str, str]]:
    """Mount point -> (filesystem type, options) as process `pid` sees them."""
    table = {}
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            fields = line.split()
            separator = fields.index("-")
            table[fields[4]] = (fields[separator + 1], fields[5])
    return table


def interfaces(pid: int) -> set[str]:
    with open(f"/proc/{pid}/net/dev") as f:
        return {line.split(":")[0].strip() for line in f.readlines()[2:]}


@needs_bwrap
def test_sandbox_has_a_read_only_root_its_own_tmp_and_no_network_over_unix() -> None:
    with ecotone.start_server("counter", provider="process", transport="unix", sandbox=True) as s:
        handle = process_server(s.handle)
        served = server_pid(handle.pid)
        assert served != handle.pid  # bwrap, then its init, then the server
        seen = mounts(served)
        assert "ro" in seen["/"][1].split(",")
        assert seen["/tmp"][0] == "tmpfs" and "rw" in seen["/tmp"][1].split(",")
        assert "rw" in seen[str(handle.folder / "sock")][1].split(",")
        assert interfaces(served) == {"lo"}
        # Writing as the server would: in its mount namespace, with this test's (root) rights.
        enter = ["nsenter", f"--target={served}", "--mount", "--"]
        refused = subprocess.run(
            [*enter, "touch", "/ecotone-sandbox-probe"], capture_output=True, text=True
        )
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
        probe = f"/tmp/ecotone-sandbox-probe-{os.getpid()}"
        subprocess.run([*enter, "touch", probe], check=True)
        assert not os.path.exists(probe)  # its /tmp is not ours
        with s.connect() as env:
            play(env, "counter")
        tree = {handle.pid} | descendants(handle.pid)
    assert_left_nothing(tree, s.url, handle.folder)


@needs_bwrap
def test_sandbox_over_tcp_shares_only_the_network() -> None:
    with ecotone.start_server("echo", provider="process", transport="websocket", sandbox=True) as s:
        handle = process_server(s.handle)
        served = server_pid(handle.pid)
        assert interfaces(served) == interfaces(os.getpid())
        assert "ro" in mounts(served)["/"][1].split(",")
        with open(f"/proc/{served}/status") as f:
            nspid = next(line for line in f if line.startswith("NSpid:")).split()[1:]
        assert len(nspid) == 2  # in a pid namespace of its own
        with s.connect() as env:
            play(env, "echo")
        tree = {handle.pid} | descendants(handle.pid)
    assert_left_nothing(tree, s.url, handle.folder)


# --- gc ---


@contextlib.contextmanager
def dead_owner_label() -> Iterator[str]:
    """The owner label of a process that has exited."""
    proc = subprocess.Popen(["sleep", "30"])
    label = owner_label(proc.pid)
    proc.kill()
    proc.wait()
    yield label


def test_gc_removes_what_dead_owners_left_and_only_that(private_tmp: Path) -> None:
    root = Path(tempfile.gettempdir())
    assert root == private_tmp
    leftover = subprocess.Popen(["sleep", "60"])
    dead = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=root))
    alive = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=root))
    try:
        with dead_owner_label() as label:
            (dead / "owner").write_text(label + "\n")
        (dead / "labels.json").write_text(json.dumps({"ecotone.env": "echo"}))
        (dead / "processes").write_text(owner_label(leftover.pid) + "\n")
        (alive / "owner").write_text(owner_label() + "\n")

        removed = anyio.run(provider_for("process").gc)

        ours = [line for line in removed if str(dead) in line]
        assert len(ours) == 1 and "'echo'" in ours[0] and f"killed pid {leftover.pid}" in ours[0]
        assert not dead.exists()
        assert alive.exists()
        assert leftover.wait(timeout=5) == -signal.SIGKILL
        assert not any(str(alive) in line for line in removed)
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


HELPER_SITE = """
import os, subprocess

pidfile = os.environ.pop("ECOTONE_TEST_HELPER_PIDFILE", None)
if pidfile:  # in the server: start a helper, as an env with a subprocess of its own would
    helper = subprocess.Popen(["sleep", "600"], env=dict(os.environ))
    with open(pidfile, "w") as f:
        f.write(str(helper.pid))
"""

HELPER_LAUNCHER = """
import json, sys
import ecotone

server = ecotone.start_server("echo", provider="process", transport="unix",
                              environment={"PYTHONPATH": sys.argv[1],
                                           "ECOTONE_TEST_HELPER_PIDFILE": sys.argv[2]})
print(json.dumps({"pid": server.handle.pid, "folder": str(server.handle.folder)}), flush=True)
sys.stdin.read()  # until killed
"""


def test_gc_kills_the_helpers_a_server_left_after_its_launcher_died(
    private_tmp: Path, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(HELPER_SITE)
    pidfile = tmp_path / "helper.pid"
    launcher = subprocess.Popen(
        [sys.executable, "-c", HELPER_LAUNCHER, str(tmp_path), str(pidfile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    helper = 0
    try:
        assert launcher.stdout is not None
        started = json.loads(launcher.stdout.readline())
        helper = int(pidfile.read_text())
        assert running(helper) and helper in descendants(started["pid"])
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        # The server ends on its lifeline; its helper does not.
        assert wait_until(lambda: not running(started["pid"]), timeout=10)
        time.sleep(0.2)
        assert running(helper)
        removed = anyio.run(provider_for("process").gc)
        (line,) = [line for line in removed if started["folder"] in line]
        assert f"killed pid {helper}" in line
        assert wait_until(lambda: not running(helper), timeout=5)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for stream in (launcher.stdin, launcher.stdout):
            if stream is not None:
                stream.close()
        if helper and running(helper):
            os.kill(helper, signal.SIGKILL)


def test_gc_kills_no_process_that_only_shares_a_recorded_group_id(private_tmp: Path) -> None:
    """A group id recorded by a dead owner may name someone else's group by now: without
    the server's token in its environment, no process of it is touched."""
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=private_tmp))
    try:
        with dead_owner_label() as label:
            (folder / "owner").write_text(label + "\n")
        (folder / "group").write_text(f"{stranger.pid} {'0' * 32}\n")
        removed = anyio.run(provider_for("process").gc)
        assert any(str(folder) in line and "killed" not in line for line in removed)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_owner_labels_name_machine_boot_pid_namespace_pid_and_start_time() -> None:
    label = owner_label()
    machine, boot, namespace, pid, _ = label.split("/")
    assert (machine, boot, namespace) == (machine_id(), boot_id(), pid_namespace())
    assert int(pid) == os.getpid() and namespace.isdigit()
    assert owner_alive(label) and running_here(label)


def test_gc_counts_as_alive_what_it_cannot_judge_from_here() -> None:
    with dead_owner_label() as dead:
        machine, boot, namespace, pid, started = dead.split("/")
    other_namespace = str(int(namespace) + 1)
    assert not owner_alive(dead)
    # Another host that shares the engine, or one whose machine id is unknown: alive.
    assert owner_alive(f"0123456789abcdef0123456789abcdef/{boot}/{namespace}/{pid}/{started}")
    assert owner_alive(f"unknown/{boot}/{namespace}/{pid}/{started}")
    # This machine, an earlier boot: dead, whatever the pid.
    assert not owner_alive(f"{machine}/an-earlier-boot/{namespace}/{os.getpid()}/{started}")
    # This boot, another pid namespace (a container, `unshare --pid`): alive.
    assert owner_alive(f"{machine}/{boot}/{other_namespace}/{pid}/{started}")
    # None of those may be signalled from here.
    me = owner_label().split("/")
    for where in ("0123456789abcdef0123456789abcdef", "unknown"):
        assert not running_here("/".join([where, *me[1:]]))
    assert not running_here("/".join([*me[:2], other_namespace, *me[3:]]))
    # The older BOOT_ID/PID/START_TIME labels are read as before; nonsense is alive.
    assert owner_alive(f"{boot}/{os.getpid()}/{me[-1]}")
    assert not owner_alive(f"{boot}/{pid}/{started}")
    assert owner_alive("not a label") and not running_here("not a label")


def unshare_works() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
        )
    except OSError:
        return False
    return done.returncode == 0


@pytest.mark.skipif(
    not unshare_works(), reason="cannot make a pid namespace (`unshare --pid`, needs root)"
)
def test_gc_from_another_pid_namespace_leaves_a_running_server_alone() -> None:
    with ecotone.start_server("echo", provider="process", transport="unix") as server:
        folder = process_server(server.handle).folder
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "ecotone", "gc"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert folder.exists() and server.alive(), done.stdout
        with server.connect() as env:
            play(env, "echo")


def test_gc_leaves_a_running_server_alone() -> None:
    with ecotone.start_server("echo", provider="process", transport="unix") as server:
        removed = anyio.run(provider_for("process").gc)
        folder = process_server(server.handle).folder
        assert not any(str(folder) in line for line in removed)
        assert folder.exists() and server.alive()


def test_the_process_provider_is_registered_under_its_name() -> None:
    provider = provider_for("process")
    assert isinstance(provider, ProcessProvider)
    assert provider.name == "process"
