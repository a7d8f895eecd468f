"""The `tcp` transport (and `unix`): length-prefixed frames over a TCP or unix-domain socket.

`ecotone serve ENV --transport tcp --port 8000` serves `tcp://127.0.0.1:8000`;
`--transport unix --host /path/to.sock` serves `unix:///path/to.sock`. The lean native path:
the same frames and codecs as every other transport, with 4 bytes of framing per message.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any

import trio

from ecotone.server.framed import FramedConnection
from ecotone.server.runner import Runner
from ecotone.server.sockets import (
    REFUSED,
    Listen,
    connection_stream,
    frame_refusal,
    guarded,
    serve_tcp,
)

log = logging.getLogger("ecotone.tcp")


async def _handle(runner: Runner, stream: Any) -> None:
    lean = connection_stream(stream, runner.engine.limits)
    try:
        await FramedConnection(runner, lean, lean).run()
    except Exception:  # a bug on one connection must not take the server down
        log.exception("connection handler failed; dropping that connection")
    finally:
        await trio.aclose_forcefully(stream)


class TcpTransport:
    """Length-prefixed frames over TCP."""

    name = "tcp"
    description = "length-prefixed frames over TCP (tcp://HOST:PORT), the lean native path"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        where = Listen(host=host, port=port, scheme="tcp", refusal=frame_refusal(REFUSED))
        await serve_tcp(runner, where, lambda s: _handle(runner, s), task_status)


def _prepare_socket_path(path: str) -> str:
    """Absolute path; a stale socket left by a server that died is removed first."""
    path = os.path.abspath(path)
    if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
        os.unlink(path)
    return path


class UnixTransport:
    """Length-prefixed frames over a unix-domain socket; `host` is the socket's path."""

    name = "unix"
    description = "length-prefixed frames over a unix socket (unix:///PATH; --host is the path)"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        if not host or host in ("127.0.0.1", "localhost"):
            raise ValueError("the unix transport needs a socket path: --host /path/to.sock")
        path = _prepare_socket_path(host)
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(path)
        sock.listen(128)
        listener = trio.SocketListener(sock)
        try:
            task_status.started(f"unix://{path}")
            refusal = frame_refusal(REFUSED)

            async def handler(stream: Any) -> None:
                await guarded(runner, stream, refusal, lambda s: _handle(runner, s))

            await trio.serve_listeners(handler, [listener])
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
