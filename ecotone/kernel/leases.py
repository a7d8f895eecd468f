"""Leases: how long a session, or a seat, stays its client's with nothing from it.

One rule reclaims, for every session on every transport and for every seat:

* **A lease, renewed by activity.** Every session is held by a lease of `limits.lease`
  seconds. Each request about it renews it (when it starts, and again when it is answered),
  as does a `keepalive` naming it (`renew`). A seat a connection took with `join` is leased
  the same way, renewed by its holder's requests about the session, by the answer to its
  waiting `observe`, and by a `keepalive` naming the session or the seat's key.
* **Reclaimed once it ran out, idle.** At each sweep (`Engine.expire`, every `sweep`
  seconds), a session whose lease ran out is closed (reason `lease`), and a seat whose lease
  ran out is released (the env's `seat_lost` rule applies: `seating.py`). A busy session (a
  call in flight, requests queued) and a seat whose holder waits for its turn are never
  reclaimed: the server is working for the client, and the answer renews the lease. So a
  session is reclaimed at most one sweep after its lease ran out.
* **Whatever happened to the client.** A killed client's connection ends, and its sessions
  close at once (its seats stay held for the rest of their lease, for the same key to take
  back). A frozen one (SIGSTOP), or one cut off (a partition: no FIN, no RST), sends nothing,
  and loses its sessions to the lease, whatever the transport: its kernel may still
  acknowledge every byte, so only the client's own requests count, never its TCP stack.

Loose sessions are the one case with a shorter lease. OpenEnv's HTTP routes hold nothing
between requests, and most of its clients never send back the session id a reset answers
with. A session opened for such a request (a reset naming no session) is *leased* to the
client's address: it is *loose* until a request names it (`claim`), and its lease is
`limits.stateless_grace` until then (reclaimed with reason `unclaimed`). Kept here, so
that every face that opens sessions this way keeps the same rules:

* A client (an address, under one owner) keeps at most `LOOSE_KEPT` loose sessions: before
  another is opened for it, its oldest past `LOOSE_KEPT - 1` are closed (`room`).
* A client holds at most `limits.max_http_sessions_per_client` leased sessions, loose or
  claimed: past that, `room` says why no other is opened.
* When the server is full, the client's own loose sessions are the ones its new request
  replaces (`crowd`).

The table is sans-IO like the engine: time is passed in, and closing is the engine's
(`Engine.expire` closes what `due` returns, `Engine.make_room` what `room` and `crowd` do).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, Final, final

from ecotone.kernel.sessions import Session

LOOSE_KEPT: Final = 4
"""Loose sessions one client keeps: its next one closes the oldest past these (a client that
never sends the id back replaces its episode with each reset)."""

GONE_KEPT: Final = 4096
"""Reclaimed session ids remembered, so a request naming one hears why it is gone."""


def sweep_period(*spans: float | None) -> float | None:
    """Seconds between two sweeps that keep every lease of `spans` within one sweep of its
    end: a quarter of the shortest, 50 ms to 5 s; None when nothing is ever reclaimed."""
    given = [s for s in spans if s is not None]
    return max(0.05, min(min(given) / 4, 5.0)) if given else None


@final
class Leases:
    """Every lease of a server: the rule that reclaims, and the loose sessions per client."""

    def __init__(self, length: float | None, grace: float, per_client: int) -> None:
        self.length = length
        """Seconds a lease lasts (`limits.lease`; None: never reclaimed)."""
        self.grace = grace
        """Seconds a loose session lives unless claimed (`limits.stateless_grace`)."""
        self.per_client = per_client
        """Leased sessions one client may hold (`limits.max_http_sessions_per_client`)."""
        self.sweep = sweep_period(length, grace)
        """Seconds between two sweeps (None: no sweep is needed)."""
        self.reclaimed = 0
        """Sessions reclaimed (their lease ran out), loose ones included."""
        self.seats_reclaimed = 0
        """Seats released as their lease ran out."""
        self._loose: collections.OrderedDict[Session, None] = collections.OrderedDict()
        """Loose sessions, oldest first."""
        self._held: collections.Counter[tuple[object, str]] = collections.Counter()
        """Leased sessions still open, per (owner, client)."""
        self._gone: collections.OrderedDict[str, str] = collections.OrderedDict()
        """The last `GONE_KEPT` sessions reclaimed: id -> why."""

    # --- the rule -----------------------------------------------------------------------------

    def term(self, session: Session) -> float | None:
        """How long `session`'s lease lasts: `grace` while it is loose, else `length`."""
        return self.grace if session in self._loose else self.length

    def due(self, sessions: Iterable[Session], now: float) -> list[tuple[Session, str]]:
        """The sessions whose lease ran out by `now` and that are idle, each with the reason
        it is closed for (`lease`, or `unclaimed` for a loose one)."""
        out: list[tuple[Session, str]] = []
        length, loose = self.length, self._loose
        for session in sessions:
            if session.active is not None or session.queue:
                continue
            if session in loose:
                if now - session.last_used >= self.grace:
                    out.append((session, "unclaimed"))
            elif length is not None and now - session.last_used >= length:
                out.append((session, "lease"))
        return out

    def seats_due(self, seating: Any, now: float) -> list[str]:
        """The seats of `seating` (a `SeatTable`) taken with `join` whose lease ran out by
        `now`: not renewed for `length`, and no `observe` of their holder waiting."""
        length = self.length
        if length is None:
            return []
        waiting = {(w.seat, w.peer.owner) for w in seating.waiters if not w.peer.closed}
        out = []
        for seat, renewed in seating.renewed.items():
            if now - renewed < length:
                continue
            holder = seating.holders.get(seat)
            if holder is not None and (seat, holder) in waiting:
                continue
            out.append(seat)
        return out

    def reclaiming(self, session: Session, reason: str) -> None:
        """`session` is closed as its lease ran out: counted, and remembered as gone."""
        self.reclaimed += 1
        gone = self._gone
        gone[session.id] = reason
        if len(gone) > GONE_KEPT:
            gone.popitem(last=False)

    def why_gone(self, session_id: str) -> str | None:
        """Why `session_id` was reclaimed (`lease`, `unclaimed`), if it was, lately."""
        return self._gone.get(session_id)

    # --- loose sessions -----------------------------------------------------------------------

    def lease(self, session: Session, client: str, now: float) -> None:
        """`session` was just opened for `client`: counted for it, loose until claimed, its
        lease `grace` seconds from `now`."""
        session.client = client
        session.last_used = now
        self._held[session.owner, client] += 1
        self._loose[session] = None

    def claim(self, session: Session) -> None:
        """A request named `session`: it is no longer loose (still counted for its client)."""
        self._loose.pop(session, None)

    def is_loose(self, session: Session) -> bool:
        return session in self._loose

    @property
    def loose(self) -> int:
        """Loose sessions now."""
        return len(self._loose)

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
