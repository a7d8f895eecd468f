"""The `stdio` transport: length-prefixed frames on standard input and output.

`ecotone serve ENV --transport stdio` serves one connection on stdin/stdout, logs only to
stderr, and exits cleanly when stdin closes. This is how a client reaches an env in a
subprocess or in a container started with `-i` and no network at all:
`ecotone.connect("stdio:ENV")`, or `ecotone.connect("stdio:podman run -i --rm IMAGE")`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import trio

from ecotone.server.framed import FramedConnection
from ecotone.server.runner import Runner


class StdioTransport:
    """Serves one connection on stdin/stdout."""

    name = "stdio"
    description = "length-prefixed frames on stdin/stdout (stdio:ENV; for subprocesses, -i)"

    async def serve(
        self, runner: Runner, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        # Our own descriptors: nothing else in the process may write frames to stdout, and
        # a stray print() must not corrupt the stream, so stdout now points at stderr.
        stdin_fd = os.dup(0)
        stdout_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        receive = trio.lowlevel.FdStream(stdin_fd)
        send = trio.lowlevel.FdStream(stdout_fd)
        task_status.started("stdio:")
        try:
            await FramedConnection(runner, receive, send, guard=False).run()
        finally:
            with trio.CancelScope(shield=True):
                await receive.aclose()
                await send.aclose()
