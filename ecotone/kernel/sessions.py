"""Sessions and the table that holds them.

A session is one env instance owned by one connection. Its phase follows the table in
`states.py`: FRESH until a reset's observation, RUNNING while the episode runs, ENDED once an
observation ended it, BROKEN when a call outlived its deadline (its env instance is set aside,
closed once the call ends, and `env` is None until a reset makes a fresh one), CLOSED once it
left the table.

A session also carries its place in the protocol's ordering (`queue`, `active`): the engine
(`ecotone.kernel.engine`) runs one of its requests at a time, in arrival order, and keeps the
rest queued here.

The table enforces the capacity limit. It never closes envs itself (closing may block or
await): the engine does, and which idle sessions it reclaims is the lease rule's
(`leases.py`).
Time is passed in, never read, so the table is deterministic under test.
"""

from __future__ import annotations

import collections
import secrets
from collections.abc import Iterator
from typing import Any

import attrs

from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.states import Event, Phase, advance


class CapacityError(Exception):
    """The table is full, for the whole server, for one owner (`per_owner`) or for one token
    (`per_token`)."""

    def __init__(
        self, active: int, limit: int, per_owner: bool = False, per_token: bool = False
    ) -> None:
        if per_owner:
            text = (
                f"this connection holds {active} of the {limit} sessions one connection may "
                "hold (max_sessions_per_connection)"
            )
        elif per_token:
            text = (
                f"this token holds {active} of the {limit} sessions one token may hold "
                "(max_sessions_per_token)"
            )
        else:
            text = f"server is at capacity: {active} of {limit} sessions are open"
        super().__init__(text)
        self.active = active
        self.limit = limit
        self.per_owner = per_owner
        self.per_token = per_token


GUEST_STEPS_KEPT = 1024
"""Observations of guest steps a shared session keeps for its owner, at most..."""
GUEST_BYTES_KEPT = 16 << 20
"""...and at most this many bytes of them (the oldest go first)."""


@attrs.define(slots=True, eq=False)
class Session:
    """One env instance and its bookkeeping. Mutable; owned by the kernel."""

    id: str
    spec: EnvSpec
    env: Any
    owner: object
    last_used: float
    """When its lease was last renewed (`leases.py`): its last request began or was answered,
    or a `keepalive` named it."""
    phase: Phase = Phase.FRESH
    active: Any = None
    """What the session is doing: an env call in flight, or a `step_many` batch holding it
    until the batch is answered. None when idle."""
    queue: collections.deque[Any] | None = None
    """Requests waiting for the session, in arrival order (None until one has to wait)."""
    closing: str | None = None
    """Why the session is to be closed as soon as its active call ends (disconnect, shutdown);
    None when it is not."""
    guests: set[object] | None = None
    """Owners that were given this session's share key (None until one is)."""
    share_key: str | None = None
    guest_steps: collections.deque[tuple[Any, bytes]] | None = None
    """The last guest steps' observations (`SharedSteps`), oldest first: each as the bytes
    its guest was answered, with the codec that made them (the owner may use another)."""
    guest_bytes: int = 0
    guest_count: int = 0
    """Guest steps so far: the number the next one gets."""
    task: Any = None
    """The TaskRef of the episode's task (envs that publish tasks), set by its reset."""
    client: str | None = None
    """The client address the session was leased to (`leases.py`), or None."""
    observation: Any = None
    """The last observation the session's episode gave (a reset's or a step's): what a
    snapshot saves for the client that resumes it."""
    forked_from: str | None = None
    """The episode this session's was forked from, if it was."""
    resume_key: str | None = None
    """The key its checkpoints are kept under, on a server that keeps them."""
    stop_checkpoint: int = 0
    """While the server stops (`draining.py`): 1, its checkpoint is due; 2, it was made (or
    begun: the session is held until the file is in place); 0, neither."""
    seating: Any = None
    """Who sits where, in a multi-agent session (`seats.Seating`; None until asked)."""

    def record_guest_step(self, codec: Any, encoded: bytes) -> None:
        kept = self.guest_steps
        if kept is None:
            kept = self.guest_steps = collections.deque()
        kept.append((codec, encoded))
        self.guest_bytes += len(encoded)
        self.guest_count += 1
        while len(kept) > GUEST_STEPS_KEPT or (self.guest_bytes > GUEST_BYTES_KEPT and kept):
            self.guest_bytes -= len(kept.popleft()[1])

    @property
    def closed(self) -> bool:
        """It left the table."""
        return self.phase is Phase.CLOSED

    def enqueue(self, item: Any) -> None:
        """A request (or a batch's item) waits for the session, after those before it."""
        queue = self.queue
        if queue is None:
            queue = self.queue = collections.deque()
        queue.append(item)

    @property
    def busy(self) -> bool:
        """Something is running or waiting: a busy session is never reaped."""
        return self.active is not None or bool(self.queue)


@attrs.define(slots=True)
class SessionTable:
    """All open sessions of a server, with a capacity limit."""

    max_sessions: int
    _sessions: dict[str, Session] = attrs.field(factory=dict, init=False)
    _reserved: int = attrs.field(default=0, init=False)
    _held: dict[object, int] = attrs.field(factory=dict, init=False)
    _by_token: dict[int, int] = attrs.field(factory=dict, init=False)
    """Sessions (and reserved slots) per token (owners' `principal`), when tokens are set."""
    _shared: dict[str, Session] = attrs.field(factory=dict, init=False)
    """Sessions (and reserved slots) per owner."""

    def __len__(self) -> int:
        return len(self._sessions) + self._reserved

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def reserve(
        self, owner: object, per_owner: int | None = None, per_token: int | None = None
    ) -> None:
        """Claim a slot for `owner` before building an env (construction may be slow).
        Raises CapacityError when the table is full, `owner` holds `per_owner` already, or
        its token (`owner.principal`) holds `per_token`. Every reserve is followed by `add`
        or `release` for the same owner."""
        if len(self) >= self.max_sessions:
            raise CapacityError(len(self), self.max_sessions)
        held = self._held.get(owner, 0)
        if per_owner is not None and held >= per_owner:
            raise CapacityError(held, per_owner, per_owner=True)
        token = getattr(owner, "principal", None)
        if token is not None:
            by_token = self._by_token.get(token, 0)
            if per_token is not None and by_token >= per_token:
                raise CapacityError(by_token, per_token, per_token=True)
            self._by_token[token] = by_token + 1
        self._held[owner] = held + 1
        self._reserved += 1

    def release(self, owner: object) -> None:
        """Give back a reserved slot whose env could not be built."""
        self._reserved -= 1
        self._drop(owner)

    def _drop(self, owner: object) -> None:
        held = self._held.get(owner, 0) - 1
        if held > 0:
            self._held[owner] = held
        else:
            self._held.pop(owner, None)
        token = getattr(owner, "principal", None)
        if token is not None:
            left = self._by_token.get(token, 0) - 1
            if left > 0:
                self._by_token[token] = left
            else:
                self._by_token.pop(token, None)

    def held_by_token(self, token: int) -> int:
        """Sessions the owners of token number `token` hold."""
        return self._by_token.get(token, 0)

    def held_by(self, owner: object) -> int:
        """Sessions `owner` holds (its slots being built included)."""
        return self._held.get(owner, 0)

    def add(self, spec: EnvSpec, env: Any, owner: object, now: float) -> Session:
        """Turn `owner`'s reserved slot into a session with a fresh random id."""
        self._reserved -= 1
        session_id = secrets.token_hex(8)
        while session_id in self._sessions:
            session_id = secrets.token_hex(8)
        session = Session(id=session_id, spec=spec, env=env, owner=owner, last_used=now)
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str, owner: object) -> Session | None:
        """The session, if it is open and belongs to `owner` (a connection sees only its own)."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.owner is not owner and (session.guests is None or owner not in session.guests):
            return None
        return session

    def idle_own(self, session_ids: list[str], owner: object) -> list[Session] | None:
        """The sessions, in order, when each is open, `owner`'s own (not shared), of one env
        and idle; else None (one pass: the `step_columns` fast path's lookup)."""
        sessions = self._sessions
        out: list[Session] = []
        append = out.append
        spec = None
        for session_id in session_ids:
            session = sessions.get(session_id)
            if (
                session is None
                or session.owner is not owner
                or session.guests is not None
                or session.active is not None
                or session.queue
            ):
                return None
            if session.spec is not spec:
                if spec is not None:
                    return None
                spec = session.spec
            append(session)
        return out

    def get_many(self, session_ids: list[str], owner: object) -> list[Session | None]:
        """`get` for each id, in order (one call for a whole `step_many`)."""
        sessions = self._sessions
        found = [sessions.get(session_id) for session_id in session_ids]
        return [
            s
            if s is not None and (s.owner is owner or (s.guests is not None and owner in s.guests))
            else None
            for s in found
        ]

    def remove(self, session: Session) -> None:
        """`session` leaves the table (CLOSED), freeing its slot."""
        if session.closed:
            return
        advance(session, Event.CLOSED)
        if session.share_key is not None:
            self._shared.pop(session.share_key, None)
        if self._sessions.pop(session.id, None) is not None:
            self._drop(session.owner)

    def share(self, session: Session) -> str:
        """The key that lets another owner act in `session` (made once, then the same)."""
        if session.share_key is None:
            session.share_key = secrets.token_urlsafe(24)
            self._shared[session.share_key] = session
        return session.share_key

    def attach(self, key: str, guest: object) -> Session | None:
        """Let `guest` act in the session shared with `key`; None for a key unknown (or of
        a session closed since)."""
        session = self._shared.get(key)
        if session is None or session.closed:
            return None
        if session.guests is None:
            session.guests = set()
        session.guests.add(guest)
        return session

    def detach(self, guest: object) -> None:
        """`guest` is gone: it no longer visits any session (they stay open)."""
        for session in self._shared.values():
            if session.guests is not None:
                session.guests.discard(guest)

    def owned_by(self, owner: object) -> list[Session]:
        return [s for s in self._sessions.values() if s.owner is owner]

    def find(self, session_id: str) -> Session | None:
        """The open session `session_id`, whoever owns it (for `keepalive`, which may renew
        another connection's: `Engine.may_renew` says whose)."""
        return self._sessions.get(session_id)
