"""One HTTP/1.1 connection: requests answered in order until it ends or asks to upgrade.

`serve_http` is the loop (read a request, route it, write the answer, again); what routes
a request is the transport's (`handle`), and a WebSocket upgrade is returned to the
transport, not served here, so this package imports no transport. `guarded_connection` is
the wrapper every HTTP transport's connection handler runs in.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ecotone.server.http11.asgi import Streamed, serve_asgi
from ecotone.server.http11.reader import RequestReader, Upgrade
from ecotone.server.runner import Runner
from ecotone.server.sockets import peer_address
from ecotone.specs.http import HttpRequest, HttpResponse

log = logging.getLogger("ecotone.http")

Handle = Callable[[HttpRequest], Awaitable[HttpResponse | Streamed]]
"""A transport's routes: the answer to one request."""


async def serve_http(runner: Runner, stream: trio.abc.Stream, handle: Handle) -> Upgrade | None:
    """Answer the requests of one connection, in order, until it ends (None) or a request
    asks to switch to WebSocket (that `Upgrade` is returned: the caller serves the socket).
    A refusal is written and ends the connection; so does an answer to a request that asked
    for it (`HttpRequest.must_close`) or an answer that says so (`HttpResponse.close`)."""
    reader = RequestReader(
        stream, runner.admission, runner.engine.limits.max_frame_bytes, peer_address(stream)
    )
    while True:
        got = await reader.next()
        if isinstance(got, HttpRequest):
            answer = await handle(got)
            if isinstance(answer, HttpResponse):
                close = got.must_close
                await stream.send_all(answer.serialize(head=got.method == "HEAD", close=close))
                if close or answer.close:
                    return None
            elif not await serve_asgi(answer.app, got, stream, reader.conn):  # Streamed
                return None
            reader.next_cycle()
        elif isinstance(got, HttpResponse):  # a refusal: written, then the connection ends
            await stream.send_all(got.serialize())
            return None
        else:
            return got  # an Upgrade, or None: the client left


async def guarded_connection(stream: Any, body: Callable[[Any], Awaitable[None]]) -> None:
    """Run `body(stream)` for one connection: a client that goes away (a broken or closed
    stream) ends it quietly, a bug is logged and ends only this connection, and the stream
    is closed in any case."""
    try:
        await body(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:  # a bug on one connection must not take the server down
        log.exception("HTTP connection handler failed; dropping that connection")
    finally:
        await trio.aclose_forcefully(stream)
