"""The `websocket` transport: ecotone frames over WebSocket, on trio.

One WebSocket message is one frame. The codec is chosen by subprotocol: `ecotone.v1.json`
(text messages, the default when the client offers none) or `ecotone.v1.msgpack` (binary).
Paths: `/` (also `/ecotone`, `/v1`) speaks ecotone's protocol; `/ws` speaks OpenEnv's, so
OpenEnv's own clients work against an ecotone server.

How it is built, and why: the opening handshake is parsed by h11 (the same front door as the
`http` transport, which serves these WebSockets too); frames are read and written by
`ecotone.specs.wsframing` in the connection's own task. Measured here, a trio-websocket echo
(a reader task per connection, every message through a channel) answers fewer round trips per
second than this loop serves env steps, and wsproto's event machinery alone cost the server
~40 µs per message (see docs/benchmarks.md).

Dead peers: after `ping_interval` seconds without receiving anything the server sends a ping,
and the peer's TCP stack must acknowledge it within `ping_timeout` (TCP_USER_TIMEOUT); if it
does not, the kernel aborts the connection and its sessions are closed, so a half-open socket
never holds sessions. An idle but live client is kept even if it does not answer the ping
(our blocking client reads only during a call), and idle sessions are reaped after
`idle_timeout` anyway.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ecotone.server.http11.connection import guarded_connection
from ecotone.server.http11.refusals import at_capacity
from ecotone.server.runner import Runner
from ecotone.server.sockets import REFUSED, connection_stream, serve_tcp
from ecotone.transports.http.server import HttpServer
from ecotone.transports.http.upgrade import serve_connection

log = logging.getLogger("ecotone.websocket")

_AT_CAPACITY = at_capacity(REFUSED).serialize()


class WebSocketTransport:
    """Serves ecotone frames (and OpenEnv's /ws) over WebSocket, and the few plain GETs
    OpenEnv's consumers read beside it (/health, /metadata, /schema, /openapi.json)."""

    name = "websocket"
    description = "ecotone frames over WebSocket (JSON or MessagePack by subprotocol)"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        # Beside the sockets, the plain GETs OpenEnv's consumers read on the same port.
        routes = HttpServer(runner, describe_only=True)

        limits = runner.engine.limits

        async def handler(stream: trio.SocketStream) -> None:
            await guarded_connection(
                connection_stream(stream, limits),
                lambda s: serve_connection(runner, s, routes.handle),
            )

        await serve_tcp(runner, host, port, "ws", handler, task_status, _AT_CAPACITY)
