"""The `websocket` transport: ecotone frames over WebSocket, on trio.

One WebSocket message is one frame. The codec is chosen by subprotocol: `ecotone.v1.json`
(text messages, the default when the client offers none) or `ecotone.v1.msgpack` (binary).
Paths: `/` (also `/ecotone`, `/v1`) speaks ecotone's protocol; `/ws` speaks OpenEnv's, so
OpenEnv's own clients work against an ecotone server.

How it is built, and why: the opening handshake is parsed by h11 (the server's HTTP/1.1 front
door, `ecotone.server.http11`, which the `http` transport serves these WebSockets on too) and
answered by `handshake.py` (a pure function); frames are read and written by
`ecotone.specs.wsframing` in the connection's own task (`ecotone.server.wsloop`). No WebSocket
library on the data path, for speed: trio-websocket (a reader task per connection, every
message through a channel) answers fewer round trips than this loop serves env steps, and
wsproto's event machinery costs the server CPU on every message (the decision and its figures:
docs/architecture.md, "WebSocket without a WebSocket library on the data path"; trio-websocket
stays in the benchmark as the transport floor).

Dead peers: after `ping_interval` seconds without receiving anything the server sends a ping,
and the peer's TCP stack must acknowledge it within `ping_timeout` (TCP_USER_TIMEOUT); if it
does not, the kernel aborts the connection and its sessions are closed, so a half-open socket
never holds sessions. An idle but live client is kept even if it does not answer the ping
(our blocking client reads only during a call); a client that froze, whose kernel still
acknowledges, loses its sessions when their lease runs out (`ecotone.kernel.leases`).

Modules: `transport.py` (the transport), `endpoints.py` (the WebSocket endpoints, ecotone's
own peer, and the connection both transports serve), `handshake.py`, `plain.py` (the plain
GETs served beside the sockets).
"""

from ecotone.transports.websocket.server.transport import WebSocketTransport

__all__ = ["WebSocketTransport"]
