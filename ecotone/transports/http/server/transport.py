"""The `http` transport's listener: the routes of `routes.py` and the WebSocket endpoints."""

from __future__ import annotations

from typing import Any

import trio

from ecotone.server.runner import Runner
from ecotone.transports.http.server.routes import HttpServer
from ecotone.transports.websocket.server.endpoints import listen


class HttpTransport:
    """HTTP/1.1 and WebSocket on one port: the native API, OpenEnv's profile, both sockets."""

    name = "http"
    description = (
        "HTTP/1.1 + WebSocket: native API, OpenEnv routes, /ws, MCP at /mcp (http://HOST:PORT)"
    )
    serves_web = True

    async def serve(
        self,
        runner: Runner,
        host: str,
        port: int,
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
        web: bool = False,
    ) -> None:
        async with trio.open_nursery() as background:  # what routes start (MCP's manager)
            server = HttpServer(runner, web=web, background=background)
            await listen(runner, host, port, "http", server.handle, task_status)
            background.cancel_scope.cancel()
