"""Real container engines for tests: find podman and docker, build the test images once.

A test that takes the `engine` fixture runs once per engine (`podman`, `docker`). An engine
that cannot be reached skips the test, with the reason; unless `ECOTONE_REQUIRE_ENGINES`
(a comma-separated list, set by CI: `podman,docker`) names it, then the test fails.

`env_image(engine, env)` returns an image that serves `env` (built once per session and
engine by `ecotone.images.build_image`, as `ecotone build` does: this checkout's ecotone and
its dependencies, installed on the host, on the base image `ECOTONE_BASE_IMAGE`, default
`localhost/ecotone-base:bookworm`, Debian with python3 and nothing else; `make base-image`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ecotone.images import build_image
from ecotone.kernel.provider import EngineUnavailable
from ecotone.providers import engines

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
def env_image() -> Iterator[Callable[[str, str], str]]:
    builder = ImageBuilder()
    yield builder
    builder.remove_all()
