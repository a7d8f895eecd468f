"""Container providers: what `podman` and `docker` share. Only the engine's API differs.

A `ContainerProvider` runs one container per server, from an image made beforehand by
`ecotone build` (`default_image(env)`, `localhost/ecotone-ENV:latest`, unless the spec names
one): nothing is pulled or built here. It reaches its engine through an `Engine` adapter
(`podman.py`, `docker.py`), which translates one `ContainerConfig` into its SDK's words and
names the SDK's errors.

What every container gets, and why:

- Its command is `python3 -m ecotone serve ENV --transport T ...`, replacing the image's
  own, so that the transport served is the one asked for; the engine's init runs as pid 1
  (`--init`), since Python as pid 1 would ignore SIGTERM and every stop would wait for the
  kill.
- Network. `websocket`, `http`, `tcp`: the server listens on 0.0.0.0:8000 inside, published
  on 127.0.0.1 at a port the engine picks, read back from the container after start. It
  requires a token, made here and handed over as a secret (`ECOTONE_AUTH_TOKEN`, unless the
  spec sets it), so that no other local user reaches it; `handle.url` carries it as
  `?token=`, which the clients send in a header. `unix`:
  no network at all (`--network none`, only `lo` inside); the server's socket is in a private
  host folder bind-mounted at /run/ecotone, and the URL is `unix:///HOSTFOLDER/server.sock`.
- Hardened defaults: read-only root filesystem with a size-limited tmpfs at /tmp, no new
  privileges, every capability dropped, memory / CPU / pids limits from `spec.resources`, an
  unprivileged user (`default_user()`), and both `nofile` and `nproc` ulimits (an API client
  that gives any ulimit replaces the engine's whole default list; podman's default nofile is
  out of reach without CAP_SYS_RESOURCE, see docs/containers.md).
- The user: `65534:65534` (nobody) when this process is root; otherwise this process's own
  uid:gid, so that the unix socket the server creates (mode 0755 under the usual umask:
  connecting needs write permission) and the secret files belong to the host user who has to
  use them. Rootless podman maps container uids to sub-uids, which this does not undo.
- Labels `ecotone.managed`, `ecotone.owner`, `ecotone.env` (`labels_for`) and
  `ecotone.provider` on the container; a host folder, when there is one, holds the same
  labels in `owner.json`. `gc()` removes what carries a dead owner's labels, and only that.
- Secrets: one file per secret (0400, owned by the container's user) in the private host
  folder, bind-mounted read-only at /run/secrets; `ecotone.providers._entry` reads
  them into the environment and execs the server. Neither the engine's configuration nor any command
  line holds a secret's value. Once the server answers (so it has read them), the files are
  deleted: a launcher that crashes leaves no secret on disk.

Options (`spec.options`): `user` (a str such as `"1000:1000"`; default `default_user()`;
None: the image's user), `read_only` (a bool, default True), `tmpfs_mb` (a positive int, the
size of /tmp in MiB, default 64). A wrong type is a ValueError naming the option.

Start. `spec.ready_timeout` is checked before and after each engine call and bounds the
readiness probing; an engine call in progress is not abandoned (its thread cannot be
stopped, and a container it creates must be removed before start raises), so a start may
overrun the deadline by one engine call.

Bind mounts (the `unix` transport, secrets) need the engine on this machine, as the default
sockets are.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets as secrets_module
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import attrs

from ecotone.kernel.config import TOKEN_VARIABLE, with_token
from ecotone.providers.contract import (
    EngineUnavailable,
    ImageNotFound,
    LaunchSpec,
    ReadinessTimeout,
    StartFailed,
    check_spec,
    default_image,
    last_lines,
)
from ecotone.providers.engines import find_image, is_unreachable, not_found_errors
from ecotone.providers.owner import (
    LABEL_ENV,
    LABEL_MANAGED,
    LABEL_OWNER,
    labels_for,
    owner_alive,
)
from ecotone.providers.ready import wait_ready

LABEL_PROVIDER = "ecotone.provider"
CONTAINER_PORT = 8000
SOCKET_DIR = "/run/ecotone"
SOCKET_NAME = "server.sock"
SECRETS_DIR = "/run/secrets"
RUN_FOLDER = "run"
"""In the host folder: bind-mounted at SOCKET_DIR (the `unix` transport)."""
SECRETS_FOLDER = "secrets"
"""In the host folder: bind-mounted read-only at SECRETS_DIR, emptied once the server answers."""
DEFAULT_USER = "65534:65534"
DEFAULT_TMPFS_MB = 64
ULIMITS = {"nofile": (16384, 16384), "nproc": (16384, 16384)}
"""Both, always: an API client that sets any ulimit replaces the engine's default list. nproc
counts every process and thread of the container's user on the host (all `nobody`
containers together, without user namespaces): pids_limit is the per-container cap."""
FOLDER_PREFIX = "ecotone-ctr-"
OWNER_FILE = "owner.json"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the final NUL
LOG_TAIL_ON_FAILURE = 40
KEEP_LOGS = 200
"""Lines of output a handle keeps when it removes its container, for `logs()` after."""
OPTIONS = ("user", "read_only", "tmpfs_mb")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

T = TypeVar("T")


@attrs.frozen(slots=True, kw_only=True)
class Mount:
    source: str
    target: str
    read_only: bool


@attrs.frozen(slots=True, kw_only=True)
class ContainerConfig:
    """One container, in engine-neutral terms; the adapter translates it."""

    image: str
    name: str
    command: list[str]
    labels: dict[str, str]
    environment: dict[str, str]
    user: str | None
    read_only: bool
    tmpfs_mb: int
    memory_bytes: int | None
    cpus: float | None
    pids: int | None
    publish: int | None
    """Container port to publish on 127.0.0.1 at an engine-chosen port; None: no network."""
    mounts: list[Mount]
    ulimits: dict[str, tuple[int, int]] = attrs.field(factory=lambda: dict(ULIMITS))


class Engine(Protocol):
    """What differs between podman-py and the Docker SDK (what they share, such as their
    errors, is in `ecotone.providers.engines`). Every method blocks."""

    name: str
    """`podman` or `docker`."""

    def client(self) -> Any:
        """A connected client; EngineUnavailable when the engine cannot be reached."""
        ...

    def create_kwargs(self, config: ContainerConfig) -> dict[str, Any]:
        """Keyword arguments for `client.containers.create(config.image, **kwargs)`."""
        ...

    def find(self, client: Any, labels: Mapping[str, str]) -> list[Any]:
        """Containers, in any state, that carry all of `labels`."""
        ...

    def stop(self, container: Any, timeout: int) -> None:
        """SIGTERM, SIGKILL after `timeout` s; no error for a container already stopped."""
        ...

    def logs(self, container: Any, tail: int | None) -> str:
        """The container's output, its last `tail` lines (`last_lines`)."""
        ...

    def sweep(self) -> list[str]:
        """Remove what the adapter itself left on this host for owners that are gone (podman:
        private API services); a description of each thing removed."""
        ...


@attrs.frozen(slots=True)
class ContainerOptions:
    """`spec.options`, checked (see the module docstring)."""

    user: str | None
    read_only: bool
    tmpfs_mb: int


def default_user() -> str:
    """The container's user when the spec names none: nobody (`65534:65534`) for a root
    launcher, else the launcher's own uid:gid (see the module docstring)."""
    uid = os.geteuid()
    return DEFAULT_USER if uid == 0 else f"{uid}:{os.getegid()}"


def _numeric_ids(user: str | None) -> tuple[int, int] | None:
    """(uid, gid) when `user` is `UID` or `UID:GID` in numbers, else None."""
    if not user:
        return None
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return None
    return int(uid), int(gid or uid)


def _give(path: str, ids: tuple[int, int] | None, private_mode: int, open_mode: int) -> None:
    """Make `path` usable by the container's user: theirs with `private_mode` when we can
    chown it to them (root; or they are this process's uid:gid), else `open_mode` (the
    private parent folder still keeps others out)."""
    if ids is not None:
        try:
            os.chown(path, *ids)
            os.chmod(path, private_mode)
            return
        except PermissionError:
            pass
    os.chmod(path, open_mode)


def check_container_spec(spec: LaunchSpec) -> ContainerOptions:
    """`check_spec`, and what the container providers add: known options of the right types,
    and secret names that make file names (`[A-Za-z_][A-Za-z0-9_]*`). ValueError otherwise,
    naming what is wrong."""
    check_spec(spec)
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown container provider option {unknown[0]!r} (known: {', '.join(OPTIONS)})"
        )
    for name in spec.secrets:
        if not _ENV_NAME.match(name):
            raise ValueError(f"secret name {name!r} is not an environment variable name")
    user = spec.options.get("user", default_user())
    if user is not None and not isinstance(user, str):
        raise ValueError(
            f"option 'user' must be a str such as '1000:1000' (or None: the image's user), "
            f"got {type(user).__name__} {user!r}"
        )
    read_only = spec.options.get("read_only", True)
    if not isinstance(read_only, bool):
        raise ValueError(f"option 'read_only' must be true or false, got {read_only!r}")
    tmpfs_mb = spec.options.get("tmpfs_mb", DEFAULT_TMPFS_MB)
    if isinstance(tmpfs_mb, bool) or not isinstance(tmpfs_mb, int) or tmpfs_mb <= 0:
        raise ValueError(f"option 'tmpfs_mb' must be a positive int (MiB), got {tmpfs_mb!r}")
    return ContainerOptions(user=user or None, read_only=read_only, tmpfs_mb=tmpfs_mb)


def server_command(spec: LaunchSpec) -> list[str]:
    """The container's command: `ecotone serve` for the spec's transport, through the secrets
    entry point when there are secrets."""
    if spec.transport == "unix":
        where = ["--host", f"{SOCKET_DIR}/{SOCKET_NAME}"]
    else:
        where = ["--host", "0.0.0.0", "--port", str(CONTAINER_PORT)]
    serve = ["serve", spec.env, "--transport", spec.transport, *where]
    if spec.max_sessions is not None:
        serve += ["--max-sessions", str(spec.max_sessions)]
    if spec.secrets:
        return ["python3", "-m", "ecotone.providers._entry", SECRETS_DIR, "--", *serve]
    return ["python3", "-m", "ecotone", *serve]


def _with_server_token(spec: LaunchSpec) -> tuple[LaunchSpec, str | None]:
    """The spec with the token its server will require, and the token. A server on a
    network transport listens on 0.0.0.0 in its container, so it requires a token (reachable
    on the host's loopback, it would otherwise serve any local user): a new one, handed over
    as a secret, unless the spec's secrets or environment set one. `unix` needs none: the
    socket lives in a private folder."""
    if spec.transport == "unix":
        return spec, None
    given = spec.secrets.get(TOKEN_VARIABLE) or spec.environment.get(TOKEN_VARIABLE)
    if given:
        return spec, given
    token = secrets_module.token_urlsafe(24)
    return attrs.evolve(spec, secrets={**spec.secrets, TOKEN_VARIABLE: token}), token


def _url(transport: str, host_port: int | None, folder: str | None) -> str:
    if transport == "unix":
        assert folder is not None
        return f"unix://{folder}/{RUN_FOLDER}/{SOCKET_NAME}"
    scheme = {"websocket": "ws", "http": "http", "tcp": "tcp"}[transport]
    return f"{scheme}://127.0.0.1:{host_port}"


def _host_port(attrs_: Mapping[str, Any], port: int) -> int | None:
    bindings = ((attrs_.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{port}/tcp")
    for binding in bindings or []:
        if binding.get("HostPort") and binding.get("HostIp") in ("127.0.0.1", "", None):
            return int(binding["HostPort"])
    return None


def _folder_owner(folder: str) -> dict[str, str] | None:
    try:
        with open(os.path.join(folder, OWNER_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@attrs.define(eq=False)
class ContainerHandle:
    """A server in a container. `stop()` removes the container and the host folder."""

    url: str
    id: str
    provider: str
    name: str
    _owner: ContainerProvider = attrs.field(repr=False)
    _container: Any = attrs.field(repr=False)
    _folder: str | None = attrs.field(repr=False)
    _lock: anyio.Lock = attrs.field(factory=anyio.Lock, repr=False)
    _stopped: bool = attrs.field(default=False, repr=False)
    _last_logs: str = attrs.field(default="", repr=False)

    async def logs(self, tail: int | None = 200) -> str:
        """What the server printed; after `stop()`, the tail kept from before removal."""
        if self._stopped:
            return last_lines(self._last_logs, tail)
        return await self._owner._logs(self._container, tail)

    async def alive(self) -> bool:
        if self._stopped:
            return False
        return await self._owner._running(self._container)

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop and remove the container, then the host folder. Once it succeeded, calling
        it again does nothing; when it failed (EngineUnavailable: the engine stopped
        answering), calling it again tries again. Concurrent calls run one after the other."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._stopped:
                    return
                self._last_logs = await self._owner._remove(self._container, timeout)
                # Only once the container is gone: the folder holds its socket, and a stop
                # that failed must stay retryable.
                self._stopped = True
                _remove_folder(self._folder)


def _forget_secrets(folder: str) -> None:
    """Delete the secret files of `folder`. Done as soon as the server answers (`_entry`
    read them before it exec'd the server): a launcher that crashes must not leave them on
    disk until gc."""
    box = os.path.join(folder, SECRETS_FOLDER)
    with contextlib.suppress(OSError):
        os.chmod(box, 0o700)  # 0500 / 0555: a non-root owner could not unlink its entries
    shutil.rmtree(box, ignore_errors=True)


def _remove_folder(folder: str | None) -> None:
    if folder is not None:
        _forget_secrets(folder)
        shutil.rmtree(folder, ignore_errors=True)


class ContainerProvider:
    """Starts env servers in containers through one engine. See the module docstring."""

    def __init__(self, engine: Engine, description: str) -> None:
        self.engine = engine
        self.name = engine.name
        self.description = description

    def __repr__(self) -> str:
        return f"<ContainerProvider {self.name}>"

    async def _call(self, fn: Callable[[], T]) -> T:
        """Run one blocking engine call in a worker thread; an engine that stopped answering
        becomes EngineUnavailable."""
        try:
            return await anyio.to_thread.run_sync(fn)
        except EngineUnavailable:
            raise
        except Exception as exc:
            if is_unreachable(exc):
                raise EngineUnavailable(f"{self.name} stopped answering: {exc}") from exc
            raise

    # -- start ---------------------------------------------------------------------------

    async def start(self, spec: LaunchSpec) -> ContainerHandle:
        options = check_container_spec(spec)
        spec, token = _with_server_token(spec)
        deadline = anyio.current_time() + spec.ready_timeout
        engine = self.engine
        client = await anyio.to_thread.run_sync(engine.client)
        image = spec.image or default_image(spec.env)
        if await self._call(lambda: find_image(self.name, client, image)) is None:
            raise ImageNotFound(
                f"{self.name} has no image {image!r} (nothing is pulled: build it with "
                f"`ecotone build {spec.env} --engine {self.name}`, or name another with image=)"
            )
        labels = labels_for(spec.env, dict(spec.labels))
        labels[LABEL_PROVIDER] = self.name
        name = f"ecotone-{re.sub(r'[^a-z0-9]+', '-', spec.env.lower()).strip('-')[:40]}-"
        name += secrets_module.token_hex(4)
        folder: str | None = None
        container: Any = None

        def check_deadline(stage: str) -> None:
            if anyio.current_time() >= deadline:
                raise ReadinessTimeout(
                    f"{self.name} container for {spec.env!r} did not answer within "
                    f"{spec.ready_timeout}s ({stage}); it has been removed"
                )

        try:
            # In this thread: a worker thread's result would be lost to a cancellation.
            folder = self._prepare_folder(spec, options, labels)
            mounts = self._mounts(spec, folder)
            config = self._config(spec, options, image, name, labels, mounts)
            kwargs = engine.create_kwargs(config)
            try:
                container = await self._call(
                    lambda: client.containers.create(image, command=config.command, **kwargs)
                )
            except not_found_errors(self.name) as exc:
                raise ImageNotFound(f"{self.name} has no image {image!r}: {exc}") from None
            except (EngineUnavailable, ImageNotFound):
                raise
            except Exception as exc:
                raise StartFailed(f"{self.name} could not create the container: {exc}") from exc
            check_deadline("the engine was still creating the container")
            try:
                await self._call(container.start)
            except EngineUnavailable:
                raise
            except Exception as exc:
                raise StartFailed(f"{self.name} could not start the container: {exc}") from exc
            check_deadline("the engine was still starting the container")
            await self._call(container.reload)
            host_port = None
            if config.publish is not None:
                host_port = _host_port(container.attrs, CONTAINER_PORT)
                if host_port is None and await self._running(container):
                    raise StartFailed(
                        f"{self.name} published no host port for {CONTAINER_PORT}/tcp: "
                        f"{container.attrs.get('NetworkSettings', {}).get('Ports')!r}"
                    )
            url = _url(spec.transport, host_port, folder)
            ready = False
            if host_port is not None or config.publish is None:
                try:
                    ready = await wait_ready(url, deadline, alive=lambda: self._running(container))
                except TimeoutError as exc:
                    logs = await self._logs_quietly(container, LOG_TAIL_ON_FAILURE)
                    raise ReadinessTimeout(
                        f"{self.name} container for {spec.env!r} did not answer within "
                        f"{spec.ready_timeout}s ({exc}); it has been removed",
                        logs,
                    ) from None
            if not ready:
                await self._call(container.reload)
                exit_code = (container.attrs.get("State") or {}).get("ExitCode")
                logs = await self._logs_quietly(container, LOG_TAIL_ON_FAILURE)
                raise StartFailed(
                    f"{self.name} container for {spec.env!r} exited with code {exit_code} "
                    "before it was ready",
                    logs,
                    exit_code,
                )
            if spec.secrets and folder is not None:
                _forget_secrets(folder)
            return ContainerHandle(
                url=url if token is None else with_token(url, token),
                id=container.id,
                provider=self.name,
                name=name,
                owner=self,
                container=container,
                folder=folder,
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await self._remove_by_name(client, name)
                _remove_folder(folder)
            raise

    def _prepare_folder(
        self, spec: LaunchSpec, options: ContainerOptions, labels: Mapping[str, str]
    ) -> str | None:
        """The private host folder (unix socket, secrets), or None when none is needed. On
        any failure, whatever it made so far (secret files included) is removed."""
        if spec.transport != "unix" and not spec.secrets:
            return None
        folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{self.name}-")  # 0700
        try:
            with open(os.path.join(folder, OWNER_FILE), "w") as f:
                json.dump(dict(labels), f)
            ids = _numeric_ids(options.user)
            if spec.transport == "unix":
                run = os.path.join(folder, RUN_FOLDER)
                if len(os.fsencode(os.path.join(run, SOCKET_NAME))) > MAX_SOCKET_PATH:
                    raise StartFailed(
                        f"the socket path under {folder} is too long for a unix socket: "
                        "set TMPDIR to a shorter folder"
                    )
                os.mkdir(run)
                _give(run, ids, 0o700, 0o777)
            if spec.secrets:
                box = os.path.join(folder, SECRETS_FOLDER)
                os.mkdir(box, 0o700)
                for key, value in spec.secrets.items():
                    path = os.path.join(box, key)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        f.write(value)
                    _give(path, ids, 0o400, 0o444)
                _give(box, ids, 0o500, 0o555)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

    @staticmethod
    def _mounts(spec: LaunchSpec, folder: str | None) -> list[Mount]:
        """The bind mounts of the folder `_prepare_folder` made."""
        if folder is None:
            return []
        mounts = []
        if spec.transport == "unix":
            mounts.append(
                Mount(source=os.path.join(folder, RUN_FOLDER), target=SOCKET_DIR, read_only=False)
            )
        if spec.secrets:
            mounts.append(
                Mount(
                    source=os.path.join(folder, SECRETS_FOLDER), target=SECRETS_DIR, read_only=True
                )
            )
        return mounts

    def _config(
        self,
        spec: LaunchSpec,
        options: ContainerOptions,
        image: str,
        name: str,
        labels: dict[str, str],
        mounts: list[Mount],
    ) -> ContainerConfig:
        resources = spec.resources
        return ContainerConfig(
            image=image,
            name=name,
            command=server_command(spec),
            labels=labels,
            environment=dict(spec.environment),
            user=options.user,
            read_only=options.read_only,
            tmpfs_mb=options.tmpfs_mb,
            memory_bytes=None if resources.memory_mb is None else resources.memory_mb << 20,
            cpus=resources.cpus,
            pids=resources.pids,
            publish=None if spec.transport == "unix" else CONTAINER_PORT,
            mounts=mounts,
        )

    # -- the running container -----------------------------------------------------------

    async def _running(self, container: Any) -> bool:
        def check() -> bool:
            try:
                container.reload()
            except not_found_errors(self.name):
                return False
            return (container.attrs.get("State") or {}).get("Status") == "running"

        return await self._call(check)

    async def _logs(self, container: Any, tail: int | None) -> str:
        def read() -> str:
            try:
                return self.engine.logs(container, tail)
            except not_found_errors(self.name):
                return ""

        return await self._call(read)

    async def _logs_quietly(self, container: Any, tail: int | None) -> str:
        try:
            return await self._logs(container, tail)
        except Exception as exc:
            return f"(no logs: {exc})"

    async def _remove(self, container: Any, timeout: float) -> str:
        """Stop and remove `container`; return the tail of its output (read in between)."""
        not_found = not_found_errors(self.name)

        def remove() -> str:
            try:
                self.engine.stop(container, max(0, math.ceil(timeout)))
            except not_found:
                return ""
            except Exception as exc:
                if is_unreachable(exc):
                    raise
                # Stopping failed (already stopping, exited): removal decides.
            try:
                output = self.engine.logs(container, KEEP_LOGS)
            except Exception as exc:
                if is_unreachable(exc):
                    raise
                output = ""
            try:
                container.remove(force=True)
            except not_found:
                pass
            except Exception as exc:
                if is_unreachable(exc):
                    raise
                # Already being removed (docker 409), or gone meanwhile: fine if it is gone.
                try:
                    container.reload()
                except not_found:
                    return output
                raise
            return output

        return await self._call(remove)

    async def _remove_by_name(self, client: Any, name: str) -> None:
        not_found = not_found_errors(self.name)

        def remove() -> None:
            try:
                client.containers.get(name).remove(force=True)
            except not_found:
                pass

        await self._call(remove)

    # -- gc --------------------------------------------------------------------------------

    async def gc(self) -> list[str]:
        """Remove containers (of this engine), host folders and what the engine adapter left
        (podman: private API services) whose owner is gone."""
        removed: list[str] = await anyio.to_thread.run_sync(self.engine.sweep)
        client = await anyio.to_thread.run_sync(self.engine.client)
        not_found = not_found_errors(self.name)

        def sweep_containers() -> None:
            found = self.engine.find(client, {LABEL_MANAGED: "true", LABEL_PROVIDER: self.name})
            for container in found:
                labels = container.labels or {}
                owner = labels.get(LABEL_OWNER, "")
                if owner_alive(owner):
                    continue
                try:
                    container.remove(force=True)
                except not_found:
                    continue
                removed.append(
                    f"{self.name} container {container.name} ({container.id[:12]}) of env "
                    f"{labels.get(LABEL_ENV, '?')!r}, owner {owner} gone"
                )

        await self._call(sweep_containers)
        removed += await anyio.to_thread.run_sync(self._sweep_folders)
        return removed

    def _sweep_folders(self) -> list[str]:
        """Remove this engine's host folders whose owner is gone."""
        removed = []
        base = tempfile.gettempdir()
        prefix = f"{FOLDER_PREFIX}{self.name}-"
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            return []
        for entry in entries:
            path = os.path.join(base, entry)
            if not entry.startswith(prefix) or not os.path.isdir(path):
                continue
            owner_labels = _folder_owner(path)
            if owner_labels is None:
                continue  # not understood (or still being made): left alone
            owner = str(owner_labels.get(LABEL_OWNER, ""))
            if owner_alive(owner):
                continue
            _remove_folder(path)
            removed.append(f"folder {path}, owner {owner} gone")
        return removed
