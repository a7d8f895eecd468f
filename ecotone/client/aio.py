"""The async client: `await ecotone.aconnect(url)` under trio or asyncio (anyio underneath).

Many tasks may share one connection (one session each, or several sessions each). The code
is `ecotone/client/_async/connection.py`, the source the blocking client is generated from;
this module is its public face, plus `aconnect`, which can be awaited or used as
`async with`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import Any, Unpack

from ecotone.client._async import io
from ecotone.client._async.connection import (
    CLOSE_TIMEOUT,
    DEFAULT_TIMEOUT,
    AsyncConnection,
    AsyncEnvClient,
    connect,
)
from ecotone.client._core import ConnectOptions, split_options

Opening = Callable[[], Coroutine[Any, Any, AsyncEnvClient[Any, Any]]]


class _Connecting:
    """What `aconnect` returns: await it, or use it as `async with` (which closes it)."""

    def __init__(self, opening: Opening) -> None:
        self._opening = opening
        self._client: AsyncEnvClient[Any, Any] | None = None

    def __await__(self) -> Generator[Any, None, AsyncEnvClient[Any, Any]]:
        return self._opening().__await__()

    async def __aenter__(self) -> AsyncEnvClient[Any, Any]:
        self._client = await self._opening()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            with io.shielded():
                await self._client.aclose()


def aconnect(
    url: str,
    env: str | None = None,
    **options: Unpack[ConnectOptions],
) -> _Connecting:
    """Connect to a server and open one session, asynchronously (trio or asyncio).

    `async with ecotone.aconnect(url) as env: ...` or `env = await ecotone.aconnect(url)`
    (then `await env.aclose()`). Arguments as for `ecotone.connect`: an option it does not
    take is a TypeError here, before anything is awaited.
    """
    split_options(options, "aconnect")
    return _Connecting(lambda: connect(url, env, **options))


__all__ = ["CLOSE_TIMEOUT", "DEFAULT_TIMEOUT", "AsyncConnection", "AsyncEnvClient", "aconnect"]
