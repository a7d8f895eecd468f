"""The `websocket` transport's client end: ws:// and wss:// URLs.

`ws://HOST:PORT/PATH` (PATH `/` by default) opens one WebSocket that carries every session of
the connection; the codec is offered as a subprotocol and the token sent as a bearer header.
The channel is the client core's (`ecotone.client._async.websocket`, written once, and its
blocking face generated from it): the `openenv` transport's client end opens it too.
"""

from __future__ import annotations

from ecotone.client.channels import Faces

CHANNELS = Faces("ecotone.client._async.websocket")
