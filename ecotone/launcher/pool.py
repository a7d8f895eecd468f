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
from ecotone.launcher.compose import make_spec, provider_for
from ecotone.providers.contract import LaunchSpec, Provider, ServerHandle

log = logging.getLogger("ecotone.launcher")


class PoolClosed(RuntimeError):
    """The pool was closed (or never opened) when a server was asked of it."""


class AsyncServerPool:
    """`size` servers of one LaunchSpec, started ahead and handed out one at a time."""

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
        if isinstance(env, LaunchSpec):
            if spec:
                raise TypeError(
                    f"a LaunchSpec was given, so {', '.join(sorted(spec))} would be ignored"
                )
            self.spec = env
        else:
            self.spec = make_spec(env, **spec)
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
        """Servers this pool has started so far (handed out or not)."""

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
        """Until `n` servers (default: the pool's size) are ready to hand out."""
        want = self.size if n is None else min(n, self.size)
        with anyio.fail_after(timeout):
            while len(self._ready) < want:
                self._raise_if_broken(want)
                await self._changed.wait()

    def _raise_if_broken(self, want: int = 1) -> None:
        """PoolClosed, or the last start's error once starts gave up and fewer than `want`
        servers are ready."""
        if self._closed or self._tg is None:
            raise PoolClosed("the pool is closed" if self._closed else "the pool is not open")
        if self._error is not None and len(self._ready) < want and not self._starting:
            raise self._error

    async def take(self) -> ServerHandle:
        """A ready server, now the caller's (stop it, or `give_back` it to be stopped); a
        replacement starts in the background. Waits if none is ready yet."""
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
        """Stop a server this pool handed out (in the background; `aclose` waits for it)."""
        self._out.discard(handle)
        if self._tg is None or self._closed:
            await self._stop(handle)
        else:
            self._stop_soon(handle)

    @contextlib.asynccontextmanager
    async def alaunch(
        self, *, codec: str = "json", timeout: float | None = 60.0
    ) -> AsyncIterator[AsyncEnvClient[Any, Any]]:
        """A session on a server of its own, taken from the pool; the server is stopped on
        the way out."""
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
        """Stop every server the pool started (ready, handed out and still running, or
        starting: those starts are cancelled). Safe to call twice."""
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
    """A server handed out by a `ServerPool` (blocking face): connect to it, stop it."""

    def __init__(self, pool: ServerPool, handle: ServerHandle) -> None:
        self._pool = pool
        self.handle = handle
        self._stopped = False

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def id(self) -> str:
        return self.handle.id

    def connect(self, **kwargs: Any) -> EnvClient[Any, Any]:
        return connect(self.url, **kwargs)

    def alive(self) -> bool:
        return self._pool._portal.call(self.handle.alive)

    def logs(self, tail: int | None = 200) -> str:
        return self._pool._portal.call(lambda: self.handle.logs(tail))

    def stop(self) -> None:
        """Stop it (in the background: the pool's close waits for it); safe to call twice,
        and after the pool's close (which stopped it already)."""
        if not self._stopped:
            self._stopped = True
            if not self._pool._closed:
                self._pool._portal.call(self._pool.pool.give_back, self.handle)

    def __enter__(self) -> PooledServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerPool:
    """The blocking face of `AsyncServerPool`: its event loop runs in a private thread (an
    anyio blocking portal on trio), so it can be used from plain threads. One left open when
    the program ends is closed then (`ecotone.kernel.exit`)."""

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
        return self.pool.size

    @property
    def ready(self) -> int:
        return self.pool.ready

    @property
    def started(self) -> int:
        return self.pool.started

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the pool is closed")

    def wait_ready(self, n: int | None = None, timeout: float | None = None) -> None:
        """Until `n` servers (default: the pool's size) are ready to hand out."""
        self._check_open()
        self._portal.call(lambda: self.pool.wait_ready(n, timeout))

    def take(self) -> PooledServer:
        """A ready server, now the caller's: stop it (or leave the `with` block) when done."""
        self._check_open()
        return PooledServer(self, self._portal.call(self.pool.take))

    @contextlib.contextmanager
    def launch(
        self, *, codec: str = "json", timeout: float | None = 60.0
    ) -> Iterator[EnvClient[Any, Any]]:
        """A session on a server of its own, taken from the pool; stopped on the way out."""
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
    """A `ServerPool` of `size` servers of `env` (provider, registry, concurrency, and the
    LaunchSpec fields as keywords). Use it as a context manager, or `close()` it."""
    return ServerPool(env, size, **kwargs)


__all__ = ["AsyncServerPool", "PoolClosed", "PooledServer", "ServerPool", "server_pool"]
