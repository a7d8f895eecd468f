"""The `mcp` transport's server end: the MCP face of the engine on the official SDK, on stdio
(`stdio.py`) and behind the http transport's `/mcp` (`http.py`). Importing this package does
not import the SDK (`sdk.py` says whether it is installed); `face.py` does.
"""
