"""The `mcp` transport: the env as an MCP server on stdin/stdout (JSON-RPC lines, the MCP
stdio transport), through the official SDK's `stdio_server`.

`ecotone mcp ENV` (or `ecotone serve ENV --transport mcp`) is what an MCP client's config
runs: `{"command": "ecotone", "args": ["mcp", "wordle"]}`. One MCP connection, one env
session, reset once when the connection starts; the process ends when stdin closes. Logs go
to stderr; a stray `print` of env code goes there too (the SDK points fd 1 at stderr while it
serves). The MCP face itself: `face.py`.
"""

from __future__ import annotations

from typing import Any

import trio

from ecotone.server.runner import Runner
from ecotone.transports.mcp.server.sdk import INSTALL_HINT, available


class McpStdioTransport:
    """Serves one MCP connection on stdin/stdout."""

    name = "mcp"
    description = "MCP (the official SDK) on stdin/stdout, for MCP clients: ecotone mcp ENV"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        missing = available()
        if missing is not None:
            raise RuntimeError(INSTALL_HINT)
        from mcp.server.stdio import stdio_server

        from ecotone.transports.mcp.server.face import McpFace

        face = McpFace(runner, runner.mcp, one_client=True)
        try:
            async with stdio_server() as (read, write):
                task_status.started("mcp+stdio:")
                await face.server.run(read, write, face.server.create_initialization_options())
        finally:
            face.close()
