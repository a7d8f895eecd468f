"""MCP, served by the official SDK (`mcp`, the optional extra `ecotone[mcp]`): every env as
an MCP server, over stdio (`ecotone mcp ENV`, the `mcp` transport) and over streamable HTTP
on the http transport (`/mcp`).

* `catalog.py`: an env as tools (actions as tools, what an agent is shown), plain data;
* `face.py`: the SDK's low-level `Server` whose tools call the engine, one env session per
  MCP connection (or the orchestrator's, shared with it);
* `asgi.py`: the SDK's streamable-HTTP session manager behind the http transport's `/mcp`.

Importing this package does not import the SDK; `face.py` and `asgi.py` do.
"""

from __future__ import annotations

from collections.abc import Mapping

INSTALL_HINT = "MCP needs the `mcp` package: pip install 'ecotone[mcp]'"


def speaks_streamable_http(method: str, headers: Mapping[str, str]) -> bool:
    """Whether a request to `/mcp` is MCP's streamable-HTTP transport (not OpenEnv's plain
    JSON-RPC POSTs): such a client accepts `text/event-stream` on every POST (MCP spec,
    transports), sends `Mcp-Session-Id` / `MCP-Protocol-Version` once it has them, and GET
    and DELETE are the transport's too. `headers`: lower-cased names."""
    return (
        method in ("GET", "DELETE")
        or "mcp-session-id" in headers
        or "mcp-protocol-version" in headers
        or "text/event-stream" in headers.get("accept", "")
    )


def available() -> str | None:
    """Why MCP cannot be served here, or None when it can."""
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
