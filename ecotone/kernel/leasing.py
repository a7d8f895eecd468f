"""Leases: the engine's part for them (`keepalive`, the sweep, loose sessions).

The rule is `leases.py`'s; this part applies it. Rules kept here:

* **One sweep** (`expire`, every `expiring()` seconds) reclaims what the rule says: sessions
  whose lease ran out, idle (closed, reason `lease`, or `unclaimed` for a loose one), and
  seats whose lease ran out (released: `seating.py` applies the env's `seat_lost` rule).
  Nothing else closes a session for lack of activity.
* **`keepalive`** renews, and answers at once (it waits behind no request of the sessions it
  names). A session named is renewed when this connection may act in it, or when a
  connection showing the same token owns it (on a server without tokens, any: the id is the
  capability to renew, never to act), with the seats this connection holds there; a seat key
  renews its seat while it is held. What renewed nothing is listed in `kept`'s `unknown`.
* **A request naming a session reclaimed lately** is answered `unknown_session` saying so
  (the last `GONE_KEPT` reclaimed ids are remembered), so a client that woke up after its
  lease knows what happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ecotone.kernel import answers
from ecotone.kernel.calls import Call
from ecotone.kernel.core import EngineCore, log
from ecotone.kernel.sessions import Session
from ecotone.specs import Error, Keepalive, Kept
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Owner, Peer


class Leasing(EngineCore):
    """The engine's part for leases (see the module's rules)."""

    def expire(self) -> Sequence[Call]:
        """Reclaim what the lease rule says (`leases.py`): close the sessions whose lease ran
        out while idle, release the seats whose lease ran out; and play the simultaneous
        rounds past their deadline (`rounds.py`: the driver calls this at `wake_at` too).
        Returns the calls to run."""
        jobs: list[Call] = []
        now = self.clock()
        leases = self.leases
        self.release_seats(now)
        self.rounds_due(now, jobs)
        for session, reason in leases.due(self.sessions, now):
            log.info(
                "reclaiming session %s (%s): its lease ran out (%s)",
                session.id,
                session.spec.name,
                reason,
            )
            leases.reclaiming(session, reason)
            self._retire(session, reason, jobs)
        self._drain(jobs)
        return jobs

    def expiring(self) -> float | None:
        """Seconds between two sweeps (`expire`): a quarter of the shorter lease (`lease`,
        `stateless_grace`), 50 ms to 5 s; None when nothing is ever reclaimed."""
        return self.leases.sweep

    def gone(self, session_id: str, rid: RequestId | None) -> Error:
        """The `unknown_session` answer to a request naming `session_id`, saying when the
        server reclaimed it lately."""
        why = self.leases.why_gone(session_id)
        if why is None:
            return answers.unknown_session(session_id, rid)
        term = self.leases.grace if why == "unclaimed" else self.leases.length
        return answers.unknown_session(session_id, rid, why, term)

    # --- keepalive ----------------------------------------------------------------------------

    def _keepalive(self, peer: Peer, req: Keepalive) -> Kept:
        now = self.clock()
        owner = peer.owner
        unknown: list[str] = []
        for session_id in req.sessions:
            session = self.sessions.find(session_id)
            if session is None or not self.may_renew(owner, session):
                unknown.append(session_id)
                continue
            session.last_used = now
            if session.seating is not None:
                self.renew_seats(session, owner, now)
        unknown.extend(key for key in req.seats if not self.renew_seat(key, now))
        return Kept(id=req.id, unknown=unknown, lease=self.leases.length)

    def may_renew(self, owner: Owner, session: Session) -> bool:
        """Whether a `keepalive` of `owner` renews `session`: it may act in it (its owner, a
        guest, a seat's holder or a spectator), the same token's connection owns it, or the
        server has no tokens (the id is the capability to renew)."""
        if session.owner is owner or not self.tokens:
            return True
        if session.guests is not None and owner in session.guests:
            return True
        principal = owner.principal
        if principal is not None and principal == getattr(session.owner, "principal", None):
            return True
        return self.seated_session(session.id, owner) is not None

    # --- sessions leased to a client (leases.py) -----------------------------------------------

    def lease(self, owner: Owner, session_id: str, client: str) -> None:
        """The session `owner` just opened for `client` (an address) is loose: reclaimed
        after `stateless_grace` unless a request names it first (`claim`)."""
        session = self.sessions.get(session_id, owner)
        if session is not None:
            self.leases.lease(session, client, self.clock())

    def claim(self, owner: Owner, session_id: str) -> bool:
        """A request of `owner` named the session: it is no longer loose. Whether it is open."""
        session = self.sessions.get(session_id, owner)
        if session is None:
            return False
        self.leases.claim(session)
        return True

    def make_room(
        self, owner: Owner, client: str, *, full: bool = False
    ) -> tuple[bool, Sequence[Call]]:
        """Before a session is opened for `client` of `owner`: close its loose sessions past
        the few it keeps (all of them when the server is `full`), reason `replaced`.
        Returns whether it may then have another (it holds fewer than
        `max_http_sessions_per_client`), and the closes for the driver to run."""
        if full:
            replaced, allowed = self.leases.crowd(owner, client), True
        else:
            replaced, allowed = self.leases.room(owner, client)
        jobs: list[Call] = []
        for session in replaced:
            self.leases.claim(session)
            self._retire(session, "replaced", jobs)
        self._drain(jobs)
        return allowed, jobs
