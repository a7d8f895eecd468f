"""The `http` transport: HTTP/1.1 plus WebSocket on one port (http://, https://).

Server end: `server/` (the native HTTP API and its routes, the web UI); the WebSocket
endpoints and the plain GETs come from the `websocket` transport's server end, MCP's
streamable HTTP at /mcp from the `mcp` one, OpenEnv's routes from the `openenv` one. Client
end: `client.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.http.server import HttpTransport

    return {"http": HttpTransport()}


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.http.client import CHANNELS

    return {"http": CHANNELS, "https": CHANNELS}
