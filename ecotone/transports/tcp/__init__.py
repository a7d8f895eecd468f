"""The `tcp` and `unix` transports: length-prefixed frames over a TCP (tcp://, tcp+tls://) or
unix-domain socket (unix://).

Server end: `server.py`; client end: `client.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.tcp.server import TcpTransport, UnixTransport

    return {"tcp": TcpTransport(), "unix": UnixTransport()}


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.tcp.client import CHANNELS

    return {"tcp": CHANNELS, "tcp+tls": CHANNELS, "unix": CHANNELS}
