"""`ecotone.AsyncVectorEnv`: `ecotone.VectorEnv` for trio and asyncio (anyio underneath).

The same sub-envs, autoreset modes, error policy and results as the blocking `VectorEnv`
(its docstring has the tables); every call is awaited. Open it with
`venv = await AsyncVectorEnv.open(urls, num_envs)` or `async with AsyncVectorEnv(urls,
num_envs) as venv`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import numpy as np

from ecotone.client._core import EnvTypes
from ecotone.client._vector import (
    Call,
    Link,
    StepBatch,
    SubEnvError,
    VectorCore,
    reset_plan,
    seeds_for,
    select_subs,
    take_ready,
    wanted,
)
from ecotone.client.aio import AsyncConnection
from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.client.sync import DEFAULT_TIMEOUT
from ecotone.client.vector import split_actions


class AsyncVectorEnv:
    """N sub-envs over one or more servers, stepped together, asynchronously (trio or asyncio).

        async with ecotone.AsyncVectorEnv(urls, num_envs=64) as venv:
            observations, infos = await venv.reset(seed=0)
            observations, rewards, terminated, truncated, infos = await venv.step(actions)

            await venv.send(actions)                 # EnvPool style: the first k to answer
            env_ids, observations, rewards, terminated, truncated, infos = await venv.recv(
                min_ready=k
            )

    Arguments, results, autoreset modes and failure handling as `ecotone.VectorEnv`.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        env: str | None = None,
        *,
        observation_type: Any = None,
        autoreset_mode: str = "next_step",
        errors: str = "raise",
        step_timeout: float | None = DEFAULT_TIMEOUT,
        reset_options: dict[str, Any] | None = None,
        codec: str = "json",
        connect_timeout: float = 10.0,
        record_to: Any = None,
        record_format: str = "jsonl",
        replace_server: Callable[[int, str], Awaitable[str]] | None = None,
    ) -> None:
        self._core = VectorCore(
            urls,
            num_envs,
            env=env,
            types=EnvTypes(observation_type),
            autoreset_mode=autoreset_mode,
            errors=errors,
            reset_options=reset_options,
            step_timeout=step_timeout,
            record_to=record_to,
            record_format=record_format,
        )
        self._codec = codec
        self._replace_server = replace_server
        self._connect_timeout = connect_timeout
        self._opened = False
        self._closed = False
        self._started = False

    @classmethod
    async def open(
        cls, urls: str | Sequence[str], num_envs: int, env: str | None = None, **kwargs: Any
    ) -> AsyncVectorEnv:
        """Connect and open every sub-env's session (arguments as the constructor's)."""
        venv = cls(urls, num_envs, env, **kwargs)
        await venv.aopen()
        return venv

    async def aopen(self) -> None:
        """Connect and open the sessions (what `async with` and `open` do)."""
        if self._opened:
            return
        self._opened = True
        core = self._core
        try:
            for link in core.links:
                core.attach(link, await self._connect(link))
            call = Call()
            core.plan_open(core.subs, call)
            timeout = max(self._connect_timeout, core.step_timeout or 0.0)
            await self._run(call, time.monotonic() + timeout)
            failures = core.failures(call.outcomes.values())
            if failures:
                raise SubEnvError({i: f.error for i, f in failures.items()})
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise

    async def _connect(self, link: Link) -> AsyncConnection:
        return await AsyncConnection.open_url(
            link.url,
            codec=self._codec,
            timeout=self._core.step_timeout,
            connect_timeout=self._connect_timeout,
        )

    # --- properties ----------------------------------------------------------------------------

    @property
    def num_envs(self) -> int:
        return self._core.num_envs

    @property
    def autoreset_mode(self) -> str:
        return self._core.autoreset_mode

    @property
    def urls(self) -> list[str]:
        return [link.url for link in self._core.links]

    @property
    def env_urls(self) -> list[str]:
        return [sub.link.url for sub in self._core.subs]

    @property
    def connections(self) -> list[AsyncConnection]:
        return [link.conn for link in self._core.links]

    @property
    def session_ids(self) -> list[str | None]:
        return [sub.session for sub in self._core.subs]

    @property
    def observations(self) -> list[Any]:
        return [sub.obs for sub in self._core.subs]

    @property
    def lost(self) -> np.ndarray:
        return np.fromiter((s.lost is not None for s in self._core.subs), np.bool_, self.num_envs)

    # --- the Gymnasium-style calls -----------------------------------------------------------

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """As `VectorEnv.reset`."""
        core = self._core
        subs, seeds, merged = reset_plan(core, seed, options)
        core.check_idle(subs)
        call = Call()
        core.plan_reset(subs, seeds, merged, call)
        await self._run(call, self._deadline())
        self._started = True
        return core.check(call.outcomes.values(), core.reset_result(call, core.num_envs))

    async def step(
        self, actions: Any
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """As `VectorEnv.step`."""
        core = self._core
        if not self._started:
            raise RuntimeError("AsyncVectorEnv.step before reset(): reset the sub-envs first")
        actions = split_actions(actions, core.num_envs)
        core.check_steppable(core.subs)
        call = Call()
        core.plan_step(actions, core.subs, call)
        await self._run(call, self._deadline())
        return core.step_all_result(call)

    async def restart(
        self,
        env_ids: Any,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """As `VectorEnv.restart`."""
        core = self._core
        subs = select_subs(core, env_ids)
        for link in {sub.link.index: sub.link for sub in subs}.values():
            if not link.alive:
                if link.conn is not None:
                    await link.conn.aclose()
                try:
                    core.attach(link, await self._connect(link))
                except (EcotoneError, OSError) as exc:
                    link.down = exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc))
                    if self._replace_server is not None:
                        try:  # the server itself is gone: a new one from its provider
                            link.url = await self._replace_server(link.index, link.url)
                            core.attach(link, await self._connect(link))
                            link.down = None
                        except (EcotoneError, OSError, RuntimeError) as again:
                            link.down = ConnectionLost(f"{link.url}: replacing it failed: {again}")
        all_seeds = seeds_for(seed, core.num_envs)
        merged = {**core.reset_options, **(options or {})}
        call = Call()
        core.plan_restart(subs, [all_seeds[s.index] for s in subs], merged, call)
        await self._run(call, self._deadline())
        self._started = True
        return core.check(call.outcomes.values(), core.reset_result(call, core.num_envs))

    # --- EnvPool-style asynchronous stepping ---------------------------------------------------

    async def send(self, actions: Any, env_ids: Any = None) -> None:
        """As `VectorEnv.send`."""
        core = self._core
        if not self._started:
            raise RuntimeError("AsyncVectorEnv.send before reset(): reset the sub-envs first")
        subs = select_subs(core, env_ids)
        actions = split_actions(actions, len(subs))
        core.check_steppable(subs)
        core.plan_step(actions, subs, None)
        await self._flush()

    async def recv(self, min_ready: int | None = None, max_ready: int | None = None) -> StepBatch:
        """As `VectorEnv.recv`: the first `min_ready` (or more) sub-envs to answer."""
        core = self._core
        want = wanted(core, min_ready)

        def enough() -> bool:
            return len(core.ready) >= want

        while not enough():
            await self._flush()
            await self._pump(enough, core.next_deadline(), None)
        return take_ready(core, max_ready)

    async def _pump(
        self, done: Callable[[], bool], deadline: float | None, call: Call | None
    ) -> None:
        """Read every link with answers due (one reader each, concurrently) until `done()`,
        then enforce the deadline (`call`'s requests all expire; else those past theirs)."""
        core = self._core
        links = [link for link in core.links if link.unanswered > 0]
        if not links:  # pragma: no cover - the callers only pump with requests in flight
            raise RuntimeError("nothing in flight")
        delay = math.inf if deadline is None else deadline - time.monotonic()
        with anyio.move_on_after(delay):
            if len(links) == 1:
                await self._read(links[0], done, None)
            else:
                async with anyio.create_task_group() as group:
                    for link in links:
                        group.start_soon(self._read, link, done, group.cancel_scope)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            for link in core.links:
                for rid in core.expire(link, now, call):
                    link.conn.abandon(rid)

    async def _read(
        self, link: Link, done: Callable[[], bool], scope: anyio.CancelScope | None
    ) -> None:
        """Read `link` until `done()` or it has nothing due (then cancel the other readers
        once `done()`)."""
        core = self._core
        while not done() and link.unanswered > 0:
            try:
                responses = await link.conn.poll()
            except ConnectionLost as exc:
                core.on_link_lost(link, exc)
                break
            for response in responses:
                core.on_response(link, response)
            await self._flush()
        if scope is not None and done():
            scope.cancel()

    # --- I/O -----------------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        timeout = self._core.step_timeout
        return None if timeout is None else time.monotonic() + timeout

    async def _flush(self) -> None:
        """Send what the core queued. Shielded: a frame taken from the outbox must go out (a
        reader cancelled by `recv` may be the one flushing)."""
        core = self._core
        with anyio.CancelScope(shield=True):
            for link in core.links:
                if not link.outbox:
                    continue
                for frame in core.take_outbox(link):
                    try:
                        await link.conn.send(frame)
                    except ConnectionLost as exc:
                        core.on_link_lost(link, exc)
                        break

    async def _run(self, call: Call, deadline: float | None) -> None:
        """Move frames and answers until every sub-env of `call` has its outcome."""

        def done() -> bool:
            return call.complete

        try:
            while True:
                await self._flush()
                if call.complete:
                    return
                await self._pump(done, deadline, call)
        except BaseException:  # cancelled: what the sub-envs did is unknown
            for link, rid in self._core.cancel(call):
                link.conn.abandon(rid)
            raise

    # --- lifetime ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection (the servers close the sessions with them). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            for link in self._core.links:
                if link.conn is not None:
                    await link.conn.aclose()
        self._core.close_recording()

    async def __aenter__(self) -> AsyncVectorEnv:
        await self.aopen()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncVectorEnv num_envs={self.num_envs} urls={self.urls}>"


__all__ = ["AsyncVectorEnv"]
