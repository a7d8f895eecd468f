"""The `websocket` transport: ecotone frames over WebSocket (ws://, wss://).

Server end: `server/` (the endpoints, the handshake, the plain GETs beside them); client
end: `client.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.websocket.server import WebSocketTransport

    return {"websocket": WebSocketTransport()}


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.websocket.client import CHANNELS

    return {"ws": CHANNELS, "wss": CHANNELS}
