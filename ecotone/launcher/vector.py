"""Many remote sub-envs on servers a provider starts: `ecotone.launch_vector`.

    with ecotone.launch_vector("counter", 64, servers=2, provider="process") as envs:
        obs, infos = envs.reset(seed=0)
        obs, rewards, terminated, truncated, infos = envs.step(actions)

    async with ecotone.alaunch_vector("counter", 64, servers=2, provider="podman") as envs:
        obs, infos = await envs.reset(seed=0)       # trio or asyncio

A `VectorEnv` (numpy needed) whose servers it started and stops on close (`alaunch_vector`:
an `AsyncVectorEnv`). When a server dies, its sub-envs report `episode_lost`;
`envs.restart(ids)` then starts a replacement through the same provider and reopens just
those sub-envs there. Composition, like `ecotone.launch`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import attrs

from ecotone.client.vector import AsyncVectorEnv, VectorEnv
from ecotone.kernel.registry import Registry
from ecotone.launcher.compose import LaunchedServer, astart_server, start_server
from ecotone.launcher.pool import PooledServer, ServerPool
from ecotone.launcher.warm import warm_pool
from ecotone.providers.contract import LaunchSpec, Provider, ServerHandle


@attrs.frozen(kw_only=True, slots=True)
class _Launch:
    """How a launched vector env's servers start: kept to start a dead one's stand-in."""

    env: str | LaunchSpec
    provider: str | Provider
    registry: Registry | None
    spec: Mapping[str, Any]
    """LaunchSpec fields, as `start_server` takes them."""
    pool: int | None = None
    """Take the servers from the process's warm pool of this many (`ecotone.launcher.warm`);
    None: start them."""

    def start(self) -> LaunchedServer | PooledServer:
        """Give one server.

        Returns:
            A server taken warm from the pool, or started now.
        """
        if self.pool is None:
            return start_server(
                self.env, provider=self.provider, registry=self.registry, **self.spec
            )
        return self.warm().take()

    def warm(self) -> ServerPool:
        """Give the warm pool the servers come from (`pool` set).

        Returns:
            The process's pool for this spec and size.
        """
        assert self.pool is not None
        return warm_pool(
            self.env, self.pool, provider=self.provider, registry=self.registry, **self.spec
        )


def start_servers(
    env: str | LaunchSpec,
    count: int,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> list[LaunchedServer]:
    """Start `count` servers at once (each start mostly waits); all of them, or none.

    Args:
        env: An env name, or a LaunchSpec.
        count: How many.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `start_server` takes them.

    Returns:
        The started servers.

    Raises:
        Exception: The first start's error (`start_server`'s), once the servers that did
            start are stopped.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
        futures = [
            pool.submit(start_server, env, provider=provider, registry=registry, **spec)
            for _ in range(count)
        ]
    started: list[LaunchedServer] = []
    error: BaseException | None = None
    for future in futures:
        failure = future.exception()
        if failure is None:
            started.append(future.result())
        elif error is None:
            error = failure
    if error is not None:
        for server in started:
            server.stop()
        raise error
    return started


def take_servers(launch: _Launch, count: int) -> list[LaunchedServer | PooledServer]:
    """Start `count` servers as `launch` says, or take them from its warm pool.

    Started at once, or taken from the pool (those ready now, then each as it becomes
    ready); all of them, or none.

    Args:
        launch: How they start.
        count: How many.

    Returns:
        The servers.
    """
    if launch.pool is None:
        started = start_servers(
            launch.env, count, provider=launch.provider, registry=launch.registry, **launch.spec
        )
        return list(started)
    pool = launch.warm()
    taken: list[LaunchedServer | PooledServer] = []
    try:
        for _ in range(count):
            taken.append(pool.take())
    except BaseException:
        for server in taken:
            server.stop()
        raise
    return taken


class LaunchedVectorEnv(VectorEnv):
    """A VectorEnv over servers it started; `close()` stops them too.

    `launch_vector` makes one. A server that dies is replaced by `restart` through the same
    provider and spec. With `pool` (among `vector`), the servers come warm from the process's
    pool of that many (`ecotone.launcher.warm`), and so do the stand-ins.

    Args:
        env: An env name, or a LaunchSpec (then `spec` must be empty).
        num_envs: How many sub-envs, spread round robin over the servers.
        servers: How many servers to start (at least 1).
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        spec: LaunchSpec fields for the servers (`transport`, `image`, `resources`...) and
            provider options, as `ecotone.launch` takes them as keywords.
        **vector: The vector env's options (`VectorEnv`'s class docstring says what each
            does): `observation_type` (None: dicts), `autoreset_mode` ("next_step"),
            `errors` ("raise"), `step_timeout` (60.0), `reset_options` (None), `codec`
            ("json"), `connect_timeout` (10.0), `record_to` (None), `record_format`
            ("jsonl"), `token` (None: the servers' URLs carry theirs); and `pool` (None:
            start the servers; N: take them warm from the process's pool of N, as
            `ecotone.launch(pool=N)` does).

    Raises:
        ValueError: Fewer than one server or sub-env, an unknown provider, a refused
            LaunchSpec field, a vector option's value that is not one, or a `pool` that is
            not a whole number >= 1.
        TypeError: A keyword that is not a vector option, or a LaunchSpec with `spec` beside
            it.
        ProviderError: A server's start failed; the others were stopped.
        ConnectionLost: A server could not be reached once started.
        SubEnvError: Sub-envs' sessions could not be opened; the servers were stopped.

    Attributes:
        servers: The servers (`LaunchedServer`, or `PooledServer` from a pool), one per URL,
            in the order of `urls`.
    """

    def __init__(
        self,
        env: str | LaunchSpec,
        num_envs: int,
        *,
        servers: int = 1,
        provider: str | Provider = "process",
        registry: Registry | None = None,
        spec: Mapping[str, Any] | None = None,
        **vector: Any,
    ) -> None:
        if servers < 1:
            raise ValueError(f"servers must be >= 1, got {servers}")
        self._launch = _Launch(
            env=env,
            provider=provider,
            registry=registry,
            spec=dict(spec or {}),
            pool=vector.pop("pool", None),
        )
        self.servers = take_servers(self._launch, servers)
        try:
            super().__init__(
                [server.url for server in self.servers],
                num_envs,
                replace_server=self._replace,
                **vector,
            )
        except BaseException:
            self._stop_servers()
            raise

    def _replace(self, index: int, url: str) -> str:
        """Start a dead server's stand-in, from the same provider and spec.

        Returns:
            The stand-in's URL.
        """
        self.servers[index].stop()
        self.servers[index] = self._launch.start()
        return self.servers[index].url

    def _stop_servers(self) -> None:
        for server in self.servers:
            server.stop()

    def close(self) -> None:
        """Close every connection, then stop the servers. Idempotent."""
        try:
            super().close()
        finally:
            self._stop_servers()


def launch_vector(
    env: str | LaunchSpec,
    num_envs: int,
    *,
    servers: int = 1,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    spec: Mapping[str, Any] | None = None,
    **vector: Any,
) -> LaunchedVectorEnv:
    """Start servers for `env` and step `num_envs` sub-envs on them as one (blocking).

    A `VectorEnv` (numpy needed) whose servers it started and stops on close: use it as a
    context manager, or `close()` it. When a server dies its sub-envs report `episode_lost`,
    and `restart(ids)` starts a replacement through the same provider and reopens just those
    sub-envs there.

    Args:
        env: An env name, or a LaunchSpec (then `spec` must be empty).
        num_envs: How many sub-envs, spread round robin over the servers.
        servers: How many servers to start (at least 1).
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        spec: LaunchSpec fields for the servers (`transport`, `image`, `resources`...) and
            provider options, as `ecotone.launch` takes them as keywords.
        **vector: The vector env's options (`VectorEnv`'s class docstring says what each
            does): `observation_type` (None: dicts), `autoreset_mode` ("next_step"),
            `errors` ("raise"), `step_timeout` (60.0), `reset_options` (None), `codec`
            ("json"), `connect_timeout` (10.0), `record_to` (None), `record_format`
            ("jsonl"), `token` (None: the servers' URLs carry theirs); and `pool` (None:
            start the servers; N: take them warm from the process's pool of N, kept for the
            process as `ecotone.launch(pool=N)` keeps it: only the first such launch waits
            for starts).

    Returns:
        The vector env, its sessions open, a `LaunchedVectorEnv` (`servers` are its servers).

    Raises:
        ValueError: Fewer than one server or sub-env, an unknown provider, a refused
            LaunchSpec field, a vector option's value that is not one, or a `pool` that is
            not a whole number >= 1.
        TypeError: A keyword that is not a vector option, or a LaunchSpec with `spec` beside
            it.
        ProviderError: A server's start failed; the others were stopped.
        ConnectionLost: A server could not be reached once started.
        SubEnvError: Sub-envs' sessions could not be opened; the servers were stopped.

    Example:
        >>> with ecotone.launch_vector("counter", 4, servers=2, provider="process") as envs:
        ...     observations, infos = envs.reset(seed=0)
        ...     observations, rewards, terminated, truncated, infos = envs.step(
        ...         [{"delta": 1}, {"delta": 2}, {"delta": 3}, {"delta": 4}]
        ...     )
        >>> rewards
        array([1., 2., 3., 4.])
        >>> [observation["count"] for observation in observations]
        [1, 2, 3, 4]
    """
    return LaunchedVectorEnv(
        env,
        num_envs,
        servers=servers,
        provider=provider,
        registry=registry,
        spec=spec,
        **vector,
    )


async def astart_servers(
    env: str | LaunchSpec,
    count: int,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> list[ServerHandle]:
    """Start `count` servers concurrently; all of them, or none.

    Args:
        env: An env name, or a LaunchSpec.
        count: How many.
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `astart_server` takes them.

    Returns:
        The started servers' handles.

    Raises:
        Exception: The first start's error (`astart_server`'s), once the servers that did
            start are stopped.
    """
    handles: list[ServerHandle | None] = [None] * count
    errors: list[BaseException] = []

    async def one(index: int) -> None:
        try:
            handles[index] = await astart_server(env, provider=provider, registry=registry, **spec)
        except Exception as exc:  # collected: the others still finish, then are stopped
            errors.append(exc)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
    started = [handle for handle in handles if handle is not None]
    if errors:
        with anyio.CancelScope(shield=True):
            for handle in started:
                await handle.stop()
        raise errors[0]
    return started


@contextlib.asynccontextmanager
async def alaunch_vector(
    env: str | LaunchSpec,
    num_envs: int,
    *,
    servers: int = 1,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    spec: Mapping[str, Any] | None = None,
    **vector: Any,
) -> AsyncIterator[LaunchedAsyncVectorEnv]:
    """Start servers for `env` and step `num_envs` sub-envs on them as one (trio or asyncio).

    As `launch_vector`, asynchronously: an `AsyncVectorEnv` over servers `provider` starts, a
    dead one replaced on `restart`, all stopped on the way out. The handles are
    `envs.servers` (in the order of `envs.urls`).

    Args:
        env: An env name, or a LaunchSpec (then `spec` must be empty).
        num_envs: How many sub-envs, spread round robin over the servers.
        servers: How many servers to start (at least 1).
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        spec: LaunchSpec fields for the servers (`transport`, `image`, `resources`...) and
            provider options, as `ecotone.launch` takes them as keywords.
        **vector: The vector env's options (`VectorEnv`'s class docstring says what each
            does): `observation_type` (None: dicts), `autoreset_mode` ("next_step"),
            `errors` ("raise"), `step_timeout` (60.0), `reset_options` (None), `codec`
            ("json"), `connect_timeout` (10.0), `record_to` (None), `record_format`
            ("jsonl"), `token` (None: the servers' URLs carry theirs).

    Yields:
        The vector env, its sessions open, a `LaunchedAsyncVectorEnv`.

    Raises:
        ValueError: Fewer than one server or sub-env, an unknown provider, a refused
            LaunchSpec field, or a vector option's value that is not one.
        TypeError: A keyword that is not a vector option, or a LaunchSpec with `spec` beside
            it.
        ProviderError: A server's start failed; the others were stopped.
        ConnectionLost: A server could not be reached once started.
        SubEnvError: Sub-envs' sessions could not be opened; the servers were stopped.

    Example:
        >>> import trio
        >>> async def main():
        ...     async with ecotone.alaunch_vector("counter", 4, servers=2) as envs:
        ...         observations, infos = await envs.reset(seed=0)
        ...         step = await envs.step([{"delta": 1}] * 4)
        ...         print(step[1])
        >>> trio.run(main)
        [1. 1. 1. 1.]
    """
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    launch = _Launch(env=env, provider=provider, registry=registry, spec=dict(spec or {}))
    handles = await astart_servers(
        env, servers, provider=provider, registry=registry, **launch.spec
    )

    try:
        envs = LaunchedAsyncVectorEnv(handles, launch, num_envs, vector)
    except BaseException:
        with anyio.CancelScope(shield=True):
            for handle in handles:
                await handle.stop()
        raise
    try:
        async with envs:
            yield envs
    finally:
        await envs.aclose()  # also when opening the sessions failed


class LaunchedAsyncVectorEnv(AsyncVectorEnv):
    """An AsyncVectorEnv over servers it started; `aclose()` stops them too.

    Made by `alaunch_vector`, which opens it; a dead server is replaced by `restart` through
    the same provider and spec.

    Args:
        servers: The started servers' handles.
        launch: How they were started (to start a dead one's stand-in).
        num_envs: How many sub-envs, spread round robin over the servers.
        vector: The vector env's options (`AsyncVectorEnv`'s).

    Raises:
        ValueError: Fewer than one sub-env, or a vector option's value that is not one.
        TypeError: A keyword that is not a vector option.

    Attributes:
        servers: The servers' handles, in the order of `urls`.
    """

    def __init__(
        self,
        servers: list[ServerHandle],
        launch: _Launch,
        num_envs: int,
        vector: Mapping[str, Any],
    ) -> None:
        self.servers = servers
        self._launch = launch
        super().__init__(
            [handle.url for handle in servers],
            num_envs,
            replace_server=self._replace,
            **vector,
        )

    async def _replace(self, index: int, url: str) -> str:
        """Start a dead server's stand-in, from the same provider and spec.

        Returns:
            The stand-in's URL.
        """
        launch = self._launch
        with anyio.CancelScope(shield=True):
            await self.servers[index].stop()
        self.servers[index] = await astart_server(
            launch.env, provider=launch.provider, registry=launch.registry, **launch.spec
        )
        return self.servers[index].url

    async def aclose(self) -> None:
        """Close every connection, then stop the servers."""
        try:
            await super().aclose()
        finally:
            with anyio.CancelScope(shield=True):
                for handle in self.servers:
                    await handle.stop()
