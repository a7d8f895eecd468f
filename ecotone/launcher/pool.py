"""Warm pools: env servers started ahead, so an episode that wants a fresh server gets one now.

    with ecotone.server_pool("coding", size=8, provider="podman") as pool:
        for task in tasks:
            with pool.launch() as env:        # a started server off the shelf, connected
                env.reset(task=task)
                ...
            # that server is stopped; a replacement is already starting

    async with ecotone.AsyncServerPool("coding", size=8) as pool:   # trio or asyncio
        async with pool.alaunch() as env:
            await env.reset()

A pool keeps `size` servers started (through any provider, with any LaunchSpec fields) and
ready: each one answered its provider's readiness probe, and is checked alive again when it is
handed out. `take()` hands one out (the caller owns it then: stop it when done) and starts a
replacement in the background, at most `concurrency` starts at a time. A server is never handed
out twice, so every episode gets one no other episode touched. A start that fails is retried;
after `max_failures` failures in a row the pool stops trying and `take()` raises the last
error instead of waiting forever.

Every way out stops everything the pool started, handed out or not: leaving the `with` block
(an exception, Ctrl-C, a cancelled task) cancels the starts under way (each provider removes
what it had made) and stops every server. A `ServerPool` still open when the program ends
(never closed, or Ctrl-C before its `with` block) is closed at exit. If the owner process is
killed outright, each provider's own rule applies (the process provider's servers end on their
lifeline; the container providers' are labelled with the owner, so `ecotone gc` removes them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread

from ecotone.client.aio import AsyncEnvClient, aconnect
from ecotone.client.sync import EnvClient, connect
from ecotone.kernel.exit import close_at_exit, forget_at_exit
from ecotone.kernel.registry import Registry
from ecotone.launcher.specs import provider_for, spec_of
from ecotone.providers.contract import LaunchSpec, Provider, ServerHandle

log = logging.getLogger("ecotone.launcher")


class PoolClosed(RuntimeError):
    """The pool was closed (or never opened) when a server was asked of it."""


class AsyncServerPool:
    """`size` servers of one LaunchSpec, started ahead and handed out one at a time.

    Use it as `async with` (trio or asyncio): it starts filling on the way in, and on the way
    out stops every server it started, handed out or not (the module docstring has the rules).

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        size: How many servers to keep started and ready (at least 1).
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        concurrency: How many starts may run at a time (default: the size, capped at twice the
            CPU count, or at 2 on one CPU).
        max_failures: Starts that may fail in a row before the pool stops trying; `take()`
            and `wait_ready()` raise the last one's error then.
        **spec: LaunchSpec fields and provider options, as `ecotone.launch` takes them.

    Raises:
        ValueError: A size that is not a whole number >= 1, an unknown provider, or a
            LaunchSpec field's value that is refused.
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.

    Attributes:
        spec: The LaunchSpec every server is started with.
        started: Servers this pool has started so far (handed out or not).

    Example:
        >>> import trio
        >>> async def main():
        ...     async with ecotone.AsyncServerPool("counter", 2, provider="process") as pool:
        ...         async with pool.alaunch() as env:
        ...             result = await env.reset(seed=0)
        ...             print(result.observation["count"])
        >>> trio.run(main)
        0
    """

    def __init__(
        self,
        env: str | LaunchSpec,
        size: int,
        *,
        provider: str | Provider = "process",
        registry: Registry | None = None,
        concurrency: int | None = None,
        max_failures: int = 3,
        **spec: Any,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a pool's size must be a whole number >= 1, got {size!r}")
        self.spec = spec_of(env, spec)
        self.provider = provider_for(provider, registry) if isinstance(provider, str) else provider
        self.size = size
        self.concurrency = concurrency or min(size, max(2, 2 * (os.cpu_count() or 1)))
        self.max_failures = max_failures
        self._ready: list[ServerHandle] = []
        self._out: set[ServerHandle] = set()
        self._starting = 0
        self._failures = 0
        self._error: BaseException | None = None
        self._changed = anyio.Event()
        self._limiter = anyio.CapacityLimiter(self.concurrency)
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self.started = 0

    @property
    def ready(self) -> int:
        """Servers started and waiting to be handed out."""
        return len(self._ready)

    async def __aenter__(self) -> AsyncServerPool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._fill()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        # The block's exception is not the background tasks' (which it never ran in): the
        # task group ends clean, and the exception goes on as it was.
        await self.aclose()
        assert self._tg is not None
        await self._tg.__aexit__(None, None, None)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _fill(self) -> None:
        if self._closed or self._tg is None or self._error is not None:
            return
        while len(self._ready) + self._starting < self.size:
            self._starting += 1
            self._tg.start_soon(self._start_one)

    async def _start_one(self) -> None:
        try:
            async with self._limiter:
                if self._closed:
                    return
                handle = await self.provider.start(self.spec)
        except Exception as exc:
            self._failures += 1
            log.warning("pool: a %s server did not start: %s", self.spec.env, exc)
            if self._failures >= self.max_failures:
                self._error = exc
            failed = True
        else:
            failed = False
        finally:
            self._starting -= 1
            self._notify()
        if failed:  # try again (after a pause that grows), until max_failures in a row
            await anyio.sleep(min(0.1 * 2**self._failures, 5.0))
            self._fill()
            return
        self.started += 1
        self._failures = 0
        if self._closed:
            await self._stop(handle)
            return
        self._ready.append(handle)
        self._notify()
        self._fill()

    async def wait_ready(self, n: int | None = None, timeout: float | None = None) -> None:
        """Wait until `n` servers are ready to hand out.

        Args:
            n: How many (default, and at most: the pool's size).
            timeout: Seconds to wait at most (None: no limit).

        Raises:
            TimeoutError: Fewer were ready when `timeout` passed.
            PoolClosed: The pool is closed, or not open yet.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row and fewer than `n` are ready.
        """
        want = self.size if n is None else min(n, self.size)
        with anyio.fail_after(timeout):
            while len(self._ready) < want:
                self._raise_if_broken(want)
                await self._changed.wait()

    def _raise_if_broken(self, want: int = 1) -> None:
        """Refuse to wait on a pool that cannot give what is asked.

        Raises:
            PoolClosed: The pool is closed, or not open yet.
            ProviderError: The last start's error (or whatever else the provider raised), once
                starts gave up and fewer than `want` servers are ready.
        """
        if self._closed or self._tg is None:
            raise PoolClosed("the pool is closed" if self._closed else "the pool is not open")
        if self._error is not None and len(self._ready) < want and not self._starting:
            raise self._error

    async def take(self) -> ServerHandle:
        """Hand out a ready server, waiting for one if none is ready yet.

        It was checked alive just now; a replacement starts in the background. It is the
        caller's now: stop it, or `give_back` it to be stopped (the pool's close stops it
        anyway).

        Returns:
            The server's handle.

        Raises:
            PoolClosed: The pool is closed (or not open yet), or closed meanwhile.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row and none is ready.
        """
        while True:
            self._raise_if_broken()
            if self._ready:
                handle = self._ready.pop(0)  # the oldest: longest warm
                self._out.add(handle)  # counted as handed out while it is checked: never lost
                self._fill()
                try:
                    alive = await handle.alive()
                except BaseException:
                    self._out.discard(handle)
                    self._stop_soon(handle)
                    raise
                if self._closed:  # closed meanwhile: `aclose` stopped it with the others
                    raise PoolClosed("the pool is closed")
                if alive:
                    return handle
                self._out.discard(handle)
                log.warning("pool: a ready %s server had died; starting another", self.spec.env)
                self._stop_soon(handle)
                continue
            await self._changed.wait()

    def _stop_soon(self, handle: ServerHandle) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._stop, handle)

    async def _stop(self, handle: ServerHandle) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await handle.stop()
            except Exception as exc:
                log.warning("pool: stopping %s failed: %s", handle.id, exc)

    async def give_back(self, handle: ServerHandle) -> None:
        """Stop a server this pool handed out (in the background; `aclose` waits for it).

        Args:
            handle: What `take` returned.
        """
        self._out.discard(handle)
        if self._tg is None or self._closed:
            await self._stop(handle)
        else:
            self._stop_soon(handle)

    @contextlib.asynccontextmanager
    async def alaunch(
        self, *, codec: str = "json", timeout: float | None = 60.0
    ) -> AsyncIterator[AsyncEnvClient[Any, Any]]:
        """Open a session on a server of its own, taken from the pool.

        The session is closed and the server stopped on the way out.

        Args:
            codec: The client's codec, `json` or `msgpack`.
            timeout: The client's default per-call timeout in seconds (None: none).

        Yields:
            The session's client, an `AsyncEnvClient`.

        Raises:
            PoolClosed: The pool is closed.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row.
            ConnectionLost: The server could not be reached.
        """
        handle = await self.take()
        try:
            client = await aconnect(handle.url, codec=codec, timeout=timeout)
            try:
                yield client
            finally:
                with anyio.CancelScope(shield=True):
                    with contextlib.suppress(Exception):
                        await client.aclose()
        finally:
            await self.give_back(handle)

    async def aclose(self) -> None:
        """Stop every server the pool started; safe to call twice.

        Ready ones, handed-out ones still running, and starting ones: those starts are
        cancelled (each provider removes what it had made).
        """
        if self._closed:
            return
        self._closed = True
        self._notify()
        handles = [*self._ready, *self._out]
        self._ready.clear()
        self._out.clear()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for handle in handles:
                    tg.start_soon(self._stop, handle)
        if self._tg is not None:
            self._tg.cancel_scope.cancel()  # the starts under way; stops are shielded


class PooledServer:
    """A server handed out by a `ServerPool` (blocking face): connect to it, stop it.

    A context manager that stops it on the way out. `ServerPool.take` makes them.

    Args:
        pool: The pool it came from.
        handle: Its provider's handle.
    """

    def __init__(self, pool: ServerPool, handle: ServerHandle) -> None:
        self._pool = pool
        self.handle = handle
        self._stopped = False

    @property
    def url(self) -> str:
        """What `ecotone.connect` takes to reach the server (with its token, if any)."""
        return self.handle.url

    @property
    def id(self) -> str:
        """The provider's name for the server (pid, container id)."""
        return self.handle.id

    def connect(self, **kwargs: Any) -> EnvClient[Any, Any]:
        """Open a session on this server, on a connection of its own.

        Args:
            **kwargs: What `ecotone.connect` takes besides the URL (`env`, and its options).

        Returns:
            The session's client (`ecotone.connect(self.url, **kwargs)`).
        """
        return connect(self.url, **kwargs)

    def alive(self) -> bool:
        """Tell whether the server's process or container still runs.

        Returns:
            True while it runs.
        """
        return self._pool._portal.call(self.handle.alive)

    def logs(self, tail: int | None = 200) -> str:
        """Read what the server printed.

        Args:
            tail: How many of the last lines (None: all of them).

        Returns:
            The output's last `tail` lines.
        """
        return self._pool._portal.call(lambda: self.handle.logs(tail))

    def stop(self) -> None:
        """Stop the server (in the background: the pool's close waits for it).

        Safe to call twice, and after the pool's close (which stopped it already).
        """
        if not self._stopped:
            self._stopped = True
            if not self._pool._closed:
                self._pool._portal.call(self._pool.pool.give_back, self.handle)

    def __enter__(self) -> PooledServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerPool:
    """The blocking face of `AsyncServerPool`, started as it is made.

    Its event loop runs in a private thread (an anyio blocking portal on trio), so it can be
    used from plain threads. Use it as a context manager, or `close()` it; one left open when
    the program ends is closed then (`ecotone.kernel.exit`). `server_pool` makes one.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        size: How many servers to keep started and ready (at least 1).
        **kwargs: `AsyncServerPool`'s other arguments: `provider`, `registry`,
            `concurrency`, `max_failures`, and LaunchSpec fields and provider options.

    Raises:
        ValueError: A size that is not a whole number >= 1, an unknown provider, or a
            LaunchSpec field's value that is refused.
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.

    Attributes:
        pool: The `AsyncServerPool` it drives.
    """

    def __init__(self, env: str | LaunchSpec, size: int, **kwargs: Any) -> None:
        self.pool = AsyncServerPool(env, size, **kwargs)
        self._portal_cm = anyio.from_thread.start_blocking_portal(backend="trio")
        self._portal = self._portal_cm.__enter__()
        self._cm = self._portal.wrap_async_context_manager(self.pool)
        try:
            self._cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(*sys.exc_info())
            raise
        self._closed = False
        # if the program ends first: its servers, and the loop's thread
        self._at_exit = close_at_exit(self.close)

    @property
    def size(self) -> int:
        """How many servers the pool keeps started and ready."""
        return self.pool.size

    @property
    def ready(self) -> int:
        """Servers started and waiting to be handed out."""
        return self.pool.ready

    @property
    def started(self) -> int:
        """Servers this pool has started so far (handed out or not)."""
        return self.pool.started

    @property
    def closed(self) -> bool:
        """Whether the pool was closed (its servers stopped)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the pool is closed")

    def wait_ready(self, n: int | None = None, timeout: float | None = None) -> None:
        """Wait until `n` servers are ready to hand out.

        Args:
            n: How many (default, and at most: the pool's size).
            timeout: Seconds to wait at most (None: no limit).

        Raises:
            TimeoutError: Fewer were ready when `timeout` passed.
            PoolClosed: The pool is closed.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row and fewer than `n` are ready.
        """
        self._check_open()
        self._portal.call(lambda: self.pool.wait_ready(n, timeout))

    def take(self) -> PooledServer:
        """Hand out a ready server, waiting for one if none is ready yet.

        It is the caller's now: stop it (or leave its `with` block) when done; a replacement
        starts in the background.

        Returns:
            The server, a `PooledServer`.

        Raises:
            PoolClosed: The pool is closed.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row and none is ready.
        """
        self._check_open()
        return PooledServer(self, self._portal.call(self.pool.take))

    @contextlib.contextmanager
    def launch(
        self, *, codec: str = "json", timeout: float | None = 60.0
    ) -> Iterator[EnvClient[Any, Any]]:
        """Open a session on a server of its own, taken from the pool.

        The session is closed and the server stopped on the way out.

        Args:
            codec: The client's codec, `json` or `msgpack`.
            timeout: The client's default per-call timeout in seconds (None: none).

        Yields:
            The session's client, an `EnvClient`.

        Raises:
            PoolClosed: The pool is closed.
            ProviderError: The last start's error (or whatever else the provider raised), once
                `max_failures` starts failed in a row.
            ConnectionLost: The server could not be reached.
        """
        with self.take() as server:
            client = server.connect(codec=codec, timeout=timeout)
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    client.close()

    def close(self) -> None:
        """Stop every server the pool started; safe to call twice."""
        self._exit(None, None, None)

    def _exit(self, *exc: Any) -> None:
        if self._closed:
            return
        self._closed = True
        forget_at_exit(self._at_exit)
        try:
            self._cm.__exit__(*exc)
        finally:
            self._portal_cm.__exit__(*exc)

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._exit(*exc)

    def __repr__(self) -> str:
        return f"<ServerPool {self.pool.spec.env} x{self.size}: {self.ready} ready>"


def server_pool(env: str | LaunchSpec, size: int, **kwargs: Any) -> ServerPool:
    """Start a pool of `size` servers of `env`, kept ready to hand out (blocking).

    Use it as a context manager, or `close()` it: every server it started is stopped then.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        size: How many servers to keep started and ready (at least 1).
        **kwargs: `provider` ("process"), `registry`, `concurrency` (the size, capped at twice
            the CPU count, or at 2 on one CPU), `max_failures` (3), and LaunchSpec fields and
            provider options.

    Returns:
        The pool, a `ServerPool`.

    Raises:
        ValueError: A size that is not a whole number >= 1, an unknown provider, or a
            LaunchSpec field's value that is refused.
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.

    Example:
        >>> with ecotone.server_pool("counter", size=2, provider="process") as pool:
        ...     with pool.launch() as env:  # a server of its own, stopped after the block
        ...         print(env.reset(seed=0).observation["count"])
        0
    """
    return ServerPool(env, size, **kwargs)


__all__ = ["AsyncServerPool", "PoolClosed", "PooledServer", "ServerPool", "server_pool"]
