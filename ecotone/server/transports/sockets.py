"""Pieces every socket transport shares: socket tuning, a lean stream, the TCP listener."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ecotone.kernel import Limits
from ecotone.server.runner import Runner


def tune_socket(stream: trio.SocketStream, limits: Limits) -> None:
    """No Nagle delay on replies. With `ping_interval` set, also dead-peer detection: TCP
    keepalive probes after that much silence, and a deadline (TCP_USER_TIMEOUT) for the peer
    to acknowledge what we send (probes and WebSocket pings included). A vanished peer fails
    both and the kernel aborts the connection; a live, idle one answers at the TCP level."""
    try:
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    except OSError:
        return  # not TCP (a unix socket): nothing to tune
    if limits.ping_interval is None:
        return
    try:
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
        idle = max(1, int(limits.ping_interval))
        interval = max(1, int(limits.ping_timeout / 3))
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        stream.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(limits.ping_timeout * 1000)
        )
    except (OSError, AttributeError):
        pass  # not Linux: keepalive defaults still apply


class LeanSocketStream(trio.abc.HalfCloseableStream):
    """A trio SocketStream with fewer trips through the scheduler on the hot path.

    trio's `send_all` and `receive_some` each yield to the scheduler at least once even when
    the system call succeeds at once, and `receive_some` tries a `recv` that fails before it
    waits. On a request/response ping-pong that is an extra scheduler pass (and `epoll_wait`)
    per message. Here a send that fits in the socket buffer is one `send` and no yield, and a
    receive is one wait plus one `recv`. Anything unusual (a full buffer, EOF, errors) falls
    back to trio's own stream. Only one task may receive at a time (as with trio's streams);
    concurrent senders must hold a lock, as the transports' writers do.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.socket = stream.socket
        self._fd = stream.socket.fileno()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        size = max_bytes or 65536
        await trio.lowlevel.wait_readable(self._fd)
        try:
            return os.read(self._fd, size)
        except BlockingIOError:  # spurious wake-up
            return bytes(await self.stream.receive_some(size))
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        if sent < len(data):
            await self.stream.send_all(memoryview(data)[sent:])

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()

    def setsockopt(self, level: int, option: int, value: int | bytes) -> None:
        self.stream.setsockopt(level, option, value)


async def serve_tcp(
    runner: Runner,
    host: str,
    port: int,
    scheme: str,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    task_status: Any,
) -> None:
    """Listen on host:port, report `SCHEME://HOST:PORT` as started, and run `handler` for
    every connection (each tuned first) until cancelled."""

    async def tuned(stream: trio.SocketStream) -> None:
        tune_socket(stream, runner.engine.limits)
        await handler(stream)

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    task_status.started(f"{scheme}://{shown}:{bound[1]}")
    await trio.serve_listeners(tuned, listeners)
