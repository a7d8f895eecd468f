"""The `http` transport: HTTP/1.1 plus WebSocket on one port (http://, https://).

Server end: `server.py` (the native HTTP API and its routes), `upgrade.py` (WebSocket
upgrades), `webui.py` and `web/` (the web UI); MCP's streamable HTTP at /mcp comes from the
`mcp` transport's package, OpenEnv's routes from the `openenv` one. Client end: `client.py`.
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
