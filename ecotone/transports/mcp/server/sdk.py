"""Whether MCP's official SDK is installed (it is an optional extra, `ecotone[mcp]`)."""

from __future__ import annotations

INSTALL_HINT = "MCP needs the `mcp` package: pip install 'ecotone[mcp]'"


def available() -> str | None:
    """Why MCP cannot be served here, or None when it can."""
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
