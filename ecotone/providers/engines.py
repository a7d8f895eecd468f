"""Reaching a container engine's API, Podman (podman-py) or Docker (the Docker SDK), and what
every user of an engine shares: the engines' names, their "not found" errors, how an engine
that cannot be reached shows, image lookup.

Where the engine is:

- Podman: `$CONTAINER_HOST` (podman's own variable, `unix:///PATH`), else the rootful socket
  `/run/podman/podman.sock`, else the user's `$XDG_RUNTIME_DIR/podman/podman.sock`. When none
  answers and the `podman` command exists, a private `podman system service` is started for
  this process (`PodmanService`).
- Docker: `$DOCKER_HOST`, else `/var/run/docker.sock`. Nothing is started: dockerd needs root
  and system-wide setup.

Either way, an engine that cannot be reached is an `EngineUnavailable` that says what was
tried. The SDKs are blocking: callers run them in worker threads.

The private podman service:

- runs in a session of its own, so a Ctrl-C at the launcher's terminal (SIGINT to the
  launcher's process group) does not stop it in the middle of an operation;
- lives as long as this process: a `/bin/sh` supervisor holds the read end of a pipe whose
  write end only this process holds (the `--lifeline-fd` idea of the process provider), and
  ends the service's process group when it reads end of file, which the kernel delivers
  however this process ends, kill -9 included. Not an idle timeout (`--time=N`): a handle
  that sits idle longer than N would find its engine gone;
- is restarted on the same socket by `podman_client()` when it has exited, so clients
  (and container objects) made for the earlier one work again;
- keeps its socket and log in `$TMPDIR/ecotone-podman-*/`, with `owner` (the owner
  label of this process) and `service` (the label of the supervisor, the leader of the
  service's process group). `sweep_podman_services()`, which the podman provider's `gc()`
  runs, removes the folders of owners that are gone and ends a service still running there
  (a launcher that forked without exec hands the lifeline to its child too).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ecotone.providers.contract import EngineUnavailable
from ecotone.providers.owner import label_pid, owner_alive, owner_label, running_here

ENGINES = ("podman", "docker")
PODMAN_SOCKETS = ("/run/podman/podman.sock",)
DOCKER_SOCKET = "/var/run/docker.sock"
SERVICE_START_TIMEOUT = 10.0
SERVICE_STOP_WAIT = 5.0
SERVICE_PREFIX = "ecotone-podman-"
SERVICE_OWNER = "owner"
"""File in a service's folder: the owner label of the process the service is for."""
SERVICE_LEADER = "service"
"""File in a service's folder: the owner label of the supervisor (its process group's leader)."""
SERVICE_SOCKET = "podman.sock"
SERVICE_LOG = "service.log"

_lock = threading.Lock()
_clients: dict[str, Any] = {}


# --- what every engine user shares ----------------------------------------------------------


def check_engine(name: str) -> str:
    """`name` if it is a container engine ecotone knows, else a ValueError."""
    if name not in ENGINES:
        raise ValueError(f"unknown container engine {name!r}: podman or docker")
    return name


def not_found_errors(engine: str) -> tuple[type[BaseException], ...]:
    """The SDK's "no such container / image" errors."""
    if check_engine(engine) == "podman":
        import podman.errors

        return (podman.errors.NotFound, podman.errors.ImageNotFound)
    import docker.errors

    return (docker.errors.NotFound,)  # ImageNotFound is a NotFound


def is_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the engine could not be reached or stopped answering (the connection
    failed, broke or timed out) rather than that it refused a request. The Docker SDK raises
    requests' errors as they are; podman-py wraps them in its APIError (as the cause), so the
    chain of causes is looked at. An engine's error answer (HTTPError, which both SDKs'
    APIError is) is not this."""
    import requests

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError):
            return True
        if isinstance(current, requests.exceptions.RequestException) and not isinstance(
            current, requests.exceptions.HTTPError
        ):
            return True
        current = current.__cause__
    return False


def find_image(engine: str, client: Any, name: str) -> Any | None:
    """The engine's image called `name`, or None when it has none."""
    try:
        return client.images.get(name)
    except not_found_errors(engine):
        return None


def _ping(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


# --- podman -----------------------------------------------------------------------------------


def _podman_candidates() -> list[str]:
    urls = []
    if os.environ.get("CONTAINER_HOST"):
        urls.append(os.environ["CONTAINER_HOST"])
    urls += [f"unix://{path}" for path in PODMAN_SOCKETS]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        urls.append(f"unix://{runtime}/podman/podman.sock")
    return urls


SUPERVISOR = (
    '{ "$0" system service --time=0 "$1"; kill -TERM 0; } </dev/null & read -r _; kill -TERM 0'
)
"""The script `/bin/sh -c SCRIPT PODMAN URL` runs as the leader of a new session, with the
lifeline as its stdin: podman serves until the lifeline reaches end of file (this process
closed it, or died) or until podman exits by itself; either way the whole process group goes
(`kill 0`). The lifeline is stdin, not a higher descriptor: dash reads only 0-9 in
redirections, and `<&12` made the script fail at once, leaving podman unsupervised."""


def _end_group(leader: int, label: str) -> bool:
    """SIGTERM to the process group that `leader` leads, SIGKILL if it is still there after
    SERVICE_STOP_WAIT; only while `label` (the leader's owner label) shows it is that very
    process, not a reused pid. Returns whether it signalled anything."""
    if leader <= 0 or not running_here(label):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGTERM)
    # The whole group, not only its leader: the service itself may outlive the supervisor.
    deadline = time.monotonic() + SERVICE_STOP_WAIT
    while _group_running(leader) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _group_running(leader):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
        deadline = time.monotonic() + SERVICE_STOP_WAIT
        while _group_running(leader) and time.monotonic() < deadline:
            time.sleep(0.02)
    return True


def _group_running(pgid: int) -> bool:
    """Whether process group `pgid` has a member that is not a zombie (from /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            return True
    return False


class PodmanService:
    """`podman system service` on a private socket, for this process (module docstring)."""

    def __init__(self, podman_bin: str) -> None:
        self.podman_bin = podman_bin
        self.folder = tempfile.mkdtemp(prefix=SERVICE_PREFIX)  # 0700
        self.url = f"unix://{self.folder}/{SERVICE_SOCKET}"
        self._process: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        self._creator = os.getpid()  # a child forked without exec must not stop it at exit
        Path(self.folder, SERVICE_OWNER).write_text(owner_label() + "\n")
        atexit.register(self.close)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the service (again, after it exited) on the same socket; return once the
        socket is there. EngineUnavailable, with the service's output, if it is not."""
        self._end()
        socket_path = os.path.join(self.folder, SERVICE_SOCKET)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)  # an earlier run's, which would make this one fail
        lifeline_read, lifeline_write = os.pipe()  # the write end stays here, not inherited
        log = open(os.path.join(self.folder, SERVICE_LOG), "ab")
        try:
            self._process = subprocess.Popen(
                ["/bin/sh", "-c", SUPERVISOR, self.podman_bin, self.url],
                stdin=lifeline_read,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(lifeline_write)
            raise EngineUnavailable(f"cannot start `podman system service`: {exc}") from None
        finally:
            os.close(lifeline_read)
            log.close()
        self._lifeline = lifeline_write
        Path(self.folder, SERVICE_LEADER).write_text(owner_label(self._process.pid) + "\n")
        deadline = time.monotonic() + SERVICE_START_TIMEOUT
        while time.monotonic() < deadline:
            if os.path.exists(socket_path):
                return
            if not self.running():
                break
            time.sleep(0.05)
        self._end()
        with open(os.path.join(self.folder, SERVICE_LOG), "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        raise EngineUnavailable(f"`podman system service` did not start:\n{tail}")

    def _end(self) -> None:
        """Stop the service's process group, if it runs. The supervisor is this process's
        child and is reaped only here, so its pid (the group's id) cannot be reused before."""
        if self._lifeline is not None:
            os.close(self._lifeline)  # the supervisor ends the group on end of file...
            self._lifeline = None
        process, self._process = self._process, None
        if process is None:
            return
        # The group, even if its leader is gone: podman may outlive the supervisor. Its id
        # cannot have been reused while any member of the group is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # ...but do not wait for it to notice
        deadline = time.monotonic() + SERVICE_STOP_WAIT
        while _group_running(process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _group_running(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        """Stop the service and remove its folder (at exit of the process that made it)."""
        if os.getpid() != self._creator:
            return
        self._end()
        shutil.rmtree(self.folder, ignore_errors=True)


_service: PodmanService | None = None


def _private_podman_client(podman_module: Any, tried: list[str]) -> Any:
    """A client of this process's own podman service, started (or restarted) as needed."""
    global _service
    if _service is None:
        podman_bin = shutil.which("podman")
        if podman_bin is None:
            raise EngineUnavailable(
                "podman is not reachable: no API socket answered and the `podman` command "
                "is not installed (install podman, or set CONTAINER_HOST=unix:///PATH/podman.sock)"
            )
        _service = PodmanService(podman_bin)
    for attempt in range(2):  # a service that runs but does not answer is restarted once
        if attempt or not _service.running():
            _service.start()
        client = podman_module.PodmanClient(base_url=_service.url)
        if _ping(client):
            return client
    raise EngineUnavailable(
        f"podman's API service at {_service.url} started but does not answer; tried "
        + ", ".join(tried)
    )


def podman_client() -> Any:
    """A connected podman-py client (cached per process; checked with a ping each call)."""
    with _lock:
        client = _clients.get("podman")
        if client is not None and _ping(client):
            return client
        try:
            import podman
        except ImportError as exc:
            raise EngineUnavailable(
                "the podman provider needs podman-py: pip install 'ecotone[podman]'"
            ) from exc
        tried = []
        for url in _podman_candidates():
            if url.startswith("unix://") and not os.path.exists(url[len("unix://") :]):
                tried.append(f"{url} (no such socket)")
                continue
            client = podman.PodmanClient(base_url=url)
            if _ping(client):
                _clients["podman"] = client
                return client
            tried.append(f"{url} (no answer)")
        client = _private_podman_client(podman, tried)
        _clients["podman"] = client
        return client


def sweep_podman_services(root: str | None = None) -> list[str]:
    """Remove the private podman services' folders (in `root`, default the temporary folder)
    whose owner is gone, ending a service still running there. Returns what it did."""
    removed = []
    for folder in sorted(Path(root or tempfile.gettempdir()).glob(SERVICE_PREFIX + "*")):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            owner = (folder / SERVICE_OWNER).read_text().strip()
        except OSError:
            continue  # being created (no owner yet), or not ours to read
        if owner_alive(owner):
            continue
        try:
            leader = (folder / SERVICE_LEADER).read_text().strip()
        except OSError:
            leader = ""
        ended = _end_group(label_pid(leader) or 0, leader)
        shutil.rmtree(folder, ignore_errors=True)
        what = f"podman service folder {folder}, owner {owner} gone"
        removed.append(what + (f"; ended its service (pid {label_pid(leader)})" if ended else ""))
    return removed


# --- docker -----------------------------------------------------------------------------------


def docker_client() -> Any:
    """A connected Docker SDK client (cached per process)."""
    with _lock:
        client = _clients.get("docker")
        if client is not None and _ping(client):
            return client
        try:
            import docker
        except ImportError as exc:
            raise EngineUnavailable(
                "the docker provider needs the Docker SDK: pip install 'ecotone[docker]'"
            ) from exc
        url = os.environ.get("DOCKER_HOST") or f"unix://{DOCKER_SOCKET}"
        try:
            client = docker.DockerClient(base_url=url, version="auto", timeout=60)
        except Exception as exc:
            raise EngineUnavailable(f"docker is not reachable at {url}: {exc}") from None
        if not _ping(client):
            raise EngineUnavailable(
                f"docker is not reachable at {url} (is dockerd running? set DOCKER_HOST)"
            )
        _clients["docker"] = client
        return client


def client_for(engine: str) -> Any:
    """`podman_client()` or `docker_client()` by name."""
    return podman_client() if check_engine(engine) == "podman" else docker_client()
