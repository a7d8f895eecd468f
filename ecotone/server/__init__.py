"""The server: registry + protocol engine + runner + a transport, from a ServerConfig.

`runner.py` drives the engine under trio (env calls in its own nursery, answers written
through each peer's sink); `transports/` holds the transports (they move bytes between peers
and the engine, nothing else); `web/` the web UI's static files. `compose.py` has `serve` and
`BackgroundServer`.
"""

from ecotone.server.compose import BackgroundServer, build_engine, serve, transport_for, web_url
from ecotone.server.runner import Runner

__all__ = ["BackgroundServer", "Runner", "build_engine", "serve", "transport_for", "web_url"]
