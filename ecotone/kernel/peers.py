"""Who sessions belong to (`Owner`) and where answers go (`Peer`), as the engine sees them.

Rules:

* An owner is a connection, or every HTTP request showing one token. Sessions belong to it;
  when it goes, they close. It is `authenticated` once it showed one of the server's tokens
  (or none is needed), and its `principal` says which one.
* A peer is one place answers go, in order: a connection, or one HTTP request. It counts the
  requests it has taken and not answered (`pending`): a transport stops reading at
  `limits.max_pending_requests` (`full`). Answers to a peer that has closed are dropped; its
  owner's sessions are the engine's to close (`Engine.disconnect`).
"""

from __future__ import annotations

import collections
import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, final

from ecotone.kernel.calls import Call
from ecotone.kernel.incoming import decode_request, too_large
from ecotone.kernel.limits import Limits
from ecotone.specs import Codec, Error, Request

NO_CALLS: Final[Sequence[Call]] = ()

Sink = Callable[["Peer"], Awaitable[None]]
"""How a driver writes a peer's outbox out (the engine only stores it on the peer)."""


class Dispatcher(Protocol):
    """What a peer needs of its engine."""

    limits: Limits
    errors: collections.Counter[str]
    """Error frames answered, by code."""
    touched: list[Peer]
    """Peers with a sink whose outbox became non-empty, for the driver to write."""

    def submit(self, peer: Peer, request: Request) -> Sequence[Call]: ...


@final
class Owner:
    """Who sessions belong to. `closed` once the owner is gone (its sessions are closing);
    `authenticated` once it showed the server's token (or needed none: see `Engine.owner`)."""

    __slots__ = ("authenticated", "closed", "principal")

    def __init__(self, authenticated: bool = True, principal: int | None = None) -> None:
        self.closed = False
        self.authenticated = authenticated
        self.principal = principal
        """Which of the server's tokens it showed (its number; None: no tokens)."""


def token_number(tokens: Sequence[str], given: str | None) -> int | None:
    """Which of `tokens` `given` is (its number), or None; every token is compared, in
    constant time, so the answer's timing tells nothing."""
    if not given:
        return None
    found = None
    for number, token in enumerate(tokens):
        if hmac.compare_digest(given.encode(), token.encode()):
            found = number
    return found


@final
class Peer:
    """One place answers go: a connection, or a single HTTP request. Made by `Engine.peer`.

    Answers are appended to `outbox` (encoded with `codec`, or as frames when `frames`);
    the driver takes them with `take` and writes them. `sink` is the driver's: it is called
    (by the driver, through `Engine.take_touched`) for peers whose outbox became non-empty."""

    __slots__ = (
        "__weakref__",
        "closed",
        "codec",
        "engine",
        "frames",
        "outbox",
        "owner",
        "pending",
        "sink",
    )

    def __init__(
        self, engine: Dispatcher, codec: Codec, owner: Owner, sink: Sink | None, frames: bool
    ) -> None:
        self.engine = engine
        self.codec = codec
        self.owner = owner
        self.sink = sink
        self.frames = frames
        self.outbox: list[Any] = []
        self.closed = False
        self.pending = 0
        """Requests received and not answered yet (a transport stops reading at
        `limits.max_pending_requests`)."""

    def receive(self, data: bytes | str) -> Sequence[Call]:
        """Handle one received frame; returns the calls the driver must run."""
        self.pending += 1
        engine = self.engine
        request = decode_request(self.codec, data, engine.limits.max_frame_bytes)
        if type(request) is Error:
            self.emit(request)
            return NO_CALLS
        return engine.submit(self, request)  # type: ignore[arg-type]

    def submit(self, request: Request) -> Sequence[Call]:
        """Handle one request frame built by a profile (HTTP routes, OpenEnv's messages)."""
        self.pending += 1
        return self.engine.submit(self, request)

    def too_large(self, size: int) -> None:
        """A frame was discarded unread (the transport's reader saw its size)."""
        self.pending += 1
        self.emit(too_large(size, self.engine.limits.max_frame_bytes))

    @property
    def full(self) -> bool:
        """As many requests wait for answers as the limits allow: stop reading."""
        return self.pending >= self.engine.limits.max_pending_requests

    def emit(self, frame: Any) -> None:
        """Queue an answer (a Response, or bytes already encoded)."""
        if type(frame) is Error:
            self.engine.errors[frame.code] += 1
        if self.closed:
            return
        self.pending -= 1
        if not self.outbox and self.sink is not None:
            self.engine.touched.append(self)
        if not self.frames and type(frame) is not bytes:
            frame = self.codec.encode(frame)
        self.outbox.append(frame)

    def take(self) -> list[Any]:
        """Everything answered so far, in order, and empty the outbox."""
        out, self.outbox = self.outbox, []
        return out

    def close(self) -> None:
        """The place answers went is gone: later answers are dropped (sessions are the
        owner's: `Engine.disconnect` closes them)."""
        self.closed = True
        self.outbox = []
