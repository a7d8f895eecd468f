"""Transports: each one a plugin that brings both of its ends.

A transport package holds a server end (`server.py`, or a `server/` package when it is
several modules: what `ecotone serve --transport NAME` runs, a `Transport` from
`ecotone.server.transport`) and a client end (`client.py`: a
`ChannelFactory` from `ecotone.client.channels` for each URL scheme it answers, what
`ecotone.connect(URL)` opens), and registers both in its `__init__.py` through the
`ecotone_transports` and `ecotone_channels` hooks, as a third party's transport would. The two
ends never import each other (a contract in pyproject.toml): each stands on its own side's
core, `ecotone.server` or `ecotone.client`, which hold the machinery several transports share
(the HTTP/1.1 front door, the WebSocket and length-prefixed loops, the WebSocket client). The
hooks import an end only when asked, so a client never imports a server end and a server
never a client end.

Bundled: `websocket` (ws://, wss://), `http` (http://, https://: the native HTTP API, the web
UI, MCP at /mcp, and WebSocket upgrades), `openenv` (OpenEnv's wire protocol: its server end is
the profile the websocket and http transports mount at /ws, /reset, /step...; its client end
reaches OpenEnv servers at openenv+ws://, openenv+http://), `tcp` (tcp://, tcp+tls://, and
`unix`: unix://), `stdio` (stdio:), `inproc` (inproc://, the engine in the client's own
process) and `mcp` (an env as an MCP server on stdio; its clients are MCP clients, so it has
no client end here). Among the server ends, `http` mounts the `websocket` transport's
endpoints and plain routes, which mount `openenv`'s profile; none imports upward.
"""
