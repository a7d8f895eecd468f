"""Pieces every socket transport shares: socket tuning, a lean stream, the TCP listener."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import msgspec
import trio

from ecotone.kernel import Limits
from ecotone.kernel.polling import BusyPoll
from ecotone.server.runner import Runner, may_busy_poll

log = logging.getLogger("ecotone.server")


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


async def send_within(
    stream: trio.abc.Stream, data: bytes | bytearray | memoryview, timeout: float | None
) -> None:
    """`stream.send_all(data)`, but a peer that reads nothing for `timeout` seconds is
    dropped (the stream closed, so its receiving task sees it too) and BrokenResourceError
    raised."""
    if timeout is None:
        await stream.send_all(data)
        return
    with trio.move_on_after(timeout) as scope:
        await stream.send_all(data)
    if scope.cancelled_caught:
        log.info("peer read nothing for %ss: connection dropped", timeout)
        await trio.aclose_forcefully(stream)
        raise trio.BrokenResourceError("the peer stopped reading")


class SendLock:
    """The lock a connection's writers take so that their writes do not interleave.

    trio's Lock costs about a microsecond to take and give back even when nobody else wants
    it (it registers the holder for deadlock detection), and a request/response connection
    takes it once per answer. This one is a flag while uncontended and takes no scheduler
    pass then; waiters park and are handed the lock in turn, as trio's are.

        async with lock:
            await stream.send_all(data)
    """

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters = trio.lowlevel.ParkingLot()

    def locked(self) -> bool:
        return self._held

    async def __aenter__(self) -> None:
        if not self._held:
            self._held = True
            return
        await self._waiters.park()  # woken holding it: `release` handed it over

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self._waiters:
            self._waiters.unpark()  # the first waiter holds it now
        else:
            self._held = False


CHECKPOINT_EVERY_S: Final = 25e-6
"""How often a spinning read passes through trio's scheduler."""


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

    def __init__(
        self,
        stream: trio.SocketStream,
        write_timeout: float | None = None,
        busy_poll_us: float = 0,
    ) -> None:
        self.stream = stream
        self.socket = stream.socket
        self._fd = stream.socket.fileno()
        self.write_timeout = write_timeout
        """Seconds a write may wait for the peer to read; past it the connection is dropped
        (the socket closed, so the receiving task sees it too) and BrokenResourceError
        raised. Only a write that must wait pays for the deadline."""
        self._poll = BusyPoll(busy_poll_us, may_busy_poll) if busy_poll_us else None

    async def _spin(self, poll: BusyPoll, size: int, seconds: float) -> bytes | None:
        """Poll for up to `seconds` without sleeping, passing through trio's scheduler (a
        checkpoint: other tasks run, other sockets are polled) before the first try and then
        every `CHECKPOINT_EVERY_S` (a pass costs several tries; other connections wait at
        most that long to be noticed). The spin stops early, without counting as a miss,
        when another task is ready to run (the loop will not sleep then anyway, and two
        spinning connections would only take turns) or the gate shuts. None: nothing came."""
        now = time.perf_counter()
        end = now + seconds
        due = now
        statistics = trio.lowlevel.current_statistics
        while True:
            if now >= due:
                await trio.lowlevel.checkpoint()
                due = time.perf_counter() + CHECKPOINT_EVERY_S
            if self.socket.fileno() == -1:  # closed by another task while this one spun
                raise trio.ClosedResourceError("the connection was closed")
            try:
                data = os.read(self._fd, size)
            except BlockingIOError:
                pass
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            else:
                poll.caught()
                return data
            now = time.perf_counter()
            if now >= end:
                poll.ran_out()
                return None
            if statistics().tasks_runnable or not poll.may_spin():
                return None
            os.sched_yield()  # a process ready to run on this core goes first

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.receive_within(max_bytes or 65536, math.inf)
        assert data is not None  # no deadline: it came, or EOF (b"")
        return data

    async def receive_within(self, size: int, seconds: float) -> bytes | None:
        """`receive_some(size)`, or None if nothing came within `seconds` (inf: no limit).
        A read caught while spinning takes no cancel scope: a trio scope costs a few
        microseconds to enter and leave, a large part of a small request's whole cost; only
        a wait that blocks takes one."""
        poll = self._poll
        began = time.perf_counter()
        if poll is not None:
            spin = poll.spin_for()
            if spin:
                data = await self._spin(poll, size, min(spin, seconds))
                if data is not None:
                    return data
        blocked = time.perf_counter()
        while True:
            if seconds == math.inf:
                await trio.lowlevel.wait_readable(self._fd)
            else:
                left = seconds - (time.perf_counter() - began)
                with trio.move_on_after(max(left, 0.0)) as scope:
                    await trio.lowlevel.wait_readable(self._fd)
                if scope.cancelled_caught:
                    return None
            try:
                data = os.read(self._fd, size)
            except BlockingIOError:  # spurious wake-up: wait again, within the same deadline
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            if poll is not None:
                poll.blocked(time.perf_counter() - blocked)
            return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        if sent < len(data):
            await send_within(self.stream, memoryview(data)[sent:], self.write_timeout)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()

    def setsockopt(self, level: int, option: int, value: int | bytes) -> None:
        self.stream.setsockopt(level, option, value)


class TlsStream(trio.abc.Stream):
    """A connection under TLS (trio's SSLStream), with the same write deadline as
    `LeanSocketStream`, and its socket at hand (`socket`, `setsockopt`)."""

    def __init__(self, stream: trio.SSLStream[Any], write_timeout: float | None = None) -> None:
        self.stream = stream
        self.socket = getattr(stream.transport_stream, "socket", None)
        self.write_timeout = write_timeout

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return bytes(await self.stream.receive_some(max_bytes or 65536))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await send_within(self.stream, data, self.write_timeout)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()

    def setsockopt(self, level: int, option: int, value: int | bytes) -> None:
        if self.socket is not None:
            self.socket.setsockopt(level, option, value)


async def receive_within(stream: trio.abc.ReceiveStream, size: int, seconds: float) -> bytes | None:
    """`stream.receive_some(size)`, or None if nothing came within `seconds` (inf: no
    limit): a `LeanSocketStream`'s own `receive_within`, else under a cancel scope."""
    if isinstance(stream, LeanSocketStream):
        return await stream.receive_within(size, seconds)
    if seconds == math.inf:
        return bytes(await stream.receive_some(size))
    with trio.move_on_after(seconds):
        return bytes(await stream.receive_some(size))
    return None


def connection_stream(stream: Any, limits: Limits) -> Any:
    """How a transport reads and writes a connection: `LeanSocketStream` over a plain
    socket, `TlsStream` under TLS; both drop a peer that stops reading (`write_timeout`)."""
    if isinstance(stream, trio.SSLStream):
        return TlsStream(stream, limits.write_timeout)
    return LeanSocketStream(stream, limits.write_timeout, limits.busy_poll_us)


TLS_SCHEMES: Final = {"ws": "wss", "http": "https", "tcp": "tcp+tls"}
HANDSHAKE_TIMEOUT: Final = 10.0
"""Seconds a client has to finish the TLS handshake."""


def peer_address(stream: Any) -> str:
    stream = getattr(stream, "transport_stream", stream)  # under TLS, the TCP stream
    try:
        name = stream.socket.getpeername()
    except (OSError, AttributeError):
        return "?"
    return str(name[0]) if isinstance(name, tuple) else "unix"


async def guarded(
    runner: Runner,
    stream: Any,
    refusal: bytes,
    handler: Callable[[Any], Awaitable[None]],
) -> None:
    """Run `handler` for a new connection if the gate admits it; else write `refusal` (an
    HTTP 503, an error frame) and close."""
    gate = runner.gate
    peer = peer_address(stream)
    if not gate.admit(peer):
        with trio.move_on_after(1.0):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await stream.send_all(refusal)
        await trio.aclose_forcefully(stream)
        throttled_log(f"refused a connection from {peer}: at a connection limit", "gate")
        return
    try:
        await handler(stream)
    finally:
        gate.leave(peer)


_last_logged: dict[str, float] = {}


def throttled_log(message: str, key: str, every: float = 10.0) -> None:
    """Log `message` at most once per `every` seconds per `key` (limits hit in a flood)."""
    now = time.monotonic()
    if now - _last_logged.get(key, -math.inf) >= every:
        _last_logged[key] = now
        log.warning(message)


class _Throttle(logging.Filter):
    """trio logs every failed accept (EMFILE at the fd limit: ten lines a second): one in ten
    seconds is enough."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._last < 10.0:
            return False
        self._last = now
        return True


_accept_log = logging.getLogger("trio.serve_listeners")
if not any(isinstance(f, _Throttle) for f in _accept_log.filters):
    _accept_log.addFilter(_Throttle())


def frame_refusal(message: str) -> bytes:
    body = msgspec.json.encode(
        {"op": "error", "id": None, "code": "capacity", "message": message, "details": {}}
    )
    return struct.pack(">I", len(body)) + body


REFUSED = "the server is at its connection limit (max_connections / max_connections_per_ip)"


@attrs.frozen(kw_only=True)
class Listen:
    """Where a transport listens: the address, the scheme of the URL it reports once it
    listens, and what a connection over the limits is told before it is closed."""

    host: str
    port: int
    scheme: str
    refusal: bytes = b""


async def serve_tcp(
    runner: Runner,
    where: Listen,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    task_status: Any,
) -> None:
    """Listen on `where`, report `SCHEME://HOST:PORT` as started, and run `handler` for
    every connection (each tuned first) until cancelled."""

    tls = runner.tls
    refusal, scheme = where.refusal, where.scheme

    async def tuned(stream: trio.SocketStream) -> None:
        tune_socket(stream, runner.engine.limits)
        if tls is None:
            await guarded(runner, stream, refusal, handler)
            return
        secured = trio.SSLStream(stream, tls, server_side=True, https_compatible=True)
        await guarded(runner, secured, refusal, lambda s: _after_handshake(s, handler))

    listeners = await trio.open_tcp_listeners(where.port, host=where.host)
    bound = listeners[0].socket.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    if tls is not None:
        scheme = TLS_SCHEMES.get(scheme, scheme)
    task_status.started(f"{scheme}://{shown}:{bound[1]}")
    await trio.serve_listeners(tuned, listeners)


async def _after_handshake(
    stream: trio.SSLStream[Any], handler: Callable[[Any], Awaitable[None]]
) -> None:
    """Run `handler` once the client finished the TLS handshake (within HANDSHAKE_TIMEOUT);
    a client that does not (plain bytes, a wrong certificate, silence) is dropped."""
    with trio.move_on_after(HANDSHAKE_TIMEOUT) as scope:
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            throttled_log(f"a TLS handshake failed: {exc.__cause__ or exc}", "tls")
            await trio.aclose_forcefully(stream)
            return
    if scope.cancelled_caught:
        await trio.aclose_forcefully(stream)
        return
    await handler(stream)
