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
    """A provider could not do what was asked; subclasses say why.

    A start that raises one has removed whatever it had started (see the module docstring).
    """


class EngineUnavailable(ProviderError):
    """The engine (podman, docker, bubblewrap...) is not installed or not reachable."""


class ImageNotFound(ProviderError):
    """The image to run does not exist in the engine (nothing is pulled implicitly)."""


class StartFailed(ProviderError):
    """The server exited (or could not be created) before it was ready.

    Args:
        message: What happened.
        logs: The tail of what the server printed, also quoted in the message.
        exit_code: The server's exit status, when it exited.
    """

    def __init__(self, message: str, logs: str = "", exit_code: int | None = None) -> None:
        super().__init__(message + (f"\n--- last output ---\n{logs.rstrip()}" if logs else ""))
        self.logs = logs
        self.exit_code = exit_code


class ReadinessTimeout(ProviderError):
    """The server did not answer within the readiness deadline; it has been removed.

    Args:
        message: What timed out.
        logs: The tail of what the server printed, also quoted in the message.
    """

    def __init__(self, message: str, logs: str = "") -> None:
        super().__init__(message + (f"\n--- last output ---\n{logs.rstrip()}" if logs else ""))
        self.logs = logs


def default_image(env: str) -> str:
    """Name the image `ecotone build ENV` makes and the container providers run by default.

    The `localhost/` prefix makes podman and docker read the name the same way (docker would
    otherwise mean Docker Hub).

    Args:
        env: The env name.

    Returns:
        `localhost/ecotone-SLUG:latest`, SLUG being the env name in lower case with every run
        of other characters than letters and digits made one `-` (a long one shortened, with a
        hash of the name to keep it apart).

    Raises:
        ValueError: The name has no letters or digits.

    Example:
        >>> default_image("gymnasium:CartPole-v1")
        'localhost/ecotone-gymnasium-cartpole-v1:latest'
    """
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
    """Limits for one env server; None: no limit of that kind.

    Args:
        memory_mb: Memory, in MiB (containers: the cgroup limit; process: RLIMIT_AS is not
            set).
        cpus: CPU share, in cores (containers).
        pids: Processes and threads (containers).

    Raises:
        ValueError: A limit that is not above 0.
    """

    memory_mb: int | None = attrs.field(default=1024, validator=_non_negative)
    cpus: float | None = attrs.field(default=1.0, validator=_non_negative)
    pids: int | None = attrs.field(default=256, validator=_non_negative)


SERVER_TRANSPORTS = ("websocket", "http", "tcp", "unix")


def server_transport(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    """Check, as an attrs validator, that a transport is one a provider can start.

    For LaunchSpec, and `[launch]` in the config.

    Args:
        attribute: The attribute checked (its name is in the message).
        value: The transport.

    Raises:
        ValueError: `value` is not one of SERVER_TRANSPORTS.
    """
    if value not in SERVER_TRANSPORTS:
        raise ValueError(
            f"{attribute.name} must be one of {', '.join(SERVER_TRANSPORTS)}, got {value!r}"
        )


@attrs.frozen(slots=True, kw_only=True)
class LaunchSpec:
    """What to start: an env, and how to serve it.

    Providers ignore nothing silently: an option they do not support is a `ValueError` that
    names it. `ecotone.launch`, `start_server` and the pools take these fields as keywords
    too (every other keyword is one of `options`).

    Args:
        env: Env name as `ecotone serve` takes it (`counter`, `gymnasium:CartPole-v1`).
        transport: How the client reaches the server: `websocket` (the default), `http` or
            `tcp` on a loopback port the provider picks, or `unix`: a socket in a private
            folder, with no network at all.
        image: Container image (podman, docker). Default: `default_image(env)`, the name
            `ecotone build` gives it (`localhost/ecotone-counter:latest`).
        resources: Limits for the server (`Resources()`'s by default).
        environment: Environment variables for the server.
        secrets: Environment variables for the server that must not leak (see the module
            docstring); left out of the repr.
        ready_timeout: Seconds for the whole start, until the server answers (60).
        labels: Extra labels on what the provider creates (containers), beside ecotone's own;
            keys under `ecotone.` are refused (`check_spec`).
        max_sessions: The server's session limit (None: the server's default).
        options: Provider-specific settings (process: `sandbox`; containers: `user`,
            `read_only`, `tmpfs_mb`).

    Raises:
        ValueError: A transport that is not one of SERVER_TRANSPORTS, or a `ready_timeout`
            that is not above 0.
    """

    env: str
    transport: str = attrs.field(default="websocket", validator=server_transport)
    image: str | None = None
    resources: Resources = attrs.field(factory=Resources)
    environment: Mapping[str, str] = attrs.field(factory=dict)
    secrets: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    ready_timeout: float = attrs.field(default=60.0, validator=_non_negative)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    max_sessions: int | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)


RESERVED_LABEL_PREFIX = "ecotone."
"""Labels under this prefix are ecotone's own (`ecotone.owner` decides what `gc` removes)."""


def _text(what: str, value: object) -> str:
    r"""Check that a value can be handed to a process or an engine as text.

    Returns:
        `value`, a str that UTF-8 can encode (no lone surrogate such as '\udcff') and that
        holds no NUL.

    Raises:
        ValueError: `value` is not such a str (the message names `what`).
    """
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
    """Refuse what no provider can start faithfully.

    Every provider calls this first in `start`, before it creates anything:

    - `environment` and `secrets`: names and values are str, UTF-8 encodable, without NUL;
      names are not empty and hold no `=`; no name is in both.
    - `labels`: keys and values are str, UTF-8 encodable, without NUL; no key starts with
      `ecotone.` (ecotone's own labels cannot be overwritten).

    Args:
        spec: The spec to check.

    Raises:
        ValueError: Naming the first thing refused (a secret's value is never quoted).
    """
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
    """Cut a server's output as `ServerHandle.logs(tail)` returns it.

    Args:
        text: The output.
        tail: How many lines to keep (None: all of them; 0 or less: none).

    Returns:
        The last `tail` lines of `text`.
    """
    if tail is None:
        return text
    if tail <= 0:
        return ""
    return "".join(text.splitlines(keepends=True)[-tail:])


@runtime_checkable
class ServerHandle(Protocol):
    """A started env server: what `Provider.start` returns.

    Attributes:
        url: What `ecotone.connect` / `ecotone.aconnect` take.
        id: The provider's name for it (pid, container id).
        provider: The provider's name.
    """

    url: str
    """What `ecotone.connect` / `ecotone.aconnect` take."""
    id: str
    """The provider's name for it (pid, container id)."""
    provider: str

    async def logs(self, tail: int | None = 200) -> str:
        """Read what the server printed (stdout and stderr).

        Also after `stop`, as far as the provider kept it.

        Args:
            tail: How many of the last lines (None: all of them).

        Returns:
            The output's last `tail` lines.
        """
        ...

    async def alive(self) -> bool:
        """Tell whether the server's process or container still runs.

        Returns:
            True while it runs.
        """
        ...

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and remove everything its start created.

        It may be called more than once, and never raises for a server already gone.

        Args:
            timeout: Seconds between asking it to stop (SIGTERM) and killing it (SIGKILL).
        """
        ...


@runtime_checkable
class Provider(Protocol):
    """Starts env servers: the contract in the module docstring, kept by every provider.

    Attributes:
        name: The name `provider=` selects (`process`, `podman`...).
        description: One line on what it starts, and where.
    """

    name: str
    description: str

    async def start(self, spec: LaunchSpec) -> ServerHandle:
        """Start a server for `spec` and wait until it answers.

        Args:
            spec: What to start.

        Returns:
            The started server's handle.

        Raises:
            ValueError: The spec asks what this provider cannot do faithfully (`check_spec`'s
                refusals, an option it does not take).
            EngineUnavailable: The engine it needs is not installed or not reachable.
            ImageNotFound: The image does not exist (nothing is pulled implicitly).
            StartFailed: The server exited, or could not be created, before it was ready.
            ReadinessTimeout: The server did not answer within `spec.ready_timeout`.
        """
        ...

    async def gc(self) -> list[str]:
        """Remove what earlier runs left behind: things labelled by ecotone whose owner is gone.

        Returns:
            A description of each thing removed.
        """
        ...
