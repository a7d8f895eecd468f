"""What a provider is: something that starts an env server somewhere and stops it again.

A provider is contributed by a plugin through the `ecotone_providers` hook, under a name that
`ecotone.launch(..., provider=NAME)`, `ecotone launch --provider NAME` and the `[launch]`
table of `ecotone.toml` select. The bundled ones are `process` (a local `ecotone serve`
subprocess, optionally in a bubblewrap sandbox), `podman` and `docker`.

The contract, which every provider keeps:

- `start(spec)` first calls `check_spec(spec)`, then returns only once the server answers
  on `handle.url`, or raises. The whole start, pulling nothing and building nothing, fits in
  `spec.ready_timeout` seconds; past it, `ReadinessTimeout`, and whatever was started is
  removed first. (A step that cannot be interrupted, such as a container engine call in
  progress, is finished and undone before the error: a start may overrun the deadline by
  that one step.)
- A start that fails raises one of the `ProviderError`s below and leaves nothing behind: no
  process, container, port, socket or temporary file.
- `handle.stop()` removes everything the start created, may be called more than once, and
  never raises for a server that is already gone.
- Secrets (`spec.secrets`) never appear on a command line or in an engine's container
  configuration; inside the server they are environment variables.
- Everything a provider creates outside the process (containers, sockets, folders) carries the
  labels `ecotone.owner` (machine, boot, pid namespace, pid and start time of the process
  that started it: see `ecotone.providers.owner`) and `ecotone.env`, so that `gc()` can
  remove what an orchestrator that crashed left behind, and only that. Labels starting
  `ecotone.` are ecotone's own: `spec.labels` cannot set them.
- Providers run under trio and asyncio alike: they use anyio, and do blocking engine calls in
  worker threads.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

import attrs

SERVE_PORT: Final = 8000
"""The port a server listens on inside a container or a Pod."""


class ProviderError(RuntimeError):
    """A provider could not do what was asked; subclasses say why."""


class EngineUnavailable(ProviderError):
    """The engine (podman, docker, bubblewrap...) is not installed or not reachable."""


class ImageNotFound(ProviderError):
    """The image to run does not exist in the engine (nothing is pulled implicitly)."""


class StartFailed(ProviderError):
    """The server exited (or could not be created) before it was ready.

    `logs` holds the tail of what it printed, also quoted in the message."""

    def __init__(self, message: str, logs: str = "", exit_code: int | None = None) -> None:
        super().__init__(message + (f"\n--- last output ---\n{logs.rstrip()}" if logs else ""))
        self.logs = logs
        self.exit_code = exit_code


class ReadinessTimeout(ProviderError):
    """The server did not answer within the readiness deadline; it has been removed."""

    def __init__(self, message: str, logs: str = "") -> None:
        super().__init__(message + (f"\n--- last output ---\n{logs.rstrip()}" if logs else ""))
        self.logs = logs


def default_image(env: str) -> str:
    """The image `ecotone build ENV` makes and the container providers run by default:
    `localhost/ecotone-SLUG:latest`, SLUG being the env name in lower case with every run of
    other characters than letters and digits made one `-` (`gymnasium:CartPole-v1` ->
    `localhost/ecotone-gymnasium-cartpole-v1:latest`). The `localhost/` prefix makes podman
    and docker read the name the same way (docker would otherwise mean Docker Hub)."""
    slug = re.sub(r"[^a-z0-9]+", "-", env.lower()).strip("-")
    if not slug:
        raise ValueError(f"env name {env!r} gives no image name: it has no letters or digits")
    if len(slug) > 96:  # repository names stay well under the registries' 255 characters
        slug = slug[:80].rstrip("-") + "-" + hashlib.sha256(env.encode()).hexdigest()[:12]
    return f"localhost/ecotone-{slug}:latest"


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class Resources:
    """Limits for one env server. None: no limit of that kind."""

    memory_mb: int | None = attrs.field(default=1024, validator=_non_negative)
    """Memory, in MiB (containers: the cgroup limit; process: RLIMIT_AS is not set)."""
    cpus: float | None = attrs.field(default=1.0, validator=_non_negative)
    """CPU share, in cores (containers)."""
    pids: int | None = attrs.field(default=256, validator=_non_negative)
    """Processes and threads (containers)."""


SERVER_TRANSPORTS = ("websocket", "http", "tcp", "unix")


def server_transport(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    """attrs validator: one of SERVER_TRANSPORTS (LaunchSpec, and `[launch]` in the config)."""
    if value not in SERVER_TRANSPORTS:
        raise ValueError(
            f"{attribute.name} must be one of {', '.join(SERVER_TRANSPORTS)}, got {value!r}"
        )


@attrs.frozen(slots=True, kw_only=True)
class LaunchSpec:
    """What to start. Providers ignore nothing silently: an option they do not support is a
    `ValueError` that names it."""

    env: str
    """Env name as `ecotone serve` takes it (`counter`, `gymnasium:CartPole-v1`)."""
    transport: str = attrs.field(default="websocket", validator=server_transport)
    """How the client reaches the server: `websocket`, `http` or `tcp` on a loopback port the
    provider picks, or `unix`: a socket in a private folder, with no network at all."""
    image: str | None = None
    """Container image (podman, docker). Default: `default_image(env)`, the name `ecotone
    build` gives it (`localhost/ecotone-counter:latest`)."""
    resources: Resources = attrs.field(factory=Resources)
    environment: Mapping[str, str] = attrs.field(factory=dict)
    """Environment variables for the server."""
    secrets: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """Environment variables for the server that must not leak (see the module docstring)."""
    ready_timeout: float = attrs.field(default=60.0, validator=_non_negative)
    """Seconds for the whole start, until the server answers."""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    """Extra labels on what the provider creates (containers), beside ecotone's own; keys
    under `ecotone.` are refused (`check_spec`)."""
    max_sessions: int | None = None
    """The server's session limit (None: the server's default)."""
    options: Mapping[str, Any] = attrs.field(factory=dict)
    """Provider-specific settings (process: `sandbox`; containers: `user`, `read_only`,
    `tmpfs_mb`)."""


RESERVED_LABEL_PREFIX = "ecotone."
"""Labels under this prefix are ecotone's own (`ecotone.owner` decides what `gc` removes)."""


def _text(what: str, value: object) -> str:
    """`value` if it is a str that UTF-8 can encode (no lone surrogate such as '\\udcff')
    and that holds no NUL; else a ValueError naming `what`."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a str, got {type(value).__name__} {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} cannot be encoded as UTF-8 ({exc.reason})") from None
    if "\0" in value:
        raise ValueError(f"{what} holds a NUL character")
    return value


def check_spec(spec: LaunchSpec) -> None:
    """Refuse what no provider can start faithfully, with a ValueError that names it. Every
    provider calls this first in `start`, before it creates anything:

    - `environment` and `secrets`: names and values are str, UTF-8 encodable, without NUL;
      names are not empty and hold no `=`; no name is in both.
    - `labels`: keys and values are str, UTF-8 encodable, without NUL; no key starts with
      `ecotone.` (ecotone's own labels cannot be overwritten).

    A secret's value is never quoted in the message."""
    for kind, mapping in (("environment", spec.environment), ("secrets", spec.secrets)):
        for name, value in mapping.items():
            _text(f"{kind} name {name!r}", name)
            if not name or "=" in name:
                raise ValueError(f"{kind} name {name!r} is not an environment variable name")
            if kind == "secrets":
                if not isinstance(value, str):
                    raise ValueError(f"secret {name!r} must be a str, got {type(value).__name__}")
                _text(f"secret {name!r}", value)
            else:
                _text(f"environment variable {name!r}", value)
    both = sorted(set(spec.secrets) & set(spec.environment))
    if both:
        raise ValueError(f"{both[0]!r} is both in environment and in secrets")
    for key, value in spec.labels.items():
        _text(f"label key {key!r}", key)
        if key.startswith(RESERVED_LABEL_PREFIX):
            raise ValueError(
                f"label {key!r} is reserved: labels starting {RESERVED_LABEL_PREFIX!r} are "
                "ecotone's own"
            )
        _text(f"label {key!r}", value)


def last_lines(text: str, tail: int | None) -> str:
    """What `ServerHandle.logs(tail)` returns of the output `text`: its last `tail` lines
    (None: all of it; 0 or less: nothing)."""
    if tail is None:
        return text
    if tail <= 0:
        return ""
    return "".join(text.splitlines(keepends=True)[-tail:])


@runtime_checkable
class ServerHandle(Protocol):
    """A started env server."""

    url: str
    """What `ecotone.connect` / `ecotone.aconnect` take."""
    id: str
    """The provider's name for it (pid, container id)."""
    provider: str

    async def logs(self, tail: int | None = 200) -> str:
        """What the server printed (stdout and stderr), its last `tail` lines."""
        ...

    async def alive(self) -> bool:
        """Whether the server process or container is still running."""
        ...

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop it (SIGTERM, then SIGKILL after `timeout`) and remove all it left."""
        ...


@runtime_checkable
class Provider(Protocol):
    """Starts env servers. See the module docstring for the rules."""

    name: str
    description: str

    async def start(self, spec: LaunchSpec) -> ServerHandle:
        """Start a server for `spec`, wait until it answers, return its handle."""
        ...

    async def gc(self) -> list[str]:
        """Remove what earlier runs left behind: things labelled by ecotone whose owner
        process is gone. Returns a description of each thing removed."""
        ...
