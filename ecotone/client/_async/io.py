"""What the async face does its own way: anyio's primitives, so it runs under trio and asyncio.

The blocking face's twin is `ecotone/client/_sync/io.py`; the code generated from the async
source calls these by the same names. Deadlines are `time.monotonic()` values in both faces;
here they become cancel scopes. The streams channels run on are `net.py`'s; this module has
the rest: locks, deadlines, shields, wake-ups (`Wakeup`), blocking calls (`run_blocking`),
opening channels, and waiting on several connections or sources at once (`read_some`,
`receive_any`: a task group, the first to bring something cancelling the others).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ecotone.client.channels import AsyncChannel, open_async_channel
from ecotone.client.errors import ConnectionLost

T = TypeVar("T")

Channel = AsyncChannel
"""The channel type of this face."""

ReplaceServer = Callable[[int, str], Awaitable[str]]
"""`replace_server(index, url) -> new_url` of a vector env: a coroutine function here."""

Lock = anyio.Lock
"""One reader at a time on a connection shared by many tasks."""

CONCURRENT = True
"""Tasks share a channel: a request channel (HTTP) reads each answer in the task that sent its
request, holding the channel's turn, so that only that task's cancellation can cut it short."""

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


async def sleep(seconds: float) -> None:
    """Wait `seconds` (a resuming client between its tries)."""
    await anyio.sleep(seconds)


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
        await _race([functools.partial(_poll, link, answered) for link in links])


async def _poll(link: Any, answered: Callable[[Any, list[Any] | ConnectionLost], None]) -> None:
    try:
        responses = await link.conn.poll()
    except ConnectionLost as exc:
        answered(link, exc)
        return
    answered(link, responses)


class Wakeup:
    """Wakes the tasks waiting for it (`wait`) when another task `set`s it: a channel's
    reader waits here until a request is out."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        await self._event.wait()


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, a blocking call, in a worker thread."""
    return await anyio.to_thread.run_sync(fn, *args)


async def receive_any(
    sources: Sequence[Any],
    deadline: float | None,
    got: Callable[[Any, list[Any] | ConnectionLost], None],
    wakeup: Wakeup | None = None,
) -> None:
    """Wait until one of `sources` (each with `receive(deadline)`) brings messages, or
    `wakeup` is set, and hand what each brought to `got(source, messages)` (or
    `got(source, ConnectionLost)`); TimeoutError once `deadline` passes. The reads race: the
    first to bring messages cancels the others, which loses nothing (a cancelled `receive`
    consumes nothing), and every read that finished is handed over."""
    waits = [functools.partial(_receive, source, got) for source in sources]
    with bounded(deadline):
        await _race([*waits, wakeup.wait] if wakeup is not None else waits)


async def _race(waits: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Run `waits` together until the first is over (the others are cancelled); one is
    simply awaited."""
    if len(waits) == 1:
        await waits[0]()
        return
    async with anyio.create_task_group() as group:

        async def first(wait: Callable[[], Awaitable[None]]) -> None:
            await wait()
            group.cancel_scope.cancel()

        for wait in waits:
            group.start_soon(first, wait)


async def _receive(source: Any, got: Callable[[Any, list[Any] | ConnectionLost], None]) -> None:
    try:
        messages: list[Any] = []
        while not messages:
            messages = await source.receive()
    except ConnectionLost as exc:
        got(source, exc)
        return
    got(source, messages)
