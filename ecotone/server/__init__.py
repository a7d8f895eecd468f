"""The server's core: what drives the protocol engine under trio, and what every transport's
server end shares.

`runner.py` drives the engine (env calls in its own nursery, answers written through each
peer's sink); `admission.py` decides who may connect; `metrics.py` and `logs.py` observe the
engine; `transport.py` is the contract a transport's server end keeps; `sockets.py`,
`wsloop.py`, `framed.py` and `asgi.py` are the socket, WebSocket, length-prefixed and ASGI
machinery the transports (`ecotone/transports/`) are built from. Nothing here imports a
transport or the client: composing a server from a config is `ecotone/serving/`.
"""
