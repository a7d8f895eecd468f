"""The `websocket` transport's listener: the WebSocket endpoints and the plain GETs."""

from __future__ import annotations

from typing import Any

import trio

from ecotone.server.http11.router import Router
from ecotone.server.runner import Runner
from ecotone.transports.websocket.server.endpoints import listen
from ecotone.transports.websocket.server.plain import NOT_A_HANDSHAKE, plain_routes


class WebSocketTransport:
    """Serves ecotone frames (and OpenEnv's /ws) over WebSocket, and the few plain GETs
    OpenEnv's consumers read beside it (`plain.py`: /health, /metadata, /schema,
    /openapi.json...)."""

    name = "websocket"
    description = "ecotone frames over WebSocket (JSON or MessagePack by subprotocol)"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        router = Router(not_found=NOT_A_HANDSHAKE)
        plain_routes(router, runner)
        await listen(runner, host, port, "ws", router.handle, task_status)
