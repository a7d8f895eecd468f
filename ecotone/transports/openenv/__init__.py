"""OpenEnv's wire protocol, both ways: a profile of ecotone, not a listener of its own.

Server end: `server/`, the OpenEnv routes and `/ws` messages that the `websocket` and
`http` transports mount beside ecotone's own (translated into the same engine requests, so
OpenEnv's clients get ecotone's rules). Client end: `client.py`, for OpenEnv servers at
openenv+ws://, openenv+wss://, openenv+http:// and openenv+https:// URLs (the last two open
WebSockets too: OpenEnv's HTTP routes keep no session).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_channels() -> Mapping[str, Any]:
    from ecotone.transports.openenv.client import CHANNELS

    return dict.fromkeys(("openenv+ws", "openenv+wss", "openenv+http", "openenv+https"), CHANNELS)
