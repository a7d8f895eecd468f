"""Start an env server through a provider and connect to it: `ecotone.launch`.

    with ecotone.launch("counter", provider="process") as env:
        env.reset(seed=0)
        env.step({"delta": 1})

    async with ecotone.alaunch("counter", provider="podman") as env:   # trio or asyncio
        await env.reset(seed=0)

`launch` / `alaunch` yield a connected client and tear the server down on every way out of
the `with` block. `start_server` / `astart_server` give the server itself (its URL, logs,
stop) for callers that connect on their own, such as a vector env over several servers.

Composition only, like `ecotone.server`: the provider contract is `ecotone.providers.contract`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from ecotone.client.aio import AsyncEnvClient, aconnect
from ecotone.client.sync import EnvClient, connect
from ecotone.kernel.exit import close_at_exit, forget_at_exit
from ecotone.kernel.registry import Registry
from ecotone.launcher.pool import PooledServer
from ecotone.launcher.specs import make_spec as make_spec  # its home before specs.py
from ecotone.launcher.specs import provider_for, spec_of
from ecotone.launcher.warm import warm_pool
from ecotone.providers.contract import LaunchSpec, Provider, ServerHandle

T = TypeVar("T")


async def astart_server(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> ServerHandle:
    """Start a server for `env` and return its handle once it answers.

    The caller stops it (`await handle.stop()`). Under trio or asyncio.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `make_spec` takes them.

    Returns:
        The started server's handle (its `url`, `logs`, `alive`, `stop`).

    Raises:
        ValueError: An unknown provider, a LaunchSpec field's value that is refused (an
            unknown transport, say), or what the provider refuses in the spec (an option it
            does not take, `check_spec`'s refusals).
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
        ProviderError: The start failed (`EngineUnavailable`, `ImageNotFound`, `StartFailed`,
            `ReadinessTimeout`); what it had started is removed.
    """
    chosen = provider_for(provider, registry) if isinstance(provider, str) else provider
    launch_spec = spec_of(env, spec)
    return await chosen.start(launch_spec)


@contextlib.asynccontextmanager
async def alaunch(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    codec: str = "json",
    timeout: float | None = 60.0,
    **spec: Any,
) -> AsyncIterator[AsyncEnvClient[Any, Any]]:
    """Start a server, connect one session to it, and yield the client (trio or asyncio).

    On the way out the client is closed and the server stopped, also when the block raises or
    is cancelled.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        codec: The client's codec, `json` or `msgpack`.
        timeout: The client's default per-call timeout in seconds (None: none).
        **spec: LaunchSpec fields and provider options, as `make_spec` takes them.

    Yields:
        The session's client, an `AsyncEnvClient`.

    Raises:
        ValueError: An unknown provider, a LaunchSpec field's value that is refused (an
            unknown transport, say), or what the provider refuses in the spec (an option it
            does not take, `check_spec`'s refusals).
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
        ProviderError: The start failed (`EngineUnavailable`, `ImageNotFound`, `StartFailed`,
            `ReadinessTimeout`); what it had started is removed.
        ConnectionLost: The server could not be reached once started.

    Example:
        >>> import trio
        >>> async def main():
        ...     async with ecotone.alaunch("counter", provider="process") as env:
        ...         await env.reset(seed=0)
        ...         result = await env.step({"delta": 2})
        ...         print(result.observation["count"])
        >>> trio.run(main)
        2
    """
    handle = await astart_server(env, provider=provider, registry=registry, **spec)
    try:
        client = await aconnect(handle.url, codec=codec, timeout=timeout)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await client.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await handle.stop()


class LaunchedServer:
    """The blocking face of a started server: `start_server(...)` returns one.

    Its provider's async calls run in a private event loop thread (an anyio blocking portal
    on trio), so it can be used from plain threads. Stop it with `stop()`, or use it as a
    context manager; one left running when the program ends is stopped then
    (`ecotone.kernel.exit`).

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `make_spec` takes them.

    Raises:
        ValueError: An unknown provider, a LaunchSpec field's value that is refused (an
            unknown transport, say), or what the provider refuses in the spec (an option it
            does not take, `check_spec`'s refusals).
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
        ProviderError: The start failed (`EngineUnavailable`, `ImageNotFound`, `StartFailed`,
            `ReadinessTimeout`); what it had started is removed.

    Attributes:
        handle: The provider's handle of the server.
    """

    def __init__(
        self,
        env: str | LaunchSpec,
        *,
        provider: str | Provider = "process",
        registry: Registry | None = None,
        **spec: Any,
    ) -> None:
        self._portal_cm = anyio.from_thread.start_blocking_portal(backend="trio")
        self._portal = self._portal_cm.__enter__()
        try:
            self.handle: ServerHandle = self._portal.call(
                lambda: astart_server(env, provider=provider, registry=registry, **spec)
            )
        except BaseException:
            # With the exception (KeyboardInterrupt: Ctrl-C during a start), the portal
            # cancels the start instead of waiting it out, and the provider's own cleanup
            # removes what it had made; (None, None, None) would let it finish, then leak it.
            self._portal_cm.__exit__(*sys.exc_info())
            raise
        self._stopped = False
        # if the program ends first: the server, and the loop's thread
        self._at_exit = close_at_exit(self.stop)

    @property
    def url(self) -> str:
        """What `ecotone.connect` takes to reach the server (with its token, if any)."""
        return self.handle.url

    @property
    def id(self) -> str:
        """The provider's name for the server (pid, container id)."""
        return self.handle.id

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._stopped:  # the portal is gone; what a stopped handle answers needs no loop
            return anyio.run(fn, backend="trio")
        return self._portal.call(fn)

    def logs(self, tail: int | None = 200) -> str:
        """Read what the server printed (also after `stop`, as far as the provider kept it).

        Args:
            tail: How many of the last lines (None: all of them).

        Returns:
            The output's last `tail` lines.
        """
        return self._call(lambda: self.handle.logs(tail))

    def alive(self) -> bool:
        """Tell whether the server's process or container still runs.

        Returns:
            True while it runs.
        """
        return self._call(self.handle.alive)

    def connect(self, **kwargs: Any) -> EnvClient[Any, Any]:
        """Open a session on this server, on a connection of its own.

        Args:
            **kwargs: What `ecotone.connect` takes besides the URL (`env`, and its options).

        Returns:
            The session's client (`ecotone.connect(self.url, **kwargs)`).

        Raises:
            ConnectionLost: The server cannot be reached.
            ServerError: The server refused the session (`CapacityError`, `unknown_env`).
            TypeError: An option `connect` does not take.
        """
        return connect(self.url, **kwargs)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and remove what it left; safe to call twice.

        Args:
            timeout: Seconds between asking the server to stop and killing it.
        """
        if self._stopped:
            return
        self._stopped = True
        forget_at_exit(self._at_exit)
        try:
            self._portal.call(lambda: self.handle.stop(timeout))
        finally:
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> LaunchedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LaunchedServer {self.handle.provider}:{self.handle.id} at {self.url}>"


def start_server(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> LaunchedServer:
    """Start a server and return it once it answers (blocking).

    Stop it with `.stop()`, or use it as a context manager; for callers that connect on their
    own, such as a vector env over several servers.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `make_spec` takes them.

    Returns:
        The started server, a `LaunchedServer`.

    Raises:
        ValueError: An unknown provider, a LaunchSpec field's value that is refused (an
            unknown transport, say), or what the provider refuses in the spec (an option it
            does not take, `check_spec`'s refusals).
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
        ProviderError: The start failed (`EngineUnavailable`, `ImageNotFound`, `StartFailed`,
            `ReadinessTimeout`); what it had started is removed.

    Example:
        >>> with ecotone.start_server("counter", provider="process") as server:
        ...     with ecotone.connect(server.url) as env:
        ...         print(env.reset(seed=0).observation["count"])
        0
    """
    return LaunchedServer(env, provider=provider, registry=registry, **spec)


@contextlib.contextmanager
def launch(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    codec: str = "json",
    timeout: float | None = 60.0,
    pool: int | None = None,
    **spec: Any,
) -> Iterator[EnvClient[Any, Any]]:
    """Start a server, connect one session to it, and yield the client (blocking).

    On the way out the client is closed and the server stopped, however the block ends.
    With `pool`, the server comes warm from a pool of that many kept for the process
    (`ecotone.launcher.warm`): only the first such launch waits for a start.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        codec: The client's codec, `json` or `msgpack`.
        timeout: The client's default per-call timeout in seconds (None: none).
        pool: Keep this many servers of this spec started and ready for the process's
            launches, and take one (a server of its own, stopped on the way out while the
            pool starts its replacement); None: start one now.
        **spec: LaunchSpec fields and provider options, as `make_spec` takes them.

    Yields:
        The session's client, an `EnvClient`.

    Raises:
        ValueError: An unknown provider, a LaunchSpec field's value that is refused (an
            unknown transport, say), or what the provider refuses in the spec (an option it
            does not take, `check_spec`'s refusals); a `pool` that is not a whole number
            >= 1.
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
        ProviderError: The start failed (`EngineUnavailable`, `ImageNotFound`, `StartFailed`,
            `ReadinessTimeout`); what it had started is removed. From a pool: once its
            starts failed `max_failures` times in a row.
        ConnectionLost: The server could not be reached once started.

    Example:
        >>> with ecotone.launch("counter", provider="process") as env:
        ...     result = env.reset(seed=0)
        ...     print(env.step({"delta": 1}).observation["count"])
        1
    """
    server: LaunchedServer | PooledServer
    if pool is None:
        server = start_server(env, provider=provider, registry=registry, **spec)
    else:
        server = warm_pool(env, pool, provider=provider, registry=registry, **spec).take()
    with server:
        client = server.connect(codec=codec, timeout=timeout)
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()
