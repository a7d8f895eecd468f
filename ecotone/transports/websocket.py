"""The `websocket` transport: ecotone frames over WebSocket, served with trio and wsproto.

One WebSocket message is one frame. The codec is chosen by subprotocol: `ecotone.v1.json`
(text messages, the default when the client offers none) or `ecotone.v1.msgpack` (binary).
Paths: `/` (also `/ecotone`, `/v1`) speaks ecotone's protocol; `/ws` speaks OpenEnv's, so
OpenEnv's own clients work against an ecotone server.

Why wsproto on trio streams and not trio-websocket's connection objects: trio-websocket runs a
reader task per connection and passes every message through a memory channel; measured here,
its echo answers fewer round trips per second than this loop serves full env steps (see
docs/benchmarks.md). This loop reads the socket, feeds wsproto and hands complete messages to
the router in the same task.

Dead peers: after `ping_interval` seconds without receiving anything the server sends a ping,
and the peer's TCP stack must acknowledge it within `ping_timeout` (TCP_USER_TIMEOUT); if it
does not, the kernel aborts the connection and its sessions are closed, so a half-open socket
never holds sessions. An idle but live client is kept even if it does not answer the ping
(our blocking client reads only during a call), and idle sessions are reaped after
`idle_timeout` anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

import ecotone.kernel
from ecotone.kernel import Kernel, KernelConnection
from ecotone.specs import SUBPROTOCOLS, codec_for
from ecotone.transports._common import LeanSocketStream, reap_idle, tune_socket
from ecotone.transports._router import Router
from ecotone.transports._wsloop import RECEIVE_SIZE, WsPeer

log = logging.getLogger("ecotone.websocket")

HANDSHAKE_TIMEOUT = 10.0
NATIVE_PATHS = frozenset({"/", "/ecotone", "/v1"})
OPENENV_PATH = "/ws"


class NativeWebSocket(WsPeer):
    """ecotone's own protocol: any number of sessions, pipelined, routed per session."""

    def __init__(
        self,
        kernel: Kernel,
        stream: trio.abc.Stream,
        ws: WSConnection,
        codec: str,
        pending: bytes = b"",
    ) -> None:
        super().__init__(kernel, stream, ws, pending)
        self.codec = codec_for(codec)
        self.binary = self.codec.binary
        self.conn: KernelConnection = kernel.connect(self.codec)
        self.router: Router | None = None

    async def opened(self, nursery: trio.Nursery) -> bool:
        self.router = Router(self.kernel, self.conn, self.send_message, nursery)
        return True

    async def message(self, data: bytes | str) -> None:
        assert self.router is not None
        await self.router.feed(data)

    async def too_large(self, size: int) -> None:
        await self.send_message(self.conn.encode(self.conn.too_large(size)))

    async def closed(self, stopping: bool) -> None:
        if self.router is not None:
            self.router.close()
        await self.kernel.disconnect(self.conn, "shutdown" if stopping else "disconnect")


def _pick_subprotocol(offered: list[str]) -> str | None:
    for name in offered:
        if name in SUBPROTOCOLS:
            return name
    return None


async def reject(stream: trio.abc.Stream, ws: WSConnection, status: int, reason: str) -> None:
    body = reason.encode()
    data = ws.send(
        RejectConnection(
            status_code=status,
            headers=[(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))],
            has_body=True,
        )
    )
    data += ws.send(RejectData(data=body, body_finished=True))
    await stream.send_all(data)


async def accept(
    kernel: Kernel,
    stream: trio.abc.Stream,
    ws: WSConnection,
    request: Request,
    pending: bytes = b"",
) -> None:
    """Answer a WebSocket opening handshake by path and serve the socket until it closes."""
    path = request.target.split("?", 1)[0]
    if path == OPENENV_PATH:
        from ecotone.transports.openenv import OpenEnvWebSocket

        await stream.send_all(ws.send(AcceptConnection()))
        await OpenEnvWebSocket(kernel, stream, ws, pending).run()
        return
    if path not in NATIVE_PATHS:
        await reject(stream, ws, 404, f"no WebSocket endpoint at {request.target}")
        return
    subprotocol = _pick_subprotocol(list(request.subprotocols))
    if request.subprotocols and subprotocol is None:
        await reject(
            stream,
            ws,
            400,
            "none of the offered subprotocols is supported; use one of " + ", ".join(SUBPROTOCOLS),
        )
        return
    await stream.send_all(ws.send(AcceptConnection(subprotocol=subprotocol)))
    codec = SUBPROTOCOLS[subprotocol] if subprotocol else "json"
    await NativeWebSocket(kernel, stream, ws, codec, pending).run()


async def serve_websocket(kernel: Kernel, stream: trio.abc.Stream) -> None:
    """A connection that must open with a WebSocket handshake (the `websocket` transport)."""
    ws = WSConnection(ConnectionType.SERVER)
    request: Request | None = None
    try:
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while request is None:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                ws.receive_data(bytes(data))
                for event in ws.events():
                    if isinstance(event, Request):
                        request = event
                        break
    except RemoteProtocolError as exc:
        log.debug("handshake failed: %s", exc)
        try:  # not a WebSocket opening handshake: answer 400 rather than hang up silently
            await reject(stream, ws, 400, f"not a WebSocket handshake: {exc}")
        except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
            pass
        return
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.debug("handshake failed: %s", exc)
        return
    if request is None:
        return
    try:
        await accept(kernel, stream, ws, request)
    except (trio.BrokenResourceError, trio.ClosedResourceError, LocalProtocolError):
        pass


class WebSocketTransport:
    """Serves ecotone frames (and OpenEnv's /ws) over WebSocket."""

    name = "websocket"
    description = "ecotone frames over WebSocket (JSON or MessagePack by subprotocol)"

    async def serve(
        self, kernel: Kernel, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        async def handler(stream: trio.SocketStream) -> None:
            tune_socket(stream, kernel)
            try:
                await serve_websocket(kernel, LeanSocketStream(stream))
            except Exception:  # a bug on one connection must not take the server down
                log.exception("connection handler failed; dropping that connection")
            finally:
                await trio.aclose_forcefully(stream)

        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reap_idle, kernel)
            task_status.started(f"ws://{shown}:{bound[1]}")
            await trio.serve_listeners(handler, listeners)


@ecotone.kernel.hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    return {"websocket": WebSocketTransport()}
