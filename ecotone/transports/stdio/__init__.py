"""The `stdio` transport: length-prefixed frames on a process's standard input and output
(stdio:ENV, or stdio:COMMAND ARGS).

Server end: `server.py`; client end: `client.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.stdio.server import StdioTransport

    return {"stdio": StdioTransport()}


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.stdio.client import CHANNELS

    return {"stdio": CHANNELS}
