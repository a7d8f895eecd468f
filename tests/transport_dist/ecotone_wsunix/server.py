"""The server end: a unix listener whose connections get the websocket transport's front door
(its plain GETs, and its WebSocket endpoints: ecotone's protocol at `/`, OpenEnv's at `/ws`)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import trio

from ecotone.server.http11.connection import guarded_connection
from ecotone.server.http11.router import Router
from ecotone.server.runner import Runner
from ecotone.transports.websocket.server.endpoints import serve_connection
from ecotone.transports.websocket.server.plain import NOT_A_HANDSHAKE, plain_routes


class WsUnixTransport:
    """WebSocket over a unix socket; `--host` is the socket's path."""

    name = "ws-unix"
    description = "ecotone's WebSocket protocol over a unix socket (ws+unix:///PATH)"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        if not host.startswith("/"):
            raise ValueError("the ws-unix transport needs a socket path: --host /path/to.sock")
        with contextlib.suppress(FileNotFoundError):  # a socket left by an earlier server
            os.unlink(host)
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(host)
        sock.listen(128)
        router = Router(not_found=NOT_A_HANDSHAKE)
        plain_routes(router, runner)

        async def handler(stream: trio.SocketStream) -> None:
            await guarded_connection(stream, lambda s: serve_connection(runner, s, router.handle))

        try:
            task_status.started(f"ws+unix://{host}")
            await trio.serve_listeners(handler, [trio.SocketListener(sock)])
        finally:
            with contextlib.suppress(OSError):
                os.unlink(host)
