"""Real container engines for tests: find podman and docker, build the test images once.

A test that takes the `engine` fixture runs once per engine (`podman`, `docker`). An engine
that cannot be reached skips the test, with the reason; unless `ECOTONE_REQUIRE_ENGINES`
(a comma-separated list, set by CI: `podman,docker`) names it, then the test fails.

A test that needs one engine in particular takes `podman_engine` or `docker_engine` (same
rules). Fixtures, not calls in the test body: a skip raised inside an async test body loses
its reason.

`env_image(engine, env)` returns an image that serves `env` (built once per session and
engine by `ecotone.launcher.images.build_image`, as `ecotone build` does: this checkout's
ecotone and its dependencies, installed on the host, on the base image `ECOTONE_BASE_IMAGE`, default
`localhost/ecotone-base:bookworm`, Debian with python3 and nothing else; `make base-image`).

`EngineProxy` puts a unix socket that a test can cut and restore in front of an engine: a
real engine that stops answering, without stopping the engine other tests use.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ecotone.launcher.images import build_image
from ecotone.providers import engines
from ecotone.providers.contract import EngineUnavailable

ENGINES = ("podman", "docker")
REQUIRE_VAR = "ECOTONE_REQUIRE_ENGINES"
BASE_IMAGE = os.environ.get("ECOTONE_BASE_IMAGE", "localhost/ecotone-base:bookworm")
TEST_IMAGE = f"localhost/ecotone-pytest:session-{os.getpid()}"  # concurrent sessions: apart


def required_engines() -> set[str]:
    return {e.strip() for e in os.environ.get(REQUIRE_VAR, "").split(",") if e.strip()}


def unavailable(engine: str, reason: str) -> None:
    """Skip, or fail when CI requires `engine`."""
    if engine in required_engines():
        pytest.fail(f"{engine} is required ({REQUIRE_VAR}) but {reason}", pytrace=False)
    pytest.skip(f"{engine} unavailable: {reason}")


def engine_client(engine: str) -> Any:
    """The engine's SDK client, or skip / fail (see the module docstring)."""
    try:
        return engines.client_for(engine)
    except EngineUnavailable as exc:
        unavailable(engine, str(exc))
        raise  # not reached


def require_base_image(engine: str) -> None:
    """Skip (or fail, when CI requires the engine) unless `engine` has BASE_IMAGE."""
    try:
        engine_client(engine).images.get(BASE_IMAGE)
    except Exception:
        unavailable(engine, f"it has no base image {BASE_IMAGE} (run `make base-image`)")


class ImageBuilder:
    """`env_image(engine, env)`: an image serving `env`, built at most once per engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._images: dict[str, str] = {}

    def __call__(self, engine: str, env: str) -> str:
        """One image per engine serves every bundled env: the providers name the env in the
        command they run, so `env` only picks which plugin's distribution goes in."""
        with self._lock:
            if engine not in self._images:
                require_base_image(engine)
                # The host-side cache (~/.cache/ecotone/build) makes this ~1 s after a first run.
                self._images[engine] = build_image(
                    env, engine=engine, base=BASE_IMAGE, tag=TEST_IMAGE
                )
            return self._images[engine]

    def remove_all(self) -> None:
        for engine, image in self._images.items():
            try:
                engines.client_for(engine).images.remove(image, force=True)
            except Exception:
                pass


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn (skipped, or failed under ECOTONE_REQUIRE_ENGINES, if absent)."""
    name: str = request.param
    engine_client(name)
    return name


@pytest.fixture(scope="session")
def podman_engine() -> str:
    """`podman` (skipped, or failed under ECOTONE_REQUIRE_ENGINES, if absent)."""
    engine_client("podman")
    return "podman"


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """`docker` (skipped, or failed under ECOTONE_REQUIRE_ENGINES, if absent)."""
    engine_client("docker")
    return "docker"


@pytest.fixture(scope="session")
def env_image() -> Iterator[Callable[[str, str], str]]:
    builder = ImageBuilder()
    yield builder
    builder.remove_all()


ENGINE_VARIABLES = {"podman": "CONTAINER_HOST", "docker": "DOCKER_HOST"}


def engine_socket(engine: str) -> str:
    """The path of the unix socket the engine answers on (its variable, else skip)."""
    url = os.environ.get(ENGINE_VARIABLES[engine], "")
    if not url.startswith("unix://"):
        pytest.skip(f"{ENGINE_VARIABLES[engine]} is not a unix:// socket here ({url!r})")
    return url[len("unix://") :]


class EngineProxy:
    """A unix socket that forwards each connection to an engine's socket, byte for byte, and
    that a test can `cut()` (the socket goes, and every connection through it breaks) and
    `restore()` (the same path answers again)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.folder = tempfile.mkdtemp(prefix="eco-proxy-")  # short: sun_path is 108 bytes
        self.path = os.path.join(self.folder, "engine.sock")
        self.url = f"unix://{self.path}"
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.direct_client: Any = None

    def restore(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(64)
        listener.settimeout(0.05)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._open.clear()

    def close(self) -> None:
        self.cut()
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open -= {source, sink}
            # Closed by the other pump too: closing twice is harmless.
            source.close()


@pytest.fixture
def engine_proxy(engine: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineProxy]:
    """`engine`, reached through an `EngineProxy`: its variable points there and ecotone's
    cached client is put aside (both restored afterwards); `direct_client` goes around it."""
    proxy = EngineProxy(engine_socket(engine))
    proxy.direct_client = engine_client(engine)  # past the proxy: what is really there
    proxy.restore()
    monkeypatch.setenv(ENGINE_VARIABLES[engine], proxy.url)
    monkeypatch.delitem(engines._clients, engine, raising=False)
    try:
        yield proxy
    finally:
        proxy.close()
