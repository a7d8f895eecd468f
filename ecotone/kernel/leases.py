"""Loose sessions: sessions made for a client that may never name them again.

OpenEnv's HTTP routes hold nothing between requests, and most of its clients never send back
the session id a reset answers with. A session opened for such a request (a reset naming no
session) is *leased* to the client's address: it is *loose* until a request names it
(`claim`), and a loose session is closed once `limits.stateless_grace` has passed. The rules,
kept here so that every face that opens sessions this way keeps the same ones:

* A client (an address, under one owner) keeps at most `LOOSE_KEPT` loose sessions: before
  another is opened for it, its oldest past `LOOSE_KEPT - 1` are closed (`room`).
* A client holds at most `limits.max_http_sessions_per_client` leased sessions, loose or
  claimed: past that, `room` says why no other is opened.
* When the server is full, the client's own loose sessions are the ones its new request
  replaces (`crowd`).
* A claimed session lives as any other: until its owner closes it, or `idle_timeout`.

The table is sans-IO like the engine: time is passed in, and closing is the engine's
(`Engine.expire` closes what `due` returns, `Engine.make_room` what `room` and `crowd` do).
"""

from __future__ import annotations

import collections
from typing import Final, final

from ecotone.kernel.sessions import Session

LOOSE_KEPT: Final = 4
"""Loose sessions one client keeps: its next one closes the oldest past these (a client that
never sends the id back replaces its episode with each reset)."""


@final
class Leases:
    """The loose and leased sessions of a server, per client."""

    def __init__(self, grace: float, per_client: int) -> None:
        self.grace = grace
        """Seconds a loose session lives unless claimed (`limits.stateless_grace`)."""
        self.per_client = per_client
        """Leased sessions one client may hold (`limits.max_http_sessions_per_client`)."""
        self._loose: collections.OrderedDict[Session, float] = collections.OrderedDict()
        """Loose sessions, oldest first, with when their grace ends."""
        self._held: collections.Counter[tuple[object, str]] = collections.Counter()
        """Leased sessions still open, per (owner, client)."""

    def lease(self, session: Session, client: str, now: float) -> None:
        """`session` was just opened for `client`: counted for it, loose until claimed or
        `grace` seconds from `now`."""
        session.client = client
        self._held[session.owner, client] += 1
        self._loose[session] = now + self.grace

    def claim(self, session: Session) -> None:
        """A request named `session`: it is no longer loose (still counted for its client)."""
        self._loose.pop(session, None)

    def is_loose(self, session: Session) -> bool:
        return session in self._loose

    def room(self, owner: object, client: str) -> tuple[list[Session], bool]:
        """Before a session is opened for `client` of `owner`: its loose sessions to close
        first (its oldest past `LOOSE_KEPT - 1`), and whether it may then have another (it
        holds fewer than `per_client` once those are closed)."""
        mine = self._mine(owner, client)
        replaced = mine[: max(0, len(mine) - LOOSE_KEPT + 1)]
        held = self._held[owner, client] - len(replaced)
        return replaced, held < self.per_client

    def crowd(self, owner: object, client: str) -> list[Session]:
        """Every loose session of `client` of `owner` (the server is full, and it asks for
        another)."""
        return self._mine(owner, client)

    def due(self, now: float) -> list[Session]:
        """Loose sessions whose grace has passed by `now`, oldest first."""
        out = []
        for session, until in self._loose.items():
            if until > now:
                break
            out.append(session)
        return out

    def forget(self, session: Session) -> None:
        """`session` left the table: it no longer counts for its client."""
        client = session.client
        if client is None:
            return
        self._loose.pop(session, None)
        key = (session.owner, client)
        left = self._held[key] - 1
        if left > 0:
            self._held[key] = left
        else:
            del self._held[key]

    def held_by(self, owner: object, client: str) -> int:
        """Leased sessions `client` of `owner` holds."""
        return self._held[owner, client]

    def _mine(self, owner: object, client: str) -> list[Session]:
        return [s for s in self._loose if s.owner is owner and s.client == client]
