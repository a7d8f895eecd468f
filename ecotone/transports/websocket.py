"""The `websocket` transport: ecotone frames over WebSocket, served with trio and wsproto.

One WebSocket message is one frame. The codec is chosen by subprotocol: `ecotone.v1.json`
(text messages, the default when the client offers none) or `ecotone.v1.msgpack` (binary).

Why wsproto on trio streams and not trio-websocket's connection objects: measured here, a
trio-websocket echo answers ~4,400 round trips/s and a lean wsproto loop ~5,900; trio-websocket
spends the difference in its per-message task and channel machinery. This loop reads the socket,
feeds wsproto, and hands complete messages to the router in the same task (see
docs/benchmarks.md).

Dead peers: after `ping_interval` seconds without receiving anything the server sends a ping,
and the peer's TCP stack must acknowledge it within `ping_timeout` (TCP_USER_TIMEOUT); if it
does not, the kernel aborts the connection and its sessions are closed, so a half-open socket
never holds sessions. An idle but live client is kept even if it does not answer the ping
(our blocking client reads only during a call), and idle sessions are reaped after
`idle_timeout` anyway.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Mapping
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

import ecotone.kernel
from ecotone.kernel import Kernel
from ecotone.specs import SUBPROTOCOLS, codec_for
from ecotone.transports._router import Router

log = logging.getLogger("ecotone.websocket")

RECEIVE_SIZE = 65536
HANDSHAKE_TIMEOUT = 10.0


def _pick_subprotocol(offered: list[str]) -> str | None:
    for name in offered:
        if name in SUBPROTOCOLS:
            return name
    return None


class WebSocketConnection:
    """One accepted TCP connection speaking WebSocket to the kernel."""

    def __init__(self, kernel: Kernel, stream: trio.abc.Stream) -> None:
        self.kernel = kernel
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)
        self._send_lock = trio.Lock()
        self._batch: list[bytes] | None = None
        self._last_rx = trio.current_time()
        self._binary = False
        self._parts: list[bytes | str] = []
        self._size = 0
        self._oversize = False

    async def _write(self, event: Any) -> None:
        data = self.ws.send(event)
        if self._batch is not None:  # answering a received chunk: coalesce into one write
            self._batch.append(data)
            return
        await self._send_bytes(data)

    async def _send_bytes(self, data: bytes) -> None:
        lock = self._send_lock
        if lock.locked():
            async with lock:
                await self.stream.send_all(data)
            return
        lock.acquire_nowait()  # uncontended: skip the checkpoint `async with` would add
        try:
            await self.stream.send_all(data)
        finally:
            lock.release()

    async def _flush(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            await self._send_bytes(batch[0] if len(batch) == 1 else b"".join(batch))

    async def _handshake(self) -> str | None:
        """Run the opening handshake; return the codec name, or None if the peer left."""
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while True:
                data = await self.stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return None
                self.ws.receive_data(bytes(data))
                for event in self.ws.events():
                    if isinstance(event, Request):
                        if event.target.split("?")[0] not in ("/", "/ecotone", "/v1"):
                            await self._reject(404, f"no WebSocket endpoint at {event.target}")
                            return None
                        subprotocol = _pick_subprotocol(list(event.subprotocols))
                        if event.subprotocols and subprotocol is None:
                            await self._reject(
                                400,
                                "none of the offered subprotocols is supported; use one of "
                                + ", ".join(SUBPROTOCOLS),
                            )
                            return None
                        await self.stream.send_all(
                            self.ws.send(AcceptConnection(subprotocol=subprotocol))
                        )
                        return SUBPROTOCOLS[subprotocol] if subprotocol else "json"
        return None

    async def _reject(self, status: int, reason: str) -> None:
        body = reason.encode()
        data = self.ws.send(
            RejectConnection(
                status_code=status,
                headers=[
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(body)).encode()),
                ],
                has_body=True,
            )
        )
        from wsproto.events import RejectData

        data += self.ws.send(RejectData(data=body, body_finished=True))
        await self.stream.send_all(data)

    async def run(self) -> None:
        try:
            codec_name = await self._handshake()
        except RemoteProtocolError as exc:
            log.debug("handshake failed: %s", exc)
            try:  # not a WebSocket opening handshake: answer 400 rather than hang up silently
                await self._reject(400, f"not a WebSocket handshake: {exc}")
            except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                pass
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.debug("handshake failed: %s", exc)
            return
        if codec_name is None:
            return
        codec = codec_for(codec_name)
        self._binary = codec.binary
        conn = self.kernel.connect(codec)
        try:
            async with trio.open_nursery() as nursery:
                router = Router(self.kernel, conn, self._send_frame, nursery)
                if self.kernel.limits.ping_interval is not None:
                    nursery.start_soon(self._keepalive, nursery.cancel_scope)
                try:
                    await self._receive_loop(router)
                finally:
                    router.close()
                    nursery.cancel_scope.cancel()
        finally:
            # Cancelled from outside (the server is stopping) or the peer went away?
            stopping = trio.current_effective_deadline() == -math.inf
            with trio.CancelScope(shield=True):
                await self.kernel.disconnect(conn, "shutdown" if stopping else "disconnect")
                await trio.aclose_forcefully(self.stream)

    async def _send_frame(self, data: bytes) -> None:
        event: Message[Any] = (
            BytesMessage(data=data) if self._binary else TextMessage(data=data.decode())
        )
        try:
            await self._write(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
            pass  # the peer is gone; the receive loop will see it and clean up

    async def _receive_loop(self, router: Router) -> None:
        ws = self.ws
        limit = self.kernel.limits.max_frame_bytes
        while True:
            try:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            self._last_rx = trio.current_time()
            # Everything answered while handling this chunk goes out in one write (pipelined
            # and multiplexed requests arrive many to a chunk). Nothing in here suspends:
            # inline requests are answered on the spot, the rest are queued to lanes.
            self._batch = []
            try:
                ws.receive_data(bytes(data))
                for event in ws.events():
                    if isinstance(event, Message):
                        if event.message_finished and not self._parts and not self._oversize:
                            if len(event.data) > limit:
                                await self._send_frame(
                                    router.conn.encode(router.conn.too_large(len(event.data)))
                                )
                            else:
                                await router.feed(event.data)
                            continue
                        await self._collect(router, event, limit)
                    elif isinstance(event, Ping):
                        await self._write(event.response())
                    elif isinstance(event, Pong):
                        pass
                    elif isinstance(event, CloseConnection):
                        await self._write(event.response())
                        return
            except RemoteProtocolError as exc:
                log.info("closing connection after a protocol error: %s", exc)
                try:
                    await self._write(CloseConnection(code=1002, reason=str(exc)[:120]))
                except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                    pass
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                return
            finally:
                try:
                    await self._flush()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the next receive sees the broken connection and ends the loop

    async def _collect(self, router: Router, event: Message[Any], limit: int) -> None:
        """A message split over several frames: gather it, or discard it when over the limit."""
        self._size += len(event.data)
        if self._size > limit:
            self._oversize = True
            self._parts.clear()
        elif not self._oversize:
            self._parts.append(event.data)
        if not event.message_finished:
            return
        size, oversize, parts = self._size, self._oversize, self._parts
        self._parts, self._size, self._oversize = [], 0, False
        if oversize:
            await self._send_frame(router.conn.encode(router.conn.too_large(size)))
        elif isinstance(event, TextMessage):
            await router.feed("".join(parts))  # type: ignore[arg-type]
        else:
            await router.feed(b"".join(parts))  # type: ignore[arg-type]

    async def _keepalive(self, scope: trio.CancelScope) -> None:
        """Ping after `ping_interval` of silence. The ping is data the peer's TCP stack must
        acknowledge within `ping_timeout` (TCP_USER_TIMEOUT, set at accept): a vanished peer
        makes the kernel abort the connection, which ends the receive loop. A live peer that
        is merely idle (a blocking client between calls) acknowledges at the TCP level and
        keeps its sessions, pong or no pong."""
        interval = self.kernel.limits.ping_interval
        assert interval is not None
        while True:
            idle = trio.current_time() - self._last_rx
            if idle < interval:
                await trio.sleep(interval - idle)
                continue
            try:
                await self._write(Ping(payload=b"ecotone"))
            except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
                scope.cancel()
                return
            self._last_rx = trio.current_time()  # next ping one interval from now


class WebSocketTransport:
    """Serves ecotone frames over WebSocket."""

    name = "websocket"
    description = "ecotone frames over WebSocket (JSON or MessagePack by subprotocol)"

    async def serve(
        self, kernel: Kernel, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        async def handler(stream: trio.SocketStream) -> None:
            _tune_socket(stream, kernel)
            try:
                await WebSocketConnection(kernel, stream).run()
            except Exception:  # a bug on one connection must not take the server down
                log.exception("connection handler failed; dropping that connection")

        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reap_idle, kernel)
            task_status.started(f"ws://{shown}:{bound[1]}")
            await trio.serve_listeners(handler, listeners)


def _tune_socket(stream: trio.SocketStream, kernel: Kernel) -> None:
    """No Nagle delay on replies; and a deadline for the peer to acknowledge what we send
    (TCP_USER_TIMEOUT), which is how a half-open connection is found and dropped."""
    try:
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        if kernel.limits.ping_interval is not None and hasattr(socket, "TCP_USER_TIMEOUT"):
            timeout_ms = int(kernel.limits.ping_timeout * 1000)
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_ms)
    except OSError:
        pass


async def _reap_idle(kernel: Kernel) -> None:
    timeout = kernel.limits.idle_timeout
    if timeout is None:
        return
    period = max(0.05, min(timeout / 4, 5.0))
    while True:
        await trio.sleep(period)
        await kernel.reap_idle()


@ecotone.kernel.hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    return {"websocket": WebSocketTransport()}
