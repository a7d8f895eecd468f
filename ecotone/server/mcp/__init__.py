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

INSTALL_HINT = "MCP needs the `mcp` package: pip install 'ecotone[mcp]'"


def available() -> str | None:
    """Why MCP cannot be served here, or None when it can."""
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
