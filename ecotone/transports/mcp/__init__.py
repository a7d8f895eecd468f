"""The `mcp` transport: an env as an MCP server, on the official SDK (`mcp`, the optional extra
`ecotone[mcp]`), over stdio (`ecotone mcp ENV`, the `mcp` transport) and over streamable HTTP
on the http transport (`/mcp`).

Its server end, `server/`:

* `catalog.py`: an env as tools (actions as tools, what an agent is shown), plain data;
* `face.py`: the SDK's low-level `Server` whose tools call the engine, one env session per
  MCP connection (or the orchestrator's, shared with it);
* `http.py`: the SDK's streamable-HTTP session manager behind the http transport's `/mcp`;
* `stdio.py`: the stdio transport; `sdk.py`: whether the SDK is installed.

Its clients are MCP clients (agents, the SDK's own), so it has no client end here. Importing
this package does not import the SDK; `face.py` and `http.py` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.specs.hookspecs import hookimpl


@hookimpl
def ecotone_transports() -> Mapping[str, Any]:
    from ecotone.transports.mcp.server.stdio import McpStdioTransport

    return {"mcp": McpStdioTransport()}
