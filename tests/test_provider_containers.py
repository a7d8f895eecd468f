"""The podman and docker providers, against the real engines (see tests/engines.py)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pytest

import ecotone
from ecotone.launcher.compose import astart_server, make_spec, provider_for
from ecotone.providers import _container, engines
from ecotone.providers._container import check_container_spec, server_command
from ecotone.providers._entry import load_secrets
from ecotone.providers.owner import (
    LABEL_OWNER,
    boot_id,
    labels_for,
    machine_id,
    owner_label,
    pid_namespace,
)
from tests.conftest import wait_until
from tests.engines import EngineProxy, engine_client, engine_socket

TEST_LABEL = "test.ecotone"  # not under "ecotone.": those labels are ecotone's own

# Run by the server's own Python inside the container (`exec`): what the server process is
# (its command line, environment and status) and what every process's command line holds.
PROBE = r"""
import json, os
me, found, cmdlines = os.getpid(), None, []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == me:
        continue
    try:
        cmd = [c.decode() for c in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if c]
    except OSError:
        continue
    cmdlines.append(cmd)
    if cmd[:1] and cmd[0].endswith("python3") and cmd[1:3] == ["-m", "ecotone"]:
        raw = open(f"/proc/{pid}/environ", "rb").read().decode()
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
        found = {
            "pid": int(pid),
            "env": dict(item.split("=", 1) for item in raw.split("\0") if "=" in item),
            "status": {k: v.strip() for k, v in status.items()},
        }
print(json.dumps({"server": found, "cmdlines": cmdlines}))
"""


def tag() -> dict[str, str]:
    """A label that finds this test's containers and nothing else."""
    return {TEST_LABEL: secrets.token_hex(6)}


def labelled(engine: str, labels: dict[str, str]) -> list[Any]:
    """Containers (any state) carrying `labels`."""
    return _container_provider(engine).engine.find(engine_client(engine), labels)


def _container_provider(engine: str) -> _container.ContainerProvider:
    provider = provider_for(engine)
    assert isinstance(provider, _container.ContainerProvider)
    return provider


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


def exec_in(container: Any, command: list[str]) -> tuple[int, str, str]:
    code, (out, err) = container.exec_run(command, demux=True)
    return code, (out or b"").decode(), (err or b"").decode()


# -- pure parts --------------------------------------------------------------------------


def test_server_command_overrides_the_image_and_hides_secrets_behind_the_entry_point() -> None:
    spec = ecotone.LaunchSpec(env="echo", transport="unix", secrets={"KEY": "v"}, max_sessions=3)
    command = server_command(spec)
    assert command[:5] == [
        "python3",
        "-m",
        "ecotone.providers._entry",
        "/run/secrets",
        "--",
    ]
    assert command[5:] == [
        "serve", "echo", "--transport", "unix", "--host", "/run/ecotone/server.sock",
        "--max-sessions", "3",
    ]  # fmt: skip
    assert "v" not in command
    plain = server_command(ecotone.LaunchSpec(env="echo", transport="tcp"))
    assert plain == [
        "python3", "-m", "ecotone", "serve", "echo", "--transport", "tcp",
        "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip


def test_entry_point_reads_one_variable_per_file(tmp_path: Path) -> None:
    (tmp_path / "API_KEY").write_text("k3y\n")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / "sub").mkdir()
    assert load_secrets(str(tmp_path)) == {"API_KEY": "k3y\n"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"options": {"sandbox": True}}, "unknown container provider option 'sandbox'"),
        ({"secrets": {"BAD-NAME": "x"}}, "is not an environment variable name"),
        ({"secrets": {"A": "x"}, "environment": {"A": "y"}}, "both in environment and in secrets"),
        ({"options": {"user": 1000}}, "option 'user' must be a str such as '1000:1000'"),
        ({"options": {"read_only": "false"}}, "option 'read_only' must be true or false"),
        ({"options": {"tmpfs_mb": 0}}, "option 'tmpfs_mb' must be a positive int"),
        ({"options": {"tmpfs_mb": "64"}}, "option 'tmpfs_mb' must be a positive int"),
        ({"secrets": {"KEY": "\udcff"}}, "secret 'KEY' cannot be encoded as UTF-8"),
        ({"secrets": {"KEY": 7}}, "secret 'KEY' must be a str"),
        ({"environment": {"A": 1}}, "environment variable 'A' must be a str"),
        ({"labels": {"ecotone.owner": "x"}}, "label 'ecotone.owner' is reserved"),
        ({"labels": {"ecotone.managed": "false"}}, "label 'ecotone.managed' is reserved"),
    ],
)
async def test_bad_specs_are_refused_before_the_engine_is_asked(
    options: dict[str, Any], message: str
) -> None:
    spec = ecotone.LaunchSpec(env="counter", transport="unix", **options)
    for name in ("podman", "docker"):
        with pytest.raises(ValueError, match=message) as caught:
            await provider_for(name).start(spec)
        assert "\udcff" not in str(caught.value)  # a secret's value is never quoted
        assert our_folders(name) == []


def test_a_failure_while_the_folder_is_made_removes_it_secrets_and_all() -> None:
    """Even past the checks (here skipped on purpose), a secret that cannot be written
    leaves nothing: not the folder, not the secret files written before it."""
    provider = _container_provider("docker")
    spec = make_spec("counter", transport="unix", secrets={"FIRST": "ok", "SECOND": "\udcff"})
    options = _container.ContainerOptions(user="65534:65534", read_only=True, tmpfs_mb=64)
    with pytest.raises(UnicodeEncodeError):
        provider._prepare_folder(spec, options, labels_for("counter"))
    assert our_folders("docker") == []


def test_the_folder_keeps_secrets_private_to_the_container_user() -> None:
    provider = _container_provider("podman")
    spec = make_spec("counter", transport="unix", secrets={"TOKEN": "t0ken"})
    options = check_container_spec(spec)
    folder = provider._prepare_folder(spec, options, labels_for("counter"))
    assert folder is not None
    try:
        root = Path(folder)
        token = root / "secrets" / "TOKEN"
        assert token.read_text() == "t0ken"
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        assert stat.S_IMODE(token.stat().st_mode) == 0o400
        assert stat.S_IMODE((root / "secrets").stat().st_mode) == 0o500
        uid, _, gid = _container.default_user().partition(":")
        assert (token.stat().st_uid, token.stat().st_gid) == (int(uid), int(gid))
        assert (root / "run").stat().st_uid == int(uid)
        assert json.loads((root / "owner.json").read_text())[LABEL_OWNER] == owner_label()
    finally:
        shutil.rmtree(folder)


def test_the_default_user_is_nobody_for_root_and_the_launchers_own_otherwise() -> None:
    user = _container.default_user()
    if os.geteuid() == 0:
        assert user == "65534:65534"
    else:
        assert user == f"{os.geteuid()}:{os.getegid()}"
    assert check_container_spec(make_spec("counter")).user == user
    assert check_container_spec(make_spec("counter", user=None)).user is None


# -- real engines --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transport", "env", "action", "observed"),
    [
        ("websocket", "counter", {"delta": 2}, {"count": 2}),
        ("websocket", "echo", {"message": "hi"}, {"echoed": "hi"}),
        ("unix", "counter", {"delta": 2}, {"count": 2}),
        ("unix", "echo", {"message": "hi"}, {"echoed": "hi"}),
        ("http", "counter", {"delta": 2}, {"count": 2}),
        ("tcp", "echo", {"message": "hi"}, {"echoed": "hi"}),
    ],
)
def test_launch_plays_an_episode_and_leaves_nothing_behind(
    engine: str, env_image: Any, transport: str, env: str, action: Any, observed: Any
) -> None:
    labels = tag()
    with ecotone.launch(
        env,
        provider=engine,
        transport=transport,
        image=env_image(engine, env),
        labels=labels,
        timeout=10,
    ) as client:
        result = client.reset(seed=0)
        result = client.step(action)
        for key, value in observed.items():
            assert result.observation[key] == value
        url = client.connection.url
        (found,) = labelled(engine, labels)
        container = engine_client(engine).containers.get(found.id)
        assert container.labels["ecotone.env"] == env
        assert container.labels[LABEL_OWNER] == owner_label()
        if transport == "unix":
            assert url.startswith("unix:///")
            assert container.attrs["HostConfig"]["NetworkMode"] == "none"
            folder = Path(urlsplit(url).path).parent.parent
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        else:
            assert urlsplit(url).hostname == "127.0.0.1"
            # Published on the host's loopback, where every local user reaches it: the
            # server requires the token the provider made (the client took it from the URL).
            assert "token" not in url
            with pytest.raises(ecotone.AccessDenied):
                ecotone.connect(url, timeout=10)
    assert labelled(engine, labels) == []
    if transport == "unix":
        assert not folder.exists()
    else:
        assert port_closed(urlsplit(url).port or 0)


async def test_handle_reports_logs_and_liveness_and_stops_twice(
    engine: str, env_image: Any
) -> None:
    handle = await astart_server(
        "counter", provider=engine, image=env_image(engine, "counter"), labels=tag()
    )
    try:
        assert await handle.alive()
        assert handle.provider == engine
        assert "serving 'counter' over websocket" in await handle.logs()
    finally:
        await handle.stop(timeout=5)
    await handle.stop()
    assert not await handle.alive()
    logs = await handle.logs()
    assert "serving 'counter'" in logs, logs  # kept from before the container's removal
    assert "SIGTERM, shutting down" in logs  # it was asked to stop, not killed


async def test_containers_run_hardened_with_secrets_only_in_the_servers_environment(
    engine: str, env_image: Any
) -> None:
    secret = "s3cret-" + secrets.token_hex(8)
    handle = await astart_server(
        "counter",
        provider=engine,
        image=env_image(engine, "counter"),
        transport="unix",
        resources={"memory_mb": 256, "cpus": 0.5, "pids": 64},
        environment={"PLAIN_SETTING": "visible"},
        secrets={"ECOTONE_TEST_TOKEN": secret},
        labels=tag(),
    )
    try:
        container = await anyio.to_thread.run_sync(engine_client(engine).containers.get, handle.id)
        attrs = container.attrs
        host = attrs["HostConfig"]
        assert host["ReadonlyRootfs"] is True
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["Init"] is True
        assert host["Memory"] == 256 << 20
        assert host["PidsLimit"] == 64
        assert host["NanoCpus"] == 500_000_000
        assert {u["Name"].lower().removeprefix("rlimit_") for u in host["Ulimits"]} >= {
            "nofile",
            "nproc",
        }
        assert "/tmp" in host["Tmpfs"]
        assert attrs["Config"]["User"] == "65534:65534"
        assert not host.get("CapAdd")
        assert host["CapDrop"] == ["ALL"] or "CAP_SYS_CHROOT" in host["CapDrop"]  # podman lists
        assert "PLAIN_SETTING=visible" in attrs["Config"]["Env"]

        # The secret is nowhere in the engine's configuration, nor on any command line...
        assert secret not in json.dumps(attrs)
        code, out, err = await anyio.to_thread.run_sync(
            exec_in, container, ["python3", "-c", PROBE]
        )
        assert code == 0, err
        seen = json.loads(out)
        assert secret not in json.dumps(seen["cmdlines"])
        # ...but in the server's environment, and the server runs unprivileged.
        server = seen["server"]
        assert server is not None, seen["cmdlines"]
        assert server["env"]["ECOTONE_TEST_TOKEN"] == secret
        assert server["env"]["PLAIN_SETTING"] == "visible"
        status = server["status"]
        assert status["Uid"].split()[:2] == ["65534", "65534"]
        assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000"
        assert status["NoNewPrivs"] == "1"
        code, _, err = await anyio.to_thread.run_sync(
            exec_in, container, ["sh", "-c", "touch /tmp/ok && ! touch /etc/nope"]
        )
        assert code == 0, err

        # On the host, the secret files were deleted once the server had read them (it
        # answers): a crash of this process now would leave no secret on disk.
        folder = Path(urlsplit(handle.url).path).parent.parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert not (folder / "secrets").exists()
        assert secret not in "".join(
            p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
        )
        code, out, _ = await anyio.to_thread.run_sync(
            exec_in, container, ["python3", "-c", "import os; print(os.listdir('/run/secrets'))"]
        )
        assert (code, out.strip()) == (0, "[]")
        async with ecotone.aconnect(handle.url, timeout=10) as client:
            await client.reset(seed=0)
    finally:
        await handle.stop()
    assert not folder.exists()


async def test_a_podman_and_a_docker_server_serve_at_once(
    podman_engine: str, docker_engine: str, env_image: Any
) -> None:
    labels = tag()
    async with (
        ecotone.alaunch(
            "counter", provider="podman", image=env_image("podman", "counter"), labels=labels
        ) as on_podman,
        ecotone.alaunch(
            "counter", provider="docker", image=env_image("docker", "counter"), labels=labels
        ) as on_docker,
    ):
        await on_podman.reset(seed=0)
        await on_docker.reset(seed=0)
        a = await on_podman.step({"delta": 1})
        b = await on_docker.step({"delta": 5})
        assert (a.observation["count"], b.observation["count"]) == (1, 5)
        assert len(labelled("podman", labels)) == len(labelled("docker", labels)) == 1
    assert labelled("podman", labels) == labelled("docker", labels) == []


SIXTEEN_ENGINE = os.environ.get("ECOTONE_TEST_SIXTEEN_ENGINE", "docker")


@pytest.fixture
def sixteen_engine(request: pytest.FixtureRequest) -> str:
    """The engine of the sixteen-container test (ECOTONE_TEST_SIXTEEN_ENGINE, default
    docker), through its fixture: skipped or failed with the reason."""
    return str(request.getfixturevalue(f"{SIXTEEN_ENGINE}_engine"))


async def test_sixteen_containers_start_concurrently_and_all_stop(
    sixteen_engine: str, env_image: Any
) -> None:
    engine = sixteen_engine
    image = env_image(engine, "counter")
    labels = tag()
    counts: list[int] = []

    async def one(delta: int) -> None:
        async with ecotone.alaunch(
            "counter",
            provider=engine,
            image=image,
            labels=labels,
            resources={"memory_mb": 128, "pids": 32},
        ) as env:
            await env.reset(seed=0)
            result = await env.step({"delta": delta})
            counts.append(result.observation["count"])

    async with anyio.create_task_group() as tg:
        for delta in range(16):
            tg.start_soon(one, delta)
    assert sorted(counts) == list(range(16))
    assert labelled(engine, labels) == []


async def test_a_container_killed_mid_episode_is_a_lost_connection_not_a_hang(
    engine: str, env_image: Any
) -> None:
    handle = await astart_server(
        "counter", provider=engine, image=env_image(engine, "counter"), labels=tag()
    )
    try:
        async with ecotone.aconnect(handle.url, timeout=5) as env:
            await env.reset(seed=0)
            await env.step({"delta": 1})
            container = engine_client(engine).containers.get(handle.id)
            await anyio.to_thread.run_sync(container.kill)
            started = time.monotonic()
            with pytest.raises(ecotone.ConnectionLost):
                await env.step({"delta": 1})
            assert time.monotonic() - started < 4
    finally:
        await handle.stop()
    assert not await handle.alive()


async def test_a_missing_image_is_image_not_found_and_nothing_is_pulled(engine: str) -> None:
    labels = tag()
    with pytest.raises(ecotone.ImageNotFound, match="no image 'localhost/ecotone-nope:latest'"):
        await astart_server("nope", provider=engine, labels=labels)
    assert labelled(engine, labels) == []


async def test_a_server_that_exits_at_start_is_start_failed_with_its_output(
    engine: str, env_image: Any
) -> None:
    labels = tag()
    for transport in ("websocket", "unix"):
        with pytest.raises(ecotone.StartFailed) as caught:
            await astart_server(
                "no-such-env",
                provider=engine,
                image=env_image(engine, "counter"),
                transport=transport,
                labels=labels,
            )
        assert caught.value.exit_code == 2
        assert "no environment named 'no-such-env'" in str(caught.value)
        assert labelled(engine, labels) == []
    assert our_folders(engine) == []


def gone(path: Path) -> bool:
    return not path.exists()


def our_folders(engine: str) -> list[Path]:
    """Host folders of `engine`'s provider that this process owns."""
    found = []
    for folder in Path(tempfile.gettempdir()).glob(f"ecotone-ctr-{engine}-*"):
        owner = _container._folder_owner(str(folder))
        if owner is not None and owner.get(LABEL_OWNER) == owner_label():
            found.append(folder)
    return found


@pytest.mark.parametrize("ready_timeout", [0.01, 0.15])
async def test_readiness_timeout_removes_the_container(
    engine: str, env_image: Any, ready_timeout: float
) -> None:
    """The deadline is checked between engine calls; one in progress is finished, and its
    container removed, before ReadinessTimeout (see the module docstring of _container)."""
    image = env_image(engine, "counter")
    labels = tag()
    started = time.monotonic()
    with pytest.raises(ecotone.ReadinessTimeout, match=rf"did not answer within {ready_timeout}s"):
        await astart_server(
            "counter",
            provider=engine,
            image=image,
            transport="unix",
            ready_timeout=ready_timeout,
            labels=labels,
        )
    assert time.monotonic() - started < 3
    assert labelled(engine, labels) == []
    assert our_folders(engine) == []


async def test_gc_removes_what_dead_owners_left_and_keeps_what_live_ones_use(
    engine: str, env_image: Any
) -> None:
    client = engine_client(engine)
    image = env_image(engine, "counter")
    labels = tag()
    # Above pid_max's default: no such process.
    dead_owner = f"{machine_id()}/{boot_id()}/{pid_namespace()}/{2**22 + 7}/1"
    dead_labels = {**labels_for("counter", labels), LABEL_OWNER: dead_owner}
    live_labels = labels_for("counter", labels)
    for extra in (dead_labels, live_labels):
        extra[_container.LABEL_PROVIDER] = engine

    def create(container_labels: dict[str, str]) -> Any:
        return client.containers.create(image, command=["true"], labels=container_labels)

    dead = await anyio.to_thread.run_sync(create, dead_labels)
    live = await anyio.to_thread.run_sync(create, live_labels)
    dead_folder = Path(tempfile.mkdtemp(prefix=f"ecotone-ctr-{engine}-"))
    (dead_folder / "owner.json").write_text(json.dumps(dead_labels))
    live_folder = Path(tempfile.mkdtemp(prefix=f"ecotone-ctr-{engine}-"))
    (live_folder / "owner.json").write_text(json.dumps(live_labels))
    try:
        removed = await provider_for(engine).gc()
        remaining = {c.id for c in labelled(engine, labels)}
        assert remaining == {live.id}
        assert any(dead.id[:12] in line for line in removed), removed
        assert f"folder {dead_folder}, owner {dead_owner} gone" in removed
        assert gone(dead_folder)
        assert our_folders(engine) == [live_folder]
        assert f"folder {live_folder}" not in str(removed)
    finally:
        await anyio.to_thread.run_sync(lambda: live.remove(force=True))
        for folder in (dead_folder, live_folder):
            shutil.rmtree(folder, ignore_errors=True)


async def test_a_start_cancelled_midway_leaves_nothing_behind(engine: str, env_image: Any) -> None:
    image = env_image(engine, "counter")
    labels = tag()
    for delay in (0.05, 0.3):
        with anyio.move_on_after(delay) as scope:
            await astart_server(
                "counter", provider=engine, image=image, transport="unix", labels=labels
            )
        assert scope.cancelled_caught
        assert labelled(engine, labels) == []
        assert our_folders(engine) == []


def test_providers_run_under_asyncio_too(engine: str, env_image: Any) -> None:
    image = env_image(engine, "counter")

    async def episode() -> int:
        async with ecotone.alaunch("counter", provider=engine, image=image, labels=tag()) as env:
            await env.reset(seed=0)
            result = await env.step({"delta": 3})
            return int(result.observation["count"])

    assert anyio.run(episode, backend="asyncio") == 3


async def test_an_unreachable_engine_is_engine_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Docker only: when no podman socket answers, podman's client starts its own service.
    monkeypatch.delitem(engines._clients, "docker", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ecotone.EngineUnavailable, match="docker is not reachable"):
        await astart_server("counter", provider="docker")
    with pytest.raises(ecotone.EngineUnavailable):
        await provider_for("docker").gc()


async def test_a_stop_that_failed_can_be_tried_again(
    engine: str, env_image: Any, engine_proxy: EngineProxy
) -> None:
    image = env_image(engine, "counter")
    real = engine_proxy.direct_client
    labels = tag()
    handle = await astart_server(
        "counter", provider=engine, image=image, transport="unix", labels=labels
    )
    folder = Path(urlsplit(handle.url).path).parent.parent
    find = _container_provider(engine).engine.find
    try:
        engine_proxy.cut()  # the engine stops answering
        with pytest.raises(ecotone.EngineUnavailable, match="stopped answering"):
            await handle.stop(timeout=1)
        assert len(find(real, labels)) == 1
        assert folder.exists()  # the container still uses its socket
        engine_proxy.restore()
        async with anyio.create_task_group() as tg:  # two at once: one stops, one waits
            tg.start_soon(handle.stop)
            tg.start_soon(handle.stop)
        await handle.stop()
        assert find(real, labels) == []
        assert not folder.exists()
        assert "serving 'counter'" in await handle.logs()
    finally:
        for container in find(real, labels):
            container.remove(force=True)
        shutil.rmtree(folder, ignore_errors=True)


def unshare_works() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
        )
    except OSError:
        return False
    return done.returncode == 0


needs_unshare = pytest.mark.skipif(
    not unshare_works(), reason="cannot make a pid namespace (`unshare --pid`, needs root)"
)


def gc_in_another_pid_namespace() -> str:
    """`ecotone gc` run in a new pid namespace (with its own /proc), as in a container."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "ecotone", "gc"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@needs_unshare
def test_gc_from_another_pid_namespace_leaves_a_live_owners_container_alone(
    engine: str, env_image: Any
) -> None:
    labels = tag()
    with ecotone.start_server(
        "counter", provider=engine, image=env_image(engine, "counter"), transport="unix",
        labels=labels,
    ) as server:  # fmt: skip
        folder = Path(urlsplit(server.url).path).parent.parent
        output = gc_in_another_pid_namespace()
        assert labelled(engine, labels) != [], output
        assert folder.exists(), output
        with server.connect() as env:
            env.reset(seed=0)
    assert labelled(engine, labels) == []


NON_ROOT_LAUNCHER = """
import site, sys

site.addsitedir(sys.argv[3])  # this checkout's packages
import ecotone

with ecotone.launch("counter", provider="docker", transport="unix", image=sys.argv[1],
                    labels={"test.ecotone": sys.argv[2]}, secrets={"TOKEN": "t"},
                    ready_timeout=20) as env:
    env.reset(seed=0)
    print(env.step({"delta": 2}).observation["count"])
try:  # a start that fails removes its folder, secrets and all, as a non-root user too
    ecotone.start_server("no-such-env", provider="docker", transport="unix", image=sys.argv[1],
                         labels={"test.ecotone": sys.argv[2]}, secrets={"TOKEN": "t"})
except ecotone.StartFailed:
    print("start failed")
"""
NON_ROOT_ID = 43210


def runs_as_non_root(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "pass"], user=NON_ROOT_ID, group=NON_ROOT_ID)
    except OSError:
        return False
    return done.returncode == 0


def python_for_another_user() -> str:
    """An interpreter of this one's version that a user other than root may run (the
    venv's own may live under /root, 0700); skip when there is none."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a launcher as another user")
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (sys.executable, shutil.which(version, path="/usr/bin:/usr/local/bin")):
        if candidate and runs_as_non_root(candidate):
            return candidate
    pytest.skip(f"no {version} that uid {NON_ROOT_ID} may run")


def test_a_non_root_launcher_can_use_the_unix_socket_of_its_container(
    docker_engine: str, env_image: Any
) -> None:
    """The container runs as the launcher's uid:gid, so the socket the server makes is the
    launcher's (a socket of nobody's, mode 0755, would refuse it)."""
    python = python_for_another_user()
    image = env_image("docker", "counter")
    docker_group = os.stat(engine_socket("docker")).st_gid  # may use the engine
    labels = tag()
    site_packages = sysconfig.get_paths()["purelib"]
    tmp = Path(tempfile.mkdtemp(prefix="eco-"))
    os.chown(tmp, NON_ROOT_ID, NON_ROOT_ID)
    try:
        done = subprocess.run(
            [python, "-c", NON_ROOT_LAUNCHER, image, labels[TEST_LABEL], site_packages],
            user=NON_ROOT_ID,
            group=NON_ROOT_ID,
            extra_groups=[docker_group],
            env={**os.environ, "HOME": "/nonexistent", "TMPDIR": str(tmp)},
            cwd="/",
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split("\n")[:2] == ["2", "start failed"], done.stderr[-3000:]
        assert labelled("docker", labels) == []
        assert list(tmp.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the private podman service ------------------------------------------------------------

SERVICE_LAUNCHER = """
import json, os, signal, sys, time
from ecotone.providers import engines

signal.signal(signal.SIGINT, signal.SIG_IGN)  # a launcher that outlives a Ctrl-C
# Descriptors held open, as pytest's capture and any real program hold some: the service's
# pipes then get numbers above 9, which a shell's redirections cannot name (a bug once).
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(12)]
engines.PODMAN_SOCKETS = ()  # none answers: the private service starts
first = engines.podman_client()
service = engines._service
time.sleep(0.3)  # the supervisor is still there once the service answers
assert service.running(), "the supervisor exited: podman runs unsupervised"
print(json.dumps({"folder": service.folder, "leader": service._process.pid}), flush=True)
for line in sys.stdin:
    if line.strip() == "ping":
        print(json.dumps(bool(engines.podman_client().ping())), flush=True)
    elif line.strip() == "restart":  # the service dies; the next client call restarts it
        os.killpg(service._process.pid, signal.SIGKILL)
        while service.running():
            time.sleep(0.01)
        engines.podman_client()
        # on the same socket: a client made for the first service works again
        print(json.dumps({"leader": service._process.pid, "first": bool(first.ping())}),
              flush=True)
    elif line.strip() == "fork":  # a child that keeps the lifeline: fork without exec
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(json.dumps(child), flush=True)
"""


def group_members(pgid: int) -> set[int]:
    """The running processes of process group `pgid`."""
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                members.add(int(entry))
    return members


class ServiceLauncher:
    """A process that uses the private podman service (SERVICE_LAUNCHER), in a session of
    its own as a launcher run from a terminal is, with no other podman socket to find."""

    def __init__(self, tmp: Path) -> None:
        environment = {
            k: v for k, v in os.environ.items() if k not in ("CONTAINER_HOST", "XDG_RUNTIME_DIR")
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVICE_LAUNCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**environment, "TMPDIR": str(tmp)},
            start_new_session=True,
        )
        self.started = self.ask(None)

    def ask(self, command: str | None) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the launcher exited"
        return json.loads(line)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def service_tmp(podman_engine: str) -> Iterator[Path]:
    """A temporary folder for launchers of the private podman service (short: the socket's
    path must fit in 108 bytes)."""
    if shutil.which("podman") is None:
        pytest.skip("the podman command is not installed")
    folder = Path(tempfile.mkdtemp(prefix="eco-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_private_podman_service_ignores_ctrl_c_restarts_and_dies_with_its_launcher(
    service_tmp: Path,
) -> None:
    launcher = ServiceLauncher(service_tmp)
    try:
        folder, leader = Path(launcher.started["folder"]), launcher.started["leader"]
        assert folder.parent == service_tmp
        assert os.getsid(leader) == leader != os.getsid(launcher.process.pid)
        # Ctrl-C at the terminal: SIGINT to the launcher's process group, not the service's.
        os.killpg(launcher.process.pid, signal.SIGINT)
        time.sleep(0.5)
        assert launcher.ask("ping") is True
        # The service dies: the next client call restarts it, on the same socket.
        again = launcher.ask("restart")
        assert again["first"] is True
        assert again["leader"] != leader and not group_members(leader)
        leader = again["leader"]
        assert group_members(leader)
        # kill -9 of the launcher: the service goes with it...
        launcher.process.send_signal(signal.SIGKILL)
        launcher.process.wait()
        assert wait_until(lambda: not group_members(leader), timeout=10)
    finally:
        launcher.kill()
    # ...and gc removes its folder.
    assert folder.exists()
    (removed,) = engines.sweep_podman_services(str(service_tmp))
    assert str(folder) in removed and "ended" not in removed
    assert not folder.exists()


def test_gc_ends_a_private_podman_service_whose_owner_is_gone(service_tmp: Path) -> None:
    launcher = ServiceLauncher(service_tmp)
    child = 0
    try:
        folder, leader = Path(launcher.started["folder"]), launcher.started["leader"]
        assert engines.sweep_podman_services(str(service_tmp)) == []  # its owner lives
        child = launcher.ask("fork")
        launcher.process.send_signal(signal.SIGKILL)
        launcher.process.wait()
        time.sleep(0.5)
        assert group_members(leader)  # the forked child keeps the lifeline open
        (removed,) = engines.sweep_podman_services(str(service_tmp))
        assert f"ended its service (pid {leader})" in removed
        assert not group_members(leader)
        assert not folder.exists()
    finally:
        launcher.kill()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
