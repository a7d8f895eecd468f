"""The async face's streams: anyio byte streams, so they run under trio and asyncio.

The blocking face's twin is `ecotone/client/_sync/net.py`; the channels, written once as
async source, call both by the same names (`AsyncStream` here, `Stream` there). The contract:

* `send(data)` writes all of `data` or raises `ConnectionLost`, and every later send raises
  the same. What tasks send together goes out in one write: the first of them waits a
  scheduling pass while others are joining, then flushes the queue (a pass between writes
  lets the next ones join), shielded from cancellation (a frame cut in half would corrupt
  the stream for every other task), within `SEND_TIMEOUT`, after which the connection is
  dropped.
* `receive(size, deadline)` returns up to `size` bytes, `b""` at the end of the stream, and
  raises `ConnectionLost` for a broken connection. The caller's cancel scope bounds the wait
  (`io.bounded`); `deadline` is taken so both faces' channels make the same call. A cancelled
  receive consumes nothing.
* `aclose(farewell)` is idempotent, never raises, and gives `farewell` (a WebSocket close
  frame) up to `CLOSE_GRACE` seconds, queued behind what is being sent: the flushing task
  stays the only writer.
* The connect functions raise `ConnectionLost` ("cannot connect to LABEL: ...", "cannot
  start COMMAND: ..."), never a bare OSError or TimeoutError.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from ecotone.client.errors import ConnectionLost
from ecotone.client.tls import client_context

SEND_TIMEOUT = 30.0
"""Seconds a write may wait for the peer to take data before the connection is dropped."""
CLOSE_GRACE = 1.0
"""Seconds a closing stream gives its last bytes (a WebSocket close frame)."""
PROCESS_GRACE = 5.0
"""Seconds a server process has to exit once its stdin is closed, before it is killed."""
BROKEN = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)
"""What anyio raises for a connection that broke under a read or a write."""


class AsyncStream(Protocol):
    """Bytes to and from a server (the module docstring states the contract)."""

    label: str
    """What the stream reaches (a URL), for messages."""

    async def send(self, data: bytes) -> None: ...
    async def receive(self, size: int, deadline: float | None = None) -> bytes: ...
    def fileno(self) -> int | None:
        """A descriptor to `select` on; None here (the blocking face's concern)."""
        ...

    def gone(self) -> str:
        """Why `receive` returned `b""`: the message for the ConnectionLost to raise."""
        ...

    async def aclose(self, farewell: bytes = b"") -> None: ...


class ByteStream:
    """An `AsyncStream` on anyio streams, its writes coalesced (one flushing task at a time)."""

    def __init__(
        self,
        send_stream: anyio.abc.ByteSendStream,
        receive_stream: anyio.abc.ByteReceiveStream,
        closer: Callable[[], Awaitable[None]],
        label: str,
        gone: Callable[[], str] | None = None,
    ) -> None:
        """`closer` closes both streams (they are one for a socket; a process has two);
        `gone` says why `receive_stream` ended, when the label alone cannot."""
        self._send = send_stream
        self._receive = receive_stream
        self._closer = closer
        self._gone = gone
        self.label = label
        self._out: list[bytes] = []
        self._flushing = False
        self._flushed: anyio.Event | None = None  # set when the flushing task is done
        self._broken: ConnectionLost | None = None
        self._closed = False

    async def send(self, data: bytes) -> None:
        if self._broken is not None:
            raise self._broken
        self._out.append(data)
        if not self._flushing:  # else the flushing task writes it with what it has
            await self._flush()

    async def _flush(self) -> None:
        """Write the queue until it is empty: one write for all that came meanwhile."""
        self._flushing = True
        try:
            # Let the other tasks queue theirs first: one scheduling pass before the first
            # write, and one more before each write after it, so that what the tasks woken
            # meanwhile send joins the next write. (Waiting several passes for a queue that
            # is still growing made 64 sessions on one connection cost more CPU per step and
            # coalesced no better; docs/benchmarks.md.)
            await anyio.lowlevel.checkpoint()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(SEND_TIMEOUT) as scope:
                    while self._out:
                        chunk = b"".join(self._out)
                        self._out.clear()
                        await self._send.send(chunk)
                        if self._out:
                            await anyio.lowlevel.cancel_shielded_checkpoint()
                if scope.cancelled_caught:
                    self._broken = ConnectionLost(
                        f"{self.label} accepted no data for {SEND_TIMEOUT}s: connection dropped"
                    )
                    await self._shut()
                    raise self._broken
        except BROKEN as exc:
            self._broken = ConnectionLost(f"connection to {self.label} lost while sending: {exc}")
            raise self._broken from exc
        finally:
            self._flushing = False
            flushed, self._flushed = self._flushed, None
            if flushed is not None:
                flushed.set()

    async def receive(self, size: int, deadline: float | None = None) -> bytes:
        try:
            return await self._receive.receive(size)
        except anyio.EndOfStream:
            return b""
        except BROKEN as exc:
            raise ConnectionLost(f"connection to {self.label} lost: {exc}") from exc

    def fileno(self) -> int | None:
        return None

    def gone(self) -> str:
        if self._gone is not None:
            return self._gone()
        return f"the server at {self.label} closed the connection"

    async def aclose(self, farewell: bytes = b"") -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if farewell and self._broken is None:
                with anyio.move_on_after(CLOSE_GRACE):
                    await self._farewell(farewell)
            await self._shut()

    async def _farewell(self, data: bytes) -> None:
        """Queue `data` and wait until the queue is written (by this task or the flushing one)."""
        self._out.append(data)
        try:
            if not self._flushing:
                await self._flush()
                return
            if self._flushed is None:
                self._flushed = anyio.Event()
            await self._flushed.wait()
        except ConnectionLost:
            pass

    async def _shut(self) -> None:
        try:
            await self._closer()
        except BROKEN:
            pass


async def connect_tcp(
    host: str, port: int, *, tls: bool, timeout: float, label: str
) -> AsyncStream:
    """A TCP connection to host:port within `timeout` seconds (the TLS handshake included, the
    server's certificate checked, when `tls`)."""
    try:
        with anyio.fail_after(timeout):
            if tls:
                # A connection that ends without TLS's close_notify is at its end, not broken:
                # the protocols inside say when they are done (as HTTPS clients do, and as the
                # server does: it sends none either). The blocking face's `ssl` does the same.
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(
                    host,
                    port,
                    ssl_context=client_context(),
                    tls_hostname=host,
                    tls_standard_compatible=False,
                )
            else:
                stream = await anyio.connect_tcp(host, port)
    except BROKEN as exc:
        raise ConnectionLost(f"cannot connect to {label}: {exc}") from exc
    return ByteStream(stream, stream, stream.aclose, label)


async def connect_unix(path: str, *, timeout: float, label: str) -> AsyncStream:
    """A connection to the unix socket at `path` within `timeout` seconds."""
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_unix(path)
    except BROKEN as exc:
        raise ConnectionLost(f"cannot connect to {label}: {exc}") from exc
    return ByteStream(stream, stream, stream.aclose, label)


async def open_process(command: list[str], *, timeout: float, label: str) -> AsyncStream:
    """`command` started, its stdin and stdout the stream. Closing the stream closes its stdin
    (a server exits then), waits `PROCESS_GRACE` seconds for it to exit, then kills it."""
    try:
        with anyio.fail_after(timeout):
            process = await anyio.open_process(command, stderr=None)
    except OSError as exc:
        raise ConnectionLost(f"cannot start {shlex.join(command)}: {exc}") from exc
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None

    async def close() -> None:
        await stdin.aclose()  # the server exits when its stdin closes
        with anyio.move_on_after(PROCESS_GRACE):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()

    def gone() -> str:
        if process.returncode is None:
            return "the server process closed its output"
        return f"the server process ended (exit status {process.returncode})"

    return ByteStream(stdin, stdout, close, label, gone)
