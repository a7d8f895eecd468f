"""The HTTP/1.1 front door of the server (h11 on trio), in pieces a reader can take one at a
time: `refusals` (every answer the door itself gives, each an `HttpResponse` that closes the
connection). It knows no route, no WebSocket and no profile: the transports mount those.
"""
