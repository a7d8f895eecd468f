"""The `inproc` transport: the kernel embedded in your own process, no socket.

`ecotone.connect("inproc://counter")` and `await ecotone.aconnect("inproc://counter")` build a
kernel serving the named env in this process and talk to it through the same frames and codecs
as a network client (so validation and errors behave identically), minus the network.

The async channel runs env calls in the caller's event loop (trio or asyncio). The blocking
channel runs cheap inline envs directly and everything else in a private event loop thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

import ecotone.kernel
from ecotone.kernel import Kernel, KernelConnection, Registry
from ecotone.wire import Error, Request, StepMany, codec_for


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that the kernel promised never suspends (`runs_inline`)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("an inline kernel call suspended")  # pragma: no cover - kernel bug


def kernel_for_url(url: str) -> Kernel:
    parts = urlsplit(url)
    name = (parts.netloc + parts.path).strip("/")
    if parts.query:  # part of the env name (`inproc://gymnasium:FrozenLake-v1?is_slippery=false`)
        name = f"{name}?{parts.query}"
    if not name:
        raise ValueError(f"inproc URL {url!r} names no environment: use inproc://ENV")
    spec = Registry.discover().env_spec(name)
    return Kernel(spec)


class InprocSyncChannel:
    def __init__(self, kernel: Kernel, codec: str) -> None:
        self.kernel = kernel
        self.conn: KernelConnection = kernel.connect(codec_for(codec))
        self._out: list[bytes | str] = []
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    def _in_loop(self, fn: Any, *args: Any) -> Any:
        if self._portal is None:
            self._portal_cm = start_blocking_portal("trio")
            self._portal = self._portal_cm.__enter__()
        return self._portal.call(fn, *args)

    def send(self, data: bytes) -> None:
        kernel, conn = self.kernel, self.conn
        request: Request | Error = conn.receive(data)
        if isinstance(request, Error):
            self._out.append(conn.encode(request))
            return
        if not isinstance(request, StepMany) and kernel.runs_inline(conn, request):
            response = _drive(kernel.dispatch(conn, request))
        else:
            response = self._in_loop(kernel.dispatch, conn, request)
        self._out.append(conn.encode(response))

    def receive(self, deadline: float | None) -> list[bytes | str]:
        out, self._out = self._out, []
        if not out:
            raise TimeoutError
        return out

    def close(self) -> None:
        if self.conn.closed:
            return
        if self._portal is not None:
            self._in_loop(self.kernel.disconnect, self.conn)
        else:
            _drive_or_loop = self.kernel.sessions.owned_by(self.conn.owner)
            if all(s.spec.inline and not s.spec.async_close for s in _drive_or_loop):
                _drive(self.kernel.disconnect(self.conn))
            else:
                self._in_loop(self.kernel.disconnect, self.conn)
        if self._portal_cm is not None:
            self._portal_cm.__exit__(None, None, None)
            self._portal_cm = self._portal = None


class InprocAsyncChannel:
    def __init__(self, kernel: Kernel, codec: str) -> None:
        self.kernel = kernel
        self.conn: KernelConnection = kernel.connect(codec_for(codec))
        self._out: list[bytes | str] = []
        self._arrived = anyio.Event()
        self._locks: dict[str, anyio.Lock] = {}

    async def send(self, data: bytes) -> None:
        kernel, conn = self.kernel, self.conn
        request = conn.receive(data)
        if isinstance(request, Error):
            response: Any = request
        else:
            key = getattr(request, "session", "")
            lock = self._locks.setdefault(key, anyio.Lock())
            async with lock:  # one call at a time per session, in order
                response = await kernel.dispatch(conn, request)
        self._out.append(conn.encode(response))
        self._arrived.set()

    async def receive(self) -> list[bytes | str]:
        while not self._out:
            await self._arrived.wait()
            self._arrived = anyio.Event()
        out, self._out = self._out, []
        return out

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.kernel.disconnect(self.conn)


class InprocTransport:
    """Embeds the kernel in the client's process."""

    name = "inproc"
    description = "the kernel in your own process, no socket (inproc://ENV)"
    schemes = ("inproc",)
    listens = False

    async def serve(self, kernel: Kernel, host: str, port: int, *, task_status: Any) -> None:
        raise RuntimeError(
            "the inproc transport serves no socket: embed the kernel with "
            "ecotone.connect('inproc://ENV') or ecotone.aconnect('inproc://ENV')"
        )

    def open_channel(self, url: str, codec: str) -> InprocSyncChannel:
        return InprocSyncChannel(kernel_for_url(url), codec)

    async def open_async_channel(self, url: str, codec: str) -> InprocAsyncChannel:
        return InprocAsyncChannel(kernel_for_url(url), codec)


@ecotone.kernel.hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    return {"inproc": InprocTransport()}
