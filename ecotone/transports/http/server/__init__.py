"""The `http` transport's server end: HTTP/1.1 plus WebSocket on one port.

`routes.py` (the native HTTP API, with the plain GETs, OpenEnv's routes and /mcp mounted
beside it: `HttpServer`), `transport.py` (the listener: `HttpTransport`), `webui.py` and
`web/` (the web UI). The HTTP/1.1 front door itself is the server core's
(`ecotone.server.http11`); the WebSocket endpoints are the websocket transport's, which
this one imports (never the other way round).
"""

from ecotone.transports.http.server.routes import HttpServer
from ecotone.transports.http.server.transport import HttpTransport

__all__ = ["HttpServer", "HttpTransport"]
