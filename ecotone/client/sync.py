"""The blocking client: `ecotone.connect(url)`.

Calls go straight through a blocking socket (no event loop, no background thread), which is
what makes one-session stepping fast. The code, `connect` included, is generated from the
async client's (`ecotone/client/_sync/connection.py`, from `_async/connection.py`); this
module is its public face, plus `poll_any`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecotone.client._sync import io
from ecotone.client._sync.connection import (
    CLOSE_TIMEOUT,
    Connection,
    EnvClient,
    connect,
)
from ecotone.client._sync.exchange import DEFAULT_TIMEOUT
from ecotone.client.errors import ConnectionLost
from ecotone.specs import Response


class _Waiting:
    """A connection as `io.read_some` takes it (a vector env's link: `conn`), and its place."""

    __slots__ = ("conn", "index")

    def __init__(self, index: int, conn: Connection) -> None:
        self.index = index
        self.conn = conn


def _closed(conn: Connection) -> list[Response] | ConnectionLost:
    """What a closed connection still has: answers read before it closed, else why nothing
    more will come."""
    try:
        answers = conn.poll_once(0.0)
    except ConnectionLost as exc:
        return exc
    return answers or ConnectionLost(f"the connection to {conn.url} is closed")


def poll_any(
    connections: Sequence[Connection], deadline: float | None = None
) -> list[tuple[int, list[Response] | ConnectionLost]]:
    """Wait for answers on any of `connections` to requests sent with `Connection.send`:
    until at least one has something to read, or `deadline` (a `time.monotonic()` value)
    passes. Returns, for each connection read, its index in `connections` and its answers
    (possibly none: a read may bring only a late answer, which is dropped), or the
    `ConnectionLost` that ended it; nothing when the deadline passed.

    One `select` over their sockets, spinning first as every wait of this client does
    (`$ECOTONE_BUSY_POLL_US`); one connection is simply polled. EnvPool's loop over several
    servers: `send` to each, `poll_any`, send again to whichever answered."""
    gone = [(i, _closed(conn)) for i, conn in enumerate(connections) if conn.closed]
    if gone:  # closed while a request was in flight: nothing will come
        return gone
    if len(connections) == 1:
        try:
            return [(0, connections[0].poll(deadline))]
        except TimeoutError:
            return []
        except ConnectionLost as exc:
            return [(0, exc)]
    fds = [conn.fileno() for conn in connections]
    got: list[tuple[int, list[Response] | ConnectionLost]] = []
    if None in fds:  # a channel without a socket (HTTP, inproc): each read in turn, briefly
        waiting = [_Waiting(index, conn) for index, conn in enumerate(connections)]
        io.read_some(waiting, deadline, lambda link, answers: got.append((link.index, answers)))
        return got
    for fd in io.wait_readable(fds, deadline):  # type: ignore[arg-type]
        index = fds.index(fd)
        try:
            got.append((index, connections[index].poll_once()))
        except ConnectionLost as exc:
            got.append((index, exc))
    return got


__all__ = [
    "CLOSE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Connection",
    "EnvClient",
    "connect",
    "poll_any",
]
