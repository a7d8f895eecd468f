"""Pieces every socket transport shares: socket tuning and idle-session reaping."""

from __future__ import annotations

import socket

import trio

from ecotone.kernel import Kernel


def tune_socket(stream: trio.SocketStream, kernel: Kernel) -> None:
    """No Nagle delay on replies. With `ping_interval` set, also dead-peer detection: TCP
    keepalive probes after that much silence, and a deadline (TCP_USER_TIMEOUT) for the peer
    to acknowledge what we send (probes and WebSocket pings included). A vanished peer fails
    both and the kernel aborts the connection; a live, idle one answers at the TCP level."""
    try:
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
    except OSError:
        return  # not TCP (a unix socket): nothing to tune
    limits = kernel.limits
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


async def reap_idle(kernel: Kernel) -> None:
    timeout = kernel.limits.idle_timeout
    if timeout is None:
        return
    period = max(0.05, min(timeout / 4, 5.0))
    while True:
        await trio.sleep(period)
        await kernel.reap_idle()
