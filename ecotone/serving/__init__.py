"""Serving: a server composed from a ServerConfig (registry + engine + runner + a transport).

`compose.py` has `serve` (run one until cancelled) and `BackgroundServer` (one on a thread of
its own). This sits above the transports it chooses from, and nothing below imports it.
"""

from ecotone.serving.compose import (
    BackgroundServer,
    Stopping,
    build_engine,
    serve,
    transport_for,
    web_url,
)

__all__ = [
    "BackgroundServer",
    "Stopping",
    "build_engine",
    "serve",
    "transport_for",
    "web_url",
]
