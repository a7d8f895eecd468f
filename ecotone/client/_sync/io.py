"""What the blocking face does its own way: plain sockets, `select`, no event loop, no thread.

The async face's twin is `ecotone/client/_async/io.py`; the code generated from the async
source calls these by the same names. A blocking connection belongs to one thread at a time,
so its lock is no lock, nothing can wake a wait but the wait itself (`Wakeup`), a blocking
call is simply made (`run_blocking`), and deadlines are enforced by the streams themselves
(`net.py`: SO_RCVTIMEO). Waiting on several connections or sources at once (`read_some`,
`receive_any`) is one `select`, spinning first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ecotone.client.channels import SyncChannel, open_sync_channel
from ecotone.client.errors import ConnectionLost
from ecotone.kernel.polling import BusyPoll, client_budget_us

T = TypeVar("T")

Channel = SyncChannel
"""The channel type of this face."""

ReplaceServer = Callable[[int, str], str]
"""`replace_server(index, url) -> new_url` of a vector env: a plain function here."""

CONCURRENT = False
"""One thread: a request channel (HTTP) reads an answer when it is asked for (`receive`, with
the caller's deadline)."""

OPENS_IN_CONSTRUCTOR = True
"""`ecotone.Connection(url)` and `ecotone.VectorEnv(urls, n)` connect as they are made."""

SLICE = 0.005
"""Seconds one link is read for when several must be read and one cannot be selected on."""


class Lock:
    """No lock: a blocking connection is used by one thread at a time."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def sleep(seconds: float) -> None:
    """Wait `seconds` (a resuming client between its tries)."""
    time.sleep(seconds)


def bounded(deadline: float | None) -> contextlib.nullcontext[None]:
    """Nothing to arm: every blocking receive is given the deadline itself."""
    return contextlib.nullcontext()


def shielded() -> contextlib.nullcontext[None]:
    """Nothing to shield from: no cancellation here."""
    return contextlib.nullcontext()


def channel_now(url: str, codec: str, connect_timeout: float, token: str | None) -> Channel:
    return open_sync_channel(url, codec, connect_timeout, token)


def call_now(fn: Callable[[], Any]) -> None:
    fn()


def open_channel(url: str, codec: str, connect_timeout: float, token: str | None) -> Channel:
    return open_sync_channel(url, codec, connect_timeout, token)


def read_some(
    links: Sequence[Any],
    deadline: float | None,
    answered: Callable[[Any, list[Any] | ConnectionLost], None],
) -> None:
    """Wait until at least one of `links` (a vector env's, each with a `conn`) has something
    to read, or `deadline` passes, and hand what arrived to `answered(link, responses)` (or
    `answered(link, ConnectionLost)`): one `select` over their sockets, then one read of each
    readable one, so that a link whose bytes hold no answer (a ping, a late answer dropped)
    never holds up the others; links without a socket are read in turn, briefly."""
    if len(links) == 1:
        _poll(links[0], deadline, answered)
        return
    fds = {link.conn.fileno(): link for link in links}
    if None in fds:
        for link in links:
            end = time.monotonic() + SLICE
            _poll(link, end if deadline is None else min(deadline, end), answered)
        return
    for fd in wait_readable(list(fds), deadline):  # data is there: one read each, no block
        _poll(fds[fd], None, answered, once=True)


def wait_readable(fds: Sequence[int], deadline: float | None) -> list[int]:
    """Those of `fds` with bytes to read, once at least one has, or none when `deadline`
    passes. The wait spins first (the process's policy for waits on several sockets) only
    while this process and as many servers as `fds` fit in the cores it may run on: with
    local servers that fill them, a spinning client takes the time of the very servers it
    waits for (the figures: docs/architecture.md, "Readers spin before they sleep")."""
    poll = _select_poll()
    readable = None
    if len(fds) < _cores():
        readable = poll.spin(lambda: select.select(fds, [], [], 0)[0] or None, deadline)
    if readable:
        return readable
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    began = time.monotonic()
    readable, _, _ = select.select(fds, [], [], timeout)
    if readable:
        poll.blocked(time.monotonic() - began)
    return readable


@functools.cache
def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - no affinity on this platform
        return os.cpu_count() or 1


_SELECT_POLL: BusyPoll | None = None
"""Spin-then-block for waits on several links (`ecotone.kernel.polling`): one policy for the
process, made at the first such wait, as its vector envs' waits take turns on its thread (a
race between threads can only make one wait spin more or less)."""


def _select_poll() -> BusyPoll:
    global _SELECT_POLL
    if _SELECT_POLL is None:
        _SELECT_POLL = BusyPoll(client_budget_us())
    return _SELECT_POLL


def _poll(
    link: Any,
    deadline: float | None,
    answered: Callable[[Any, list[Any] | ConnectionLost], None],
    *,
    once: bool = False,
) -> None:
    """Read `link` until it has answers or `deadline` passes (`once`: one read, answers or
    none), and hand what came to `answered`."""
    try:
        responses = link.conn.poll_once(deadline) if once else link.conn.poll(deadline)
    except TimeoutError:
        return
    except ConnectionLost as exc:
        answered(link, exc)
        return
    answered(link, responses)


class Wakeup:
    """Nothing wakes a blocking reader: the thread that would send is the one waiting. So a
    wait for a request to come out is over at once (TimeoutError: nothing is due)."""

    __slots__ = ()

    def set(self) -> None:
        return None

    def wait(self) -> None:
        raise TimeoutError


def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, here and now."""
    return fn(*args)


def receive_any(
    sources: Sequence[Any],
    deadline: float | None,
    got: Callable[[Any, list[Any] | ConnectionLost], None],
    wakeup: Wakeup | None = None,
) -> None:
    """Wait until one of `sources` (each with `receive(deadline)`, `fileno()` and `ready`)
    has something to read, and hand what each brought to `got(source, messages)` (or
    `got(source, ConnectionLost)`): those with messages waiting already, else one `select`
    over their sockets (spinning first) and one read of each readable one; one source is
    simply read. TimeoutError past `deadline`."""
    ready = [s for s in sources if s.ready]
    if not ready and len(sources) == 1:
        ready = list(sources)
    elif not ready:
        fds = {s.fileno(): s for s in sources}
        if None in fds:  # pragma: no cover - every source here has a socket
            raise TypeError("receive_any needs sources with sockets")
        ready = [fds[fd] for fd in wait_readable(list(fds), deadline)]
        if not ready:
            raise TimeoutError
        deadline = None  # data is there: one read each, no wait
    for source in ready:
        try:
            messages = source.receive(deadline)
        except ConnectionLost as exc:
            got(source, exc)
            continue
        got(source, messages)
