"""The async client: `await ecotone.aconnect(url)` under trio or asyncio (anyio underneath).

Many tasks may share one connection (one session each, or several sessions each). The code
is `ecotone/client/_async/connection.py`, the source the blocking client is generated from;
this module is its public face, plus `aconnect`, which can be awaited or used as
`async with`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ecotone.client._async import io
from ecotone.client._async.connection import (
    CLOSE_TIMEOUT,
    DEFAULT_TIMEOUT,
    AsyncConnection,
    AsyncEnvClient,
    open_session,
)


class _Connecting:
    """What `aconnect` returns: await it, or use it as `async with`."""

    def __init__(self, url: str, env: str | None, kwargs: dict[str, Any]) -> None:
        self._url = url
        self._env = env
        self._kwargs = kwargs
        self._client: AsyncEnvClient[Any, Any] | None = None

    def __await__(self) -> Generator[Any, None, AsyncEnvClient[Any, Any]]:
        return open_session(self._url, self._env, **self._kwargs).__await__()

    async def __aenter__(self) -> AsyncEnvClient[Any, Any]:
        self._client = await open_session(self._url, self._env, **self._kwargs)
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            with io.shielded():
                await self._client.aclose()


def aconnect(
    url: str,
    env: str | None = None,
    *,
    observation_type: Any = None,
    state_type: Any = None,
    codec: str = "json",
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float = 10.0,
    token: str | None = None,
) -> _Connecting:
    """Connect to a server and open one session, asynchronously (trio or asyncio).

    `async with ecotone.aconnect(url) as env: ...` or `env = await ecotone.aconnect(url)`
    (then `await env.aclose()`). Arguments as for `ecotone.connect`.
    """
    return _Connecting(
        url,
        env,
        dict(
            observation_type=observation_type,
            state_type=state_type,
            codec=codec,
            timeout=timeout,
            connect_timeout=connect_timeout,
            token=token,
        ),
    )


__all__ = ["CLOSE_TIMEOUT", "DEFAULT_TIMEOUT", "AsyncConnection", "AsyncEnvClient", "aconnect"]
