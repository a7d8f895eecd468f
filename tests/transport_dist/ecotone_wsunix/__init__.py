"""`ws-unix`: ecotone's WebSocket protocol over a unix-domain socket, as a third party would
write a transport: one distribution, one entry point, both ends.

    ecotone serve counter --transport ws-unix --host /tmp/counter.sock
    ecotone.connect("ws+unix:///tmp/counter.sock")

The server end (`server.py`) is ecotone's HTTP/1.1 front door and WebSocket endpoints on a
unix listener; the client end (`client.py`) shakes hands with ecotone's WebSocket channel
over a unix connection. Each end is imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ecotone


@ecotone.hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from .server import WsUnixTransport

    return {"ws-unix": WsUnixTransport()}


@ecotone.hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from .client import WsUnixChannels

    return {"ws+unix": WsUnixChannels()}
