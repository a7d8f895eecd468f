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
from ecotone.providers.contract import LaunchSpec, Provider, ServerHandle


def start_servers(
    env: str | LaunchSpec,
    count: int,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> list[LaunchedServer]:
    """`count` servers started at once (each start mostly waits); all of them, or none and
    the first error."""
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


class LaunchedVectorEnv(VectorEnv):
    """A VectorEnv over servers it started: `servers` (LaunchedServer, one per URL, in the
    order of `urls`); `close()` stops them too."""

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
        self._env = env
        self._provider = provider
        self._registry = registry
        self._spec = dict(spec or {})
        self.servers = start_servers(
            env, servers, provider=provider, registry=registry, **self._spec
        )
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
        """A dead server's stand-in, from the same provider and spec."""
        self.servers[index].stop()
        self.servers[index] = start_server(
            self._env, provider=self._provider, registry=self._registry, **self._spec
        )
        return self.servers[index].url

    def _stop_servers(self) -> None:
        for server in self.servers:
            server.stop()

    def close(self) -> None:
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
    """`num_envs` sub-envs of `env` over `servers` servers that `provider` starts. `spec`:
    LaunchSpec fields for the servers (`transport`, `image`, `resources`, options...);
    `vector`: VectorEnv arguments (`autoreset_mode`, `errors`, `step_timeout`...). Use it as
    a context manager, or `close()` it: that stops the servers."""
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
    """`count` servers started concurrently; all of them, or none and the first error."""
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
    """As `launch_vector`, asynchronously (trio or asyncio): an `AsyncVectorEnv` over servers
    `provider` starts, a dead one replaced on `restart`, all stopped on the way out. The
    handles are `envs.servers` (in the order of `envs.urls`)."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    fields = dict(spec or {})
    handles = await astart_servers(env, servers, provider=provider, registry=registry, **fields)

    try:
        recipe = LaunchRecipe(env, provider, registry, fields)
        envs = LaunchedAsyncVectorEnv(handles, recipe, num_envs, vector)
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


@attrs.frozen
class LaunchRecipe:
    """How the servers of an `alaunch_vector` env are started (`env` through `provider`,
    `registry` for env names, `spec` the LaunchSpec fields): what a replacement needs."""

    env: str | LaunchSpec
    provider: str | Provider
    registry: Registry | None
    spec: Mapping[str, Any]

    async def start(self) -> ServerHandle:
        """One more server, as the others were started."""
        return await astart_server(
            self.env, provider=self.provider, registry=self.registry, **self.spec
        )


class LaunchedAsyncVectorEnv(AsyncVectorEnv):
    """An AsyncVectorEnv over servers it started: `servers` (their handles, in the order of
    `urls`); `aclose()` stops them too. Made by `alaunch_vector`."""

    def __init__(
        self,
        servers: list[ServerHandle],
        recipe: LaunchRecipe,
        num_envs: int,
        vector: Mapping[str, Any],
    ) -> None:
        self.servers = servers
        self._recipe = recipe
        super().__init__(
            [handle.url for handle in servers],
            num_envs,
            replace_server=self._replace,
            **vector,
        )

    async def _replace(self, index: int, url: str) -> str:
        """A dead server's stand-in, from the same provider and spec."""
        with anyio.CancelScope(shield=True):
            await self.servers[index].stop()
        self.servers[index] = await self._recipe.start()
        return self.servers[index].url

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            with anyio.CancelScope(shield=True):
                for handle in self.servers:
                    await handle.stop()
