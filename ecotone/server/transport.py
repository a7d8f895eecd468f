"""Transports: they move bytes between peers and the protocol engine, and nothing else.

A transport is contributed by a plugin through the `ecotone_transports` hook, under a name that
`ecotone serve --transport NAME` and the `transport` key of `ecotone.toml` select. Every rule
of the protocol (ordering, batching, ownership, errors) is the engine's; a transport makes a
`Peer` per connection (or per HTTP request), feeds it what arrives through the server's
`Runner`, writes what the peer's outbox holds, and tells the runner when a connection goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ecotone.server.runner import Runner


@runtime_checkable
class Transport(Protocol):
    """A way to serve an engine."""

    name: str
    description: str
    # Optional: `listens = False` for transports that cannot serve (inproc); `schemes` and
    # `open_channel` / `open_async_channel` for transports a client can reach by URL scheme;
    # `serves_web = True` for one whose `serve` takes `web=True` and then serves the web UI
    # at `/web` (http).

    async def serve(self, runner: Runner, host: str, port: int, *, task_status: Any) -> None:
        """Serve until cancelled. Call `task_status.started(url)` once ready, with the URL a
        client passes to `ecotone.connect`. On cancellation, stop accepting, drop connections
        (telling the runner: `runner.disconnect`) and return; the caller closes what is left."""
        ...
