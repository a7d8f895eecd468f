"""The WebSocket opening handshake as a pure function (websockets' `accept`/`reject`): a
request in, the answer out, and which endpoint serves the socket. No I/O, so every refusal
can be checked without a socket.

RFC 6455 §4.2: a GET with `Sec-WebSocket-Version: 13` and a `Sec-WebSocket-Key`, to a path
that has an endpoint, offering (if anything) a subprotocol the endpoint speaks. The answer
is `101 Switching Protocols` with `Sec-WebSocket-Accept` (and the chosen subprotocol), or a
400/404 in plain text that closes the connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import trio

from ecotone.server.runner import Runner
from ecotone.server.wsloop import WsPeer
from ecotone.specs import wsframing as wsf
from ecotone.specs.http import HttpRequest, HttpResponse

MakePeer = Callable[[Runner, trio.abc.Stream, bytes, int | None, str], WsPeer]
"""A socket's peer: (runner, stream, pending bytes, principal, codec) -> its WsPeer."""


@attrs.frozen
class Endpoint:
    """What serves the sockets opened at one path."""

    make: MakePeer
    subprotocols: Mapping[str, str] | None = None
    """Subprotocol offered -> codec; None: the endpoint negotiates none (and ignores any)."""


@attrs.frozen
class Handshake:
    """The answer to an opening handshake, and who serves the socket (None: refused)."""

    response: HttpResponse
    endpoint: Endpoint | None = None
    codec: str = "json"
    """The codec of the subprotocol chosen; `json` when none is."""


def reject(status: int, text: str) -> HttpResponse:
    """A handshake refused: `text` as plain text, then the connection closes."""
    return HttpResponse(status, text.encode(), "text/plain", close=True)


def _pick(offered: str, subprotocols: Mapping[str, str]) -> str | None:
    """The first subprotocol offered (comma-separated, in the client's order) we speak."""
    for name in (p.strip() for p in offered.split(",")):
        if name in subprotocols:
            return name
    return None


def handshake(request: HttpRequest, endpoints: Mapping[str, Endpoint]) -> Handshake:
    """Answer an opening handshake (module docstring): by `request.path` in `endpoints`."""
    headers = request.headers
    key = headers.get("sec-websocket-key", "")
    if request.method != "GET" or headers.get("sec-websocket-version", "") != "13" or not key:
        return Handshake(
            reject(
                400,
                "not a WebSocket handshake: GET with Sec-WebSocket-Key and "
                "Sec-WebSocket-Version: 13 expected",
            )
        )
    endpoint = endpoints.get(request.path)
    if endpoint is None:
        return Handshake(reject(404, f"no WebSocket endpoint at {request.path}"))
    answer = [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-accept", wsf.accept_key(key)),
    ]
    codec = "json"
    if endpoint.subprotocols is not None:
        offered = headers.get("sec-websocket-protocol", "")
        chosen = _pick(offered, endpoint.subprotocols)
        if chosen is not None:
            answer.append(("sec-websocket-protocol", chosen))
            codec = endpoint.subprotocols[chosen]
        elif offered:
            return Handshake(
                reject(
                    400,
                    "none of the offered subprotocols is supported; use one of "
                    + ", ".join(endpoint.subprotocols),
                )
            )
    return Handshake(HttpResponse(101, headers=answer), endpoint, codec)
