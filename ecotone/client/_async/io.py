"""What the async face does its own way: anyio's primitives, so it runs under trio and asyncio.

The blocking face's twin is `ecotone/client/_sync/io.py`; the code generated from the async
source calls these by the same names. Deadlines are `time.monotonic()` values in both faces;
here they become cancel scopes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import anyio

from ecotone.client.channels import AsyncChannel, open_async_channel
from ecotone.client.errors import ConnectionLost

Channel = AsyncChannel
"""The channel type of this face."""

ReplaceServer = Callable[[int, str], Awaitable[str]]
"""`replace_server(index, url) -> new_url` of a vector env: a coroutine function here."""

Lock = anyio.Lock
"""One reader at a time on a connection shared by many tasks."""

OPENS_IN_CONSTRUCTOR = False
"""Constructors cannot await: connections open with `open_url`, vector envs with `aopen`."""


@contextlib.contextmanager
def bounded(deadline: float | None) -> Iterator[None]:
    """TimeoutError when `deadline` (a `time.monotonic()` value) passes within the block."""
    if deadline is None:
        yield
        return
    with anyio.fail_after(max(0.0, deadline - time.monotonic())):
        yield


def shielded() -> anyio.CancelScope:
    """A block that cancellation does not interrupt (a close, a frame half-sent)."""
    return anyio.CancelScope(shield=True)


def channel_now(url: str, codec: str, connect_timeout: float, token: str | None) -> Channel:
    raise TypeError(
        "an async connection opens with `await AsyncConnection.open_url(url)` (or pass the "
        "`channel=` it should use)"
    )


def call_now(fn: Callable[[], Awaitable[Any]]) -> None:  # pragma: no cover - never called
    raise AssertionError("the async face opens nothing in a constructor")


async def open_channel(url: str, codec: str, connect_timeout: float, token: str | None) -> Channel:
    return await open_async_channel(url, codec, connect_timeout, token)


async def read_some(
    links: Sequence[Any],
    deadline: float | None,
    answered: Callable[[Any, list[Any] | ConnectionLost], None],
) -> None:
    """Wait until at least one of `links` (a vector env's, each with a `conn`) has answers,
    or `deadline` passes, and hand what arrived to `answered(link, responses)` (or
    `answered(link, ConnectionLost)`). Several links are read concurrently; the first to
    answer cancels the other reads, which loses nothing (`AsyncConnection.poll`)."""
    delay = math.inf if deadline is None else deadline - time.monotonic()
    with anyio.move_on_after(delay):
        if len(links) == 1:
            await _poll(links[0], answered)
            return
        async with anyio.create_task_group() as group:

            async def first(link: Any) -> None:
                await _poll(link, answered)
                group.cancel_scope.cancel()

            for link in links:
                group.start_soon(first, link)


async def _poll(link: Any, answered: Callable[[Any, list[Any] | ConnectionLost], None]) -> None:
    try:
        responses = await link.conn.poll()
    except ConnectionLost as exc:
        answered(link, exc)
        return
    answered(link, responses)
