"""What a transport is, as the kernel sees it.

A transport moves frames between peers and the kernel. It is contributed by a plugin through
the `ecotone_transports` hook, under a name that `ecotone serve --transport NAME` and the
`transport` key of `ecotone.toml` select. Transports run under trio.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ecotone.kernel.dispatch import Kernel


@runtime_checkable
class Transport(Protocol):
    """A way to serve a kernel."""

    name: str
    description: str
    # Optional: `listens = False` for transports that cannot serve (inproc); `schemes` and
    # `open_channel` / `open_async_channel` for transports a client can reach by URL scheme;
    # `serves_web = True` for one whose `serve` takes `web=True` and then serves the web UI
    # at `/web` (http).

    async def serve(self, kernel: Kernel, host: str, port: int, *, task_status: Any) -> None:
        """Serve until cancelled. Call `task_status.started(url)` once ready, with the URL a
        client passes to `ecotone.connect`. On cancellation, stop accepting, drop connections
        and return; the caller closes the kernel's sessions."""
        ...
