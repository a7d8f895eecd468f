"""Reaching a container engine's API: Podman (podman-py) and Docker (the Docker SDK).

Where the engine is:

- Podman: `$CONTAINER_HOST` (podman's own variable, `unix:///PATH`), else the rootful socket
  `/run/podman/podman.sock`, else the user's `$XDG_RUNTIME_DIR/podman/podman.sock`. When none
  answers and the `podman` command exists, `podman system service` is started on a private
  socket for this process (stopped when the process exits).
- Docker: `$DOCKER_HOST`, else `/var/run/docker.sock`. Nothing is started: dockerd needs root
  and system-wide setup.

Either way, an engine that cannot be reached is an `EngineUnavailable` that says what was
tried. The SDKs are blocking: callers run them in worker threads.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

from ecotone.kernel.provider import EngineUnavailable

PODMAN_SOCKETS = ("/run/podman/podman.sock",)
DOCKER_SOCKET = "/var/run/docker.sock"
SERVICE_START_TIMEOUT = 10.0

_lock = threading.Lock()
_clients: dict[str, Any] = {}
_service: subprocess.Popen[bytes] | None = None


def _ping(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _podman_candidates() -> list[str]:
    urls = []
    if os.environ.get("CONTAINER_HOST"):
        urls.append(os.environ["CONTAINER_HOST"])
    urls += [f"unix://{path}" for path in PODMAN_SOCKETS]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        urls.append(f"unix://{runtime}/podman/podman.sock")
    return urls


def _start_podman_service() -> str:
    """Start `podman system service` on a private socket; return its URL."""
    global _service
    podman_bin = shutil.which("podman")
    if podman_bin is None:
        raise EngineUnavailable(
            "podman is not reachable: no API socket answered and the `podman` command is not "
            "installed (install podman, or set CONTAINER_HOST=unix:///PATH/podman.sock)"
        )
    folder = tempfile.mkdtemp(prefix="ecotone-podman-")
    url = f"unix://{folder}/podman.sock"
    log = open(os.path.join(folder, "service.log"), "wb")
    _service = subprocess.Popen(
        [podman_bin, "system", "service", "--time=0", url],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    atexit.register(_stop_podman_service, folder)
    deadline = time.monotonic() + SERVICE_START_TIMEOUT
    while time.monotonic() < deadline:
        if os.path.exists(f"{folder}/podman.sock"):
            return url
        if _service.poll() is not None:
            break
        time.sleep(0.05)
    with open(os.path.join(folder, "service.log"), "rb") as f:
        tail = f.read()[-2000:].decode(errors="replace")
    _stop_podman_service(folder)
    raise EngineUnavailable(f"`podman system service` did not start:\n{tail}")


def _stop_podman_service(folder: str) -> None:
    global _service
    if _service is not None and _service.poll() is None:
        _service.terminate()
        try:
            _service.wait(5)
        except subprocess.TimeoutExpired:
            _service.kill()
    _service = None
    shutil.rmtree(folder, ignore_errors=True)


def podman_client() -> Any:
    """A connected podman-py client (cached per process)."""
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
        client = podman.PodmanClient(base_url=_start_podman_service())
        if not _ping(client):
            raise EngineUnavailable(
                "podman's API service started but does not answer; tried " + ", ".join(tried)
            )
        _clients["podman"] = client
        return client


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
    if engine == "podman":
        return podman_client()
    if engine == "docker":
        return docker_client()
    raise ValueError(f"unknown container engine {engine!r}: podman or docker")
