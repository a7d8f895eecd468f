"""Per-connection request routing: in order within a session, concurrent across sessions.

Rules:
* A session's requests are dispatched one at a time, in arrival order (its *lane*).
* A request that the kernel says completes without suspending (`Kernel.runs_inline`), for a
  session with nothing queued, is answered right in the receive loop: no task switch, no
  channel. This is the hot path for cheap envs.
* Anything else goes to the session's lane task, so a slow env never stalls the receive loop or
  the other sessions of the connection.
* `step_many` is split into one item per session, each queued in its session's lane, and
  answered once when every item is done.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable

import trio

from ecotone.kernel import Kernel, KernelConnection
from ecotone.wire import (
    Close,
    Error,
    ErrorCode,
    ObservationFrame,
    Request,
    Step,
    StepMany,
    StepManyResult,
)

_PLACEHOLDER = Error(id=None, code=ErrorCode.INTERNAL, message="step_many item not answered")

Send = Callable[[bytes], Awaitable[None]]


class _Lane:
    __slots__ = ("pending", "receiver", "sender")

    def __init__(self) -> None:
        self.sender, self.receiver = trio.open_memory_channel[Callable[[], Awaitable[None]]](
            math.inf
        )
        self.pending = 0


class Router:
    """Routes one connection's requests to the kernel and its answers back to `send`."""

    def __init__(
        self, kernel: Kernel, conn: KernelConnection, send: Send, nursery: trio.Nursery
    ) -> None:
        self.kernel = kernel
        self.conn = conn
        self._send = send
        self._nursery = nursery
        self._lanes: dict[str, _Lane] = {}

    async def feed(self, data: bytes | str) -> None:
        """Handle one received frame."""
        conn = self.conn
        request = conn.receive(data)
        if isinstance(request, Error):
            await self._send(conn.encode(request))
            return
        await self.route(request)

    async def route(self, request: Request) -> None:
        if isinstance(request, StepMany):
            await self._step_many(request)
            return
        key = getattr(request, "session", "")
        if self._idle(key) and self.kernel.runs_inline(self.conn, request):
            response = await self.kernel.dispatch(self.conn, request)
            await self._send(self.conn.encode(response))
            if isinstance(request, Close):
                self._drop_lane(key)
            return

        async def job() -> None:
            response = await self.kernel.dispatch(self.conn, request)
            await self._send(self.conn.encode(response))
            if isinstance(request, Close):
                self._drop_lane(key)

        self._enqueue(key, job)

    def _enqueue(self, key: str, job: Callable[[], Awaitable[None]]) -> None:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
            self._nursery.start_soon(self._run_lane, lane)
        lane.pending += 1
        lane.sender.send_nowait(job)

    def _drop_lane(self, key: str) -> None:
        lane = self._lanes.get(key)
        if lane is not None and lane.pending <= 1:
            self._lanes.pop(key, None)
            lane.sender.close()

    async def _run_lane(self, lane: _Lane) -> None:
        async with lane.receiver:
            async for job in lane.receiver:
                try:
                    await job()
                finally:
                    lane.pending -= 1

    async def _step_many(self, request: StepMany) -> None:
        kernel, conn, rid = self.kernel, self.conn, request.id
        items_in = request.steps
        sessions = [i.session for i in items_in]
        if len(set(sessions)) != len(sessions):
            twice = sorted({s for s in sessions if sessions.count(s) > 1})
            error = Error(
                id=rid,
                code=ErrorCode.INVALID_FRAME,
                message=f"step_many names a session more than once: {', '.join(twice)}",
                details={"sessions": twice},
            )
            await self._send(conn.encode(error))
            return
        lanes = self._lanes
        busy = [key for key, lane in lanes.items() if lane.pending]  # lanes with work queued
        if not busy or set(busy).isdisjoint(sessions):
            # Nothing of these sessions is queued: the batch may be answered right here.
            data = kernel.step_batch(conn, items_in, rid)  # the hot path, all in one go
            if data is not None:
                await self._send(data)
                return
            if all(kernel.step_runs_inline(conn, s) for s in sessions):
                results = [await kernel.step_item(conn, i.session, i.action, rid) for i in items_in]
                await self._send(conn.encode(StepManyResult(id=rid, results=results)))
                return
        steps = [Step(id=rid, session=i.session, action=i.action) for i in items_in]
        # Queue every item in its session's lane; each lane holds until the whole batch is
        # answered, so nothing later in any of these sessions overtakes the batch's answer.
        items: list[ObservationFrame | Error] = [_PLACEHOLDER] * len(steps)
        remaining = len(steps)
        done = trio.Event()

        async def job(index: int, step: Step) -> None:
            nonlocal remaining
            items[index] = await kernel.step_one(conn, step)
            remaining -= 1
            if remaining == 0:
                try:
                    await self._send(conn.encode(StepManyResult(id=request.id, results=items)))
                finally:
                    done.set()
            else:
                await done.wait()

        for index, step in enumerate(steps):
            self._enqueue(step.session, functools.partial(job, index, step))

    def _idle(self, key: str) -> bool:
        lane = self._lanes.get(key)
        return lane is None or lane.pending == 0

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.sender.close()
        self._lanes.clear()
