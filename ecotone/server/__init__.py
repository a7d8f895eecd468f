"""The server: registry + protocol engine + a transport, composed from a ServerConfig.

`transports/` holds the transports (they move bytes between peers and the engine, nothing
else); `web/` the web UI's static files. See `compose.py` for `serve` and `BackgroundServer`.
"""

from ecotone.server.compose import (
    BackgroundServer,
    build_kernel,
    serve,
    transport_for,
    trio_offload,
    web_url,
)

__all__ = ["BackgroundServer", "build_kernel", "serve", "transport_for", "trio_offload", "web_url"]
