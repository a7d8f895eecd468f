"""WebSocket upgrades on the HTTP/1.1 front door: the opening handshake, answered by path.

`/` (also `/ecotone`, `/v1`) speaks ecotone's protocol, one engine peer per socket, the codec
chosen by subprotocol (`ecotone.v1.json`, the default when the client offers none, or
`ecotone.v1.msgpack`); `/ws` speaks OpenEnv's (`ecotone/transports/openenv/server.py`), so
OpenEnv's own clients work against an ecotone server. Both the `websocket` and the `http`
transports serve these.
"""

from __future__ import annotations

import trio

from ecotone.kernel import Peer
from ecotone.server.http11.connection import Handle, serve_http
from ecotone.server.http11.reader import Upgrade
from ecotone.server.runner import Runner
from ecotone.server.wsloop import WsPeer
from ecotone.specs import SUBPROTOCOLS, codec_for
from ecotone.specs import wsframing as wsf
from ecotone.specs.http import HttpResponse
from ecotone.transports.openenv.server import OpenEnvWebSocket

NATIVE_PATHS = frozenset({"/", "/ecotone", "/v1"})
OPENENV_PATH = "/ws"


class NativeWebSocket(WsPeer):
    """ecotone's own protocol: any number of sessions, pipelined; one engine peer."""

    def __init__(
        self,
        runner: Runner,
        stream: trio.abc.Stream,
        codec: str,
        pending: bytes = b"",
        principal: int | None = None,
    ) -> None:
        super().__init__(runner, stream, pending)
        self.codec = codec_for(codec)
        self.binary = self.codec.binary
        # Its handshake passed Admission, showing token number `principal` (if tokens are set).
        owner = runner.engine.owner(authenticated=True, principal=principal)
        self.peer = runner.engine.peer(self.codec, owner, sink=self.write_answers)
        self._room = trio.Event()

    async def message(self, data: bytes, text: bool) -> None:
        if text and self.binary:  # the engine answers why text is refused here
            self.runner.receive(self.peer, data.decode("utf-8", "replace"))
            return
        self.runner.receive(self.peer, data)

    async def too_large(self, size: int) -> None:
        self.peer.too_large(size)

    async def flush_answers(self) -> None:
        await self.runner.flush()

    async def write_answers(self, peer: Peer) -> None:
        await super().write_answers(peer)
        if self.dead or not peer.full:
            self._room.set()

    async def wait_room(self) -> None:
        while self.peer.full and not self.peer.closed and not self.dead:
            self._room = trio.Event()
            await self._room.wait()

    def holds_sessions(self) -> bool:
        return self.runner.engine.sessions.held_by(self.peer.owner) > 0

    async def closed(self, stopping: bool) -> None:
        self.peer.close()
        self.runner.disconnect(self.peer.owner, "shutdown" if stopping else "disconnect")


def _pick_subprotocol(offered: str) -> str | None:
    for name in (p.strip() for p in offered.split(",")):
        if name in SUBPROTOCOLS:
            return name
    return None


def rejection(status: int, reason: str) -> HttpResponse:
    """A handshake refused: `reason` as text, then the connection closes."""
    return HttpResponse(status, reason.encode(), "text/plain", close=True)


async def reject(stream: trio.abc.Stream, status: int, reason: str) -> None:
    await stream.send_all(rejection(status, reason).serialize())


async def accept(runner: Runner, stream: trio.abc.Stream, upgrade: Upgrade) -> None:
    """Answer a WebSocket opening handshake by path and serve the socket until it closes."""
    request = upgrade.request
    headers = request.headers
    key = headers.get("sec-websocket-key", "")
    if request.method != "GET" or headers.get("sec-websocket-version", "") != "13" or not key:
        await reject(
            stream,
            400,
            "not a WebSocket handshake: GET with Sec-WebSocket-Key and "
            "Sec-WebSocket-Version: 13 expected",
        )
        return
    path = request.path
    subprotocol: str | None = None
    if path == OPENENV_PATH:
        pass
    elif path in NATIVE_PATHS:
        offered = headers.get("sec-websocket-protocol", "")
        subprotocol = _pick_subprotocol(offered)
        if offered and subprotocol is None:
            await reject(
                stream,
                400,
                "none of the offered subprotocols is supported; use one "
                "of " + ", ".join(SUBPROTOCOLS),
            )
            return
    else:
        await reject(stream, 404, f"no WebSocket endpoint at {path}")
        return
    answer = [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-accept", wsf.accept_key(key)),
    ]
    if subprotocol:
        answer.append(("sec-websocket-protocol", subprotocol))
    await stream.send_all(HttpResponse(101, headers=answer).serialize())
    if path == OPENENV_PATH:
        await OpenEnvWebSocket(runner, stream, upgrade.pending, request.principal).run()
        return
    codec = SUBPROTOCOLS[subprotocol] if subprotocol else "json"
    await NativeWebSocket(runner, stream, codec, upgrade.pending, request.principal).run()


async def serve_connection(runner: Runner, stream: trio.abc.Stream, handle: Handle) -> None:
    """One connection of a transport that serves HTTP and WebSocket on one port: requests
    answered by `handle` until one asks to upgrade, then that socket."""
    upgrade = await serve_http(runner, stream, handle)
    if upgrade is not None:
        await accept(runner, stream, upgrade)
