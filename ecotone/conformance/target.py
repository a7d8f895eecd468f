"""What the conformance suite runs against: an env in an in-process engine, or a server URL.

Either way the checks talk to it through ecotone's blocking client (`Connection`, `EnvClient`),
so they see exactly the frames and errors a remote client sees. In process, the suite also
holds the kernel, which lets it reach the live env instance behind a session: to ask it for
`sample_action(rng)`, and to call `close()` a second time on it.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from ecotone.client.errors import EcotoneError
from ecotone.client.sync import Connection, EnvClient
from ecotone.kernel import Engine, EnvDefinitionError, EnvSpec, Registry, RegistryError
from ecotone.specs import EnvInfo
from ecotone.transports.inproc.client import InprocSyncChannel

OPENENV_PREFIX = "openenv+"


class TargetError(Exception):
    """The env or the server cannot be found or reached: a usage error, not a failed check."""


class _EngineErrors(logging.Handler):
    """Records what the engine logs at ERROR (an env's close() that raised, for instance)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{text}: {type(exc).__name__}: {exc}"
        self.messages.append(text)


@attrs.frozen
class InProcess:
    """An engine of this process a target's connection reaches, and the owner its sessions
    belong to there (the checks look inside the sessions)."""

    engine: Engine
    owner: object


class Target:
    """An env to check, reached through one client connection.

    `engine` is set in process (None for a URL); `openenv` is true for `openenv+...` URLs,
    where checks of rules OpenEnv's protocol does not have are skipped.
    """

    def __init__(
        self,
        connection: Connection,
        info: EnvInfo,
        *,
        label: str,
        env: str | None = None,
        in_process: InProcess | None = None,
        openenv: bool = False,
    ) -> None:
        self.connection = connection
        self.reconnect: Callable[[], Connection] | None = None
        """Opens another connection to the same engine or server (`connect`)."""
        self.info = info
        self.label = label
        self.env = env
        engine = None if in_process is None else in_process.engine
        self.engine = engine
        self.openenv = openenv
        self._owner = None if in_process is None else in_process.owner
        self._errors: _EngineErrors | None = None
        factory = engine.envs[engine.default_env].factory if engine is not None else None
        sampler = getattr(factory, "sample_action", None)
        self.has_sample_action = callable(sampler) and not inspect.iscoroutinefunction(sampler)
        """Actions come from the env's `sample_action(rng)` (in process, when the env has a
        synchronous one); otherwise they are generated from the Action schema."""
        if engine is not None:
            self._errors = _EngineErrors()
            logging.getLogger("ecotone.engine").addHandler(self._errors)

    @property
    def action_source(self) -> str:
        if self.has_sample_action:
            return "from the env's sample_action(rng)"
        return "generated from the Action schema"

    def open(self) -> EnvClient[Any, Any]:
        """A new session (its own env instance)."""
        return self.connection.open(self.env)

    def connect(self) -> Connection:
        """Another connection to the same engine or server (a seat's holder, a spectator).

        Raises:
            TargetError: The target cannot be reached again (it was given as a connection).
        """
        if self.reconnect is None:
            raise TargetError("this target cannot open another connection")
        return self.reconnect()

    def sample_seat_action(
        self, client: EnvClient[Any, Any], seat: str, rng: random.Random
    ) -> Any | None:
        """The env's own `sample_action(rng, seat)` for a seat of this session, or None
        without one."""
        if not self.has_sample_action:
            return None
        env = self.instance(client)
        return None if env is None else env.env.sample_action(rng, seat)  # its SeatedEnv's

    def instance(self, client: EnvClient[Any, Any]) -> Any | None:
        """The env instance behind a session, in process; None for a URL or a closed session."""
        if self.engine is None:
            return None
        session = self.engine.sessions.get(client.session_id, self._owner)
        return None if session is None else session.env

    def sample_action(self, client: EnvClient[Any, Any], rng: random.Random) -> Any | None:
        """The env's own `sample_action(rng)` for this session, or None without one."""
        if not self.has_sample_action:
            return None
        env = self.instance(client)
        return None if env is None else env.sample_action(rng)

    def close_instance(self, env: Any) -> None:
        """Call `close()` on an env instance directly, as user code may (awaited if async)."""
        result = env.close()
        if inspect.isawaitable(result):

            async def wait() -> None:
                await result

            anyio.run(wait, backend="trio")

    def error_mark(self) -> int:
        return len(self._errors.messages) if self._errors is not None else 0

    def errors_since(self, mark: int) -> list[str]:
        """What the engine logged at ERROR since `mark` (in process only)."""
        return self._errors.messages[mark:] if self._errors is not None else []

    def close(self) -> None:
        try:
            self.connection.close()
        finally:
            if self._errors is not None:
                logging.getLogger("ecotone.engine").removeHandler(self._errors)
                self._errors = None


def _spec(env: str | type | EnvSpec, registry: Registry | None) -> EnvSpec:
    if isinstance(env, EnvSpec):
        return env
    try:
        if isinstance(env, str):
            return (registry or Registry.discover()).env_spec(env)
        return EnvSpec.from_class(env)
    except (RegistryError, EnvDefinitionError) as exc:
        raise TargetError(str(exc)) from exc


def open_target(
    env: str | type | EnvSpec | None = None,
    *,
    url: str | None = None,
    registry: Registry | None = None,
    timeout: float = 30.0,
) -> Target:
    """Connect to what the suite will check.

    With `url`: the server there (`env` then picks one of its envs, by name). Without: `env`
    (an installed env's name, looked up in `registry` or the installed plugins, or an env
    class) served by an engine in this process. Raises TargetError when neither can be had.
    """
    if url is None:
        if env is None:
            raise TargetError("name an environment, or give the URL of a running server")
        spec = _spec(env, registry)
        engine = Engine(spec)

        def inproc(channel: InprocSyncChannel | None = None) -> Connection:
            channel = channel or InprocSyncChannel(engine, "json")
            return Connection(f"inproc://{spec.name}", timeout=timeout, channel=channel)

        first = InprocSyncChannel(engine, "json")
        target = Target(
            inproc(first),
            spec.info(),
            label=f"env {spec.name!r} in an in-process engine",
            in_process=InProcess(engine, first.peer.owner),
        )
        target.reconnect = inproc
        return target
    if env is not None and not isinstance(env, str):
        raise TargetError("with a URL, `env` can only be the name of one of the server's envs")
    try:
        connection = Connection(url, timeout=timeout, connect_timeout=min(timeout, 10.0))
    except (EcotoneError, OSError, ValueError) as exc:
        text = str(exc)
        raise TargetError(text if url in text else f"cannot connect to {url}: {text}") from exc
    try:
        info = connection.describe(env)
    except (EcotoneError, OSError, TimeoutError) as exc:
        connection.close()
        raise TargetError(f"{url} did not describe its environment: {exc}") from exc
    target = Target(
        connection,
        info,
        label=f"env {info.name!r} at {url}",
        env=env,
        openenv=url.startswith(OPENENV_PREFIX),
    )
    target.reconnect = lambda: Connection(url, timeout=timeout, connect_timeout=min(timeout, 10.0))
    return target
