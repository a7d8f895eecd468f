"""The podman and docker providers, against the real engines (see tests/engines.py)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pytest

import ecotone
from ecotone.launcher import astart_server, provider_for
from ecotone.providers import _container, engines
from ecotone.providers._container import server_command
from ecotone.providers._entry import load_secrets
from ecotone.providers.owner import LABEL_OWNER, boot_id, labels_for, owner_label
from tests.engines import engine_client

TEST_LABEL = "ecotone.test"

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
    assert command[:5] == ["python3", "-m", "ecotone.providers._entry", "/run/secrets", "--"]
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
    ],
)
async def test_bad_specs_are_refused_before_the_engine_is_asked(
    options: dict[str, Any], message: str
) -> None:
    spec = ecotone.LaunchSpec(env="counter", **options)
    for name in ("podman", "docker"):
        with pytest.raises(ValueError, match=message):
            await provider_for(name).start(spec)


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

        # On the host, the secret is one 0400 file in a private folder.
        folder = Path(urlsplit(handle.url).path).parent.parent
        token = folder / "secrets" / "ECOTONE_TEST_TOKEN"
        assert stat.S_IMODE(token.stat().st_mode) == 0o400
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        async with ecotone.aconnect(handle.url, timeout=10) as client:
            await client.reset(seed=0)
    finally:
        await handle.stop()
    assert not folder.exists()


async def test_a_podman_and_a_docker_server_serve_at_once(env_image: Any) -> None:
    for name in ("podman", "docker"):
        engine_client(name)
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


async def test_sixteen_containers_start_concurrently_and_all_stop(env_image: Any) -> None:
    engine = SIXTEEN_ENGINE
    engine_client(engine)
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
    engine_client(engine)
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


async def test_readiness_timeout_removes_the_container(engine: str, env_image: Any) -> None:
    labels = tag()
    started = time.monotonic()
    with pytest.raises(ecotone.ReadinessTimeout, match=r"did not answer within 0\.15s"):
        await astart_server(
            "counter",
            provider=engine,
            image=env_image(engine, "counter"),
            ready_timeout=0.15,
            labels=labels,
        )
    assert time.monotonic() - started < 3
    assert labelled(engine, labels) == []


async def test_gc_removes_what_dead_owners_left_and_keeps_what_live_ones_use(
    engine: str, env_image: Any
) -> None:
    client = engine_client(engine)
    image = env_image(engine, "counter")
    labels = tag()
    dead_owner = f"{boot_id()}/{2**22 + 7}/1"  # above pid_max's default: no such process
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
