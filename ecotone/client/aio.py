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
    AsyncConnection,
    AsyncEnvClient,
    connect,
)
from ecotone.client._async.exchange import DEFAULT_TIMEOUT
from ecotone.client._core import ConnectOptions, split_options

Opening = Callable[[], Coroutine[Any, Any, AsyncEnvClient[Any, Any]]]


class _Connecting:
    """What `aconnect` returns: await it, or use it as `async with` (which closes it).

    Args:
        opening: Opens the session, when awaited.
    """

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

    `async with ecotone.aconnect(url) as env: ...` (which closes the session and its
    connection on the way out) or `env = await ecotone.aconnect(url)` (then `await
    env.aclose()`). The session is on a connection of its own.

    Args:
        url: The server's URL, as `ecotone.connect` takes it.
        env: Which env, when the server serves several (None: its default).
        **options: The same `ConnectOptions` as `ecotone.connect`'s, with the same defaults.

    Returns:
        What to await, or to use as `async with`, for the session's `AsyncEnvClient`.

    Raises:
        TypeError: A keyword that is not one of the options (here, before anything is
            awaited).
        ConnectionLost: When awaited, this and every other error `ecotone.connect` says it
            raises (ValueError, AccessDenied, EcotoneError, ServerError, TimeoutError), for
            the same reasons.

    Example:
        >>> async with ecotone.aconnect("inproc://counter") as env:
        ...     result = await env.reset(seed=0)
        ...     result = await env.step({"delta": 2})
        >>> result.observation["count"], result.reward
        (2, 2.0)
    """
    split_options(options, "aconnect")
    return _Connecting(lambda: connect(url, env, **options))


__all__ = ["CLOSE_TIMEOUT", "DEFAULT_TIMEOUT", "AsyncConnection", "AsyncEnvClient", "aconnect"]
