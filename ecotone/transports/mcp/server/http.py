"""MCP over streamable HTTP at the http transport's `/mcp`: the official SDK's
`StreamableHTTPSessionManager`, made and started on the first MCP request (a server nobody
reaches over MCP never imports the SDK).

Which requests are MCP's: `/mcp` also answers OpenEnv's own JSON-RPC dialect (plain POSTs,
`ecotone.compat.openenv.rpc`); `ecotone.specs.http.speaks_streamable_http` tells them
apart. MCP's go to the SDK; the rest to OpenEnv's.

The SDK's own Host/Origin checks are off: the http transport's admission (`admission.py`)
has already checked Host, Origin and the token of every request. Its limits follow the
server's: `max_sessions`, `lease` (an MCP session idle that long ends, and its env session
with it), `max_frame_bytes` for a request body.
"""

from __future__ import annotations

from typing import Any

import trio

from ecotone.server.http11.asgi import App
from ecotone.server.runner import Runner


class McpHttp:
    """The session manager behind `/mcp`, started once in `background` when first needed."""

    def __init__(self, runner: Runner, background: trio.Nursery) -> None:
        self.runner = runner
        self.background = background
        self._app: App | None = None
        self._lock = trio.Lock()

    async def app(self) -> App:
        async with self._lock:
            if self._app is None:
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                from ecotone.transports.mcp.server.face import McpFace

                limits = self.runner.engine.limits
                face = McpFace(self.runner, self.runner.mcp)
                manager = StreamableHTTPSessionManager(
                    app=face.server,
                    session_idle_timeout=limits.lease,
                    max_request_body_size=limits.max_frame_bytes,
                    max_sessions=limits.max_sessions,
                )
                await self.background.start(self._run, manager)
                self._app = manager.handle_request
        return self._app

    @staticmethod
    async def _run(manager: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with manager.run():
            task_status.started()
            await trio.sleep_forever()
