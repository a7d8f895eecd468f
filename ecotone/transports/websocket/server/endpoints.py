"""The WebSocket endpoints of the HTTP/1.1 front door, and the connection they share.

`/` (also `/ecotone`, `/v1`) speaks ecotone's protocol, one engine peer per socket, the codec
chosen by subprotocol (`ecotone.v1.json`, the default when the client offers none, or
`ecotone.v1.msgpack`); `/ws` speaks OpenEnv's (`ecotone.transports.openenv.server`), so
OpenEnv's own clients work against an ecotone server. Both the `websocket` and the `http`
transports serve these, each with its own routes for plain requests (`serve_connection`,
`listen`).
"""

from __future__ import annotations

from typing import Any, Final

import trio

from ecotone.kernel import Peer
from ecotone.server.http11.connection import Handle, guarded_connection, serve_http
from ecotone.server.http11.reader import Upgrade
from ecotone.server.http11.refusals import at_capacity
from ecotone.server.runner import Runner
from ecotone.server.sockets import REFUSED, Listen, connection_stream, serve_tcp
from ecotone.server.wsloop import WsPeer
from ecotone.specs import SUBPROTOCOLS, codec_for
from ecotone.transports.openenv.server.ws import OpenEnvWebSocket
from ecotone.transports.websocket.server.handshake import Endpoint, handshake


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
        self.owner = owner
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

    async def closed(self, stopping: bool) -> None:
        self.peer.close()
        self.runner.disconnect(self.peer.owner, "shutdown" if stopping else "disconnect")


def _native(
    runner: Runner, stream: trio.abc.Stream, pending: bytes, principal: int | None, codec: str
) -> WsPeer:
    return NativeWebSocket(runner, stream, codec, pending, principal)


def _openenv(
    runner: Runner, stream: trio.abc.Stream, pending: bytes, principal: int | None, codec: str
) -> WsPeer:
    return OpenEnvWebSocket(runner, stream, pending, principal)


NATIVE: Final = Endpoint(_native, SUBPROTOCOLS)
OPENENV: Final = Endpoint(_openenv)
ENDPOINTS: Final = {"/": NATIVE, "/ecotone": NATIVE, "/v1": NATIVE, "/ws": OPENENV}
"""Path -> endpoint. /ws negotiates no subprotocol: OpenEnv's clients offer none."""

AT_CAPACITY: Final = at_capacity(REFUSED).serialize()
"""The gate's answer to a connection past the limits, written before reading anything."""


async def open_socket(runner: Runner, stream: trio.abc.Stream, upgrade: Upgrade) -> None:
    """Answer an opening handshake (`handshake`) and serve the socket until it closes."""
    shake = handshake(upgrade.request, ENDPOINTS)
    await stream.send_all(shake.response.serialize())
    if shake.endpoint is not None:
        request = upgrade.request
        peer = shake.endpoint.make(runner, stream, upgrade.pending, request.principal, shake.codec)
        await peer.run()


async def serve_connection(runner: Runner, stream: trio.abc.Stream, handle: Handle) -> None:
    """One connection of a port that serves HTTP and WebSocket: requests answered by
    `handle` until one asks to upgrade, then that socket."""
    upgrade = await serve_http(runner, stream, handle)
    if upgrade is not None:
        await open_socket(runner, stream, upgrade)


async def listen(
    runner: Runner, host: str, port: int, scheme: str, handle: Handle, task_status: Any
) -> None:
    """Serve HTTP (routed by `handle`) and the WebSocket endpoints on host:port until
    cancelled; `scheme`: what the URL reported as started begins with."""
    limits = runner.engine.limits

    async def handler(stream: trio.SocketStream) -> None:
        await guarded_connection(
            connection_stream(stream, limits), lambda s: serve_connection(runner, s, handle)
        )

    where = Listen(host=host, port=port, scheme=scheme, refusal=AT_CAPACITY)
    await serve_tcp(runner, where, handler, task_status)
