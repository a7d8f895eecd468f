"""The `inproc` transport: the engine embedded in the client's own process (inproc://ENV).

Client end: `client.py` (it builds and drives the engine); server end: `server.py` (nothing
to serve: it says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.inproc.server import InprocTransport

    return {"inproc": InprocTransport()}


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.inproc.client import InprocChannels

    return {"inproc": InprocChannels()}
