"""The HTTP/1.1 front door of the server (h11 on trio), in pieces a reader can take one at a
time:

* `reader.py`: `RequestReader`, the request-reading state machine; each outcome a value (a
  request, an `Upgrade`, a refusal, or nothing);
* `refusals.py`: every answer the door gives on its own, each an `HttpResponse` that closes
  the connection;
* `router.py`: `Router`, routes by path pattern and method (the one 404 and 405);
* `connection.py`: `serve_http`, the keep-alive loop of one connection, and
  `guarded_connection`, the wrapper every HTTP transport's handler runs in;
* `asgi.py`: one request handed to an ASGI app (MCP's SDK at /mcp).

Every answer is written by `ecotone.specs.http.HttpResponse.serialize`. The door knows no
route, no WebSocket and no profile: the transports mount those, and a request to switch to
WebSocket is handed back to them (a contract in pyproject.toml: it imports no transport).
"""
