"""What every part of the engine shares: the envs it serves, its limits, its sessions, its
clock, the plugins' hooks and its counters; and how an env call is made.

The engine (`engine.py`) is composed of parts, each a module of its own: the one step path
(`stepping.py`), batches (`batches.py`), every other operation (`operations.py`). Each is a
subclass of `EngineCore`, and `Engine` joins them. A part calls another's methods only
through the names `EngineCore` declares below.

Rules kept here:

* **How a call is made** (`_make`): an `INLINE` call runs at once and is answered before
  the request's `receive` returns; any other is handed to the driver, with the deadline
  `_limit` gives it.
* **Deadlines**: an env's own `call_timeout` if it sets one, else the server's
  `limits.call_timeout`; a request may ask for less, never for more.
* **Hooks** are called only when some plugin implements them (no cost on the hot path
  otherwise); one that raises is logged and the request goes on.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ecotone.kernel import answers
from ecotone.kernel.calls import Call, Mode, OpenCall, StepCall
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.leases import Leases
from ecotone.kernel.limits import Limits
from ecotone.kernel.sessions import Session, SessionTable
from ecotone.specs import Error, ErrorCode, Reset
from ecotone.specs.frames import RequestId

if TYPE_CHECKING:
    from ecotone.kernel.peers import Peer

log = logging.getLogger("ecotone.engine")

Finisher = Callable[[Any, list[Call]], Any]
"""What turns a made call into its answer: (call, jobs) -> a response, or None."""


class EngineCore:
    """The state and the helpers every part of the engine shares."""

    checkpoints: Any
    """Where durable checkpoints go, or None (set by snapshotting.py)."""

    def __init__(
        self,
        envs: Mapping[str, EnvSpec] | EnvSpec,
        *,
        default_env: str | None = None,
        limits: Limits | None = None,
        hooks: Any = None,
        clock: Callable[[], float] = time.monotonic,
        tokens: Sequence[str] = (),
    ) -> None:
        if isinstance(envs, EnvSpec):
            envs = {envs.name: envs}
        if not envs:
            raise ValueError("an engine needs at least one environment")
        self.envs: dict[str, EnvSpec] = dict(envs)
        self.default_env = default_env or next(iter(self.envs))
        if self.default_env not in self.envs:
            raise ValueError(f"default env {self.default_env!r} is not among the served envs")
        self.limits = limits or Limits()
        self.tokens: tuple[str, ...] = tuple(tokens)
        """The bearer tokens an owner may show, any one (none: none needed); each is a
        principal, whose sessions `max_sessions_per_token` counts together."""
        self.token = self.tokens[0] if self.tokens else None
        """The first token (None: none needed)."""
        self.sessions = SessionTable(self.limits.max_sessions)
        limits = self.limits
        self.leases = Leases(
            limits.lease, limits.stateless_grace, limits.max_http_sessions_per_client
        )
        """The rule that reclaims sessions and seats, and the loose sessions (`leases.py`)."""
        self.clock = clock
        self._hooks = hooks
        self._on_opened = self._hook("ecotone_session_opened")
        self._on_closed = self._hook("ecotone_session_closed")
        self._on_step = self._hook("ecotone_step_completed")
        self._on_episode = self._hook("ecotone_episode_started")
        self._on_call = self._hook("ecotone_call_completed")
        self.touched: list[Peer] = []
        """Peers with a sink whose outbox became non-empty (`Engine.take_touched`)."""
        self._ready: collections.deque[Session] = collections.deque()
        """Sessions that became free, whose queued requests `_drain` starts."""
        self._finishers: dict[type, Finisher] = {}
        """Each kind of call's finisher, by the call's type (filled by the parts)."""
        self._begin: dict[type, Any] = {}
        """How each request on an idle session begins, by its frame type (filled by the
        parts)."""
        # What the server did, for /metrics (plain counters: nothing on the hot path but +1).
        self.errors: collections.Counter[str] = collections.Counter()
        """Error frames answered, by code."""
        self.opened_total = 0
        """Sessions opened."""
        self.steps_total = 0
        """Steps answered with an observation."""
        self.draining = False
        """The server is stopping: it admits no new session or episode (`draining.py`)."""
        self.stopping = False
        """The drain is over: every request of a session but `close` is refused, once the
        session's checkpoint is made (`draining.py`)."""

    def readiness(self) -> str | None:
        """Why the server should not be sent a new session now, or None: it has room.
        `draining` (it is stopping) or `full` (it holds `max_sessions`, slots being built
        included). What `/ready` and `ping`'s `ready` say."""
        if self.draining:
            return "draining"
        if len(self.sessions) >= self.limits.max_sessions:
            return "full"
        return None

    def _hook(self, name: str) -> Any:
        """A caller of hook `name`, or None when no plugin implements it (keeps the hot path
        free). Hooks must not raise; one that does is logged and the request goes on."""
        if self._hooks is None:
            return None
        caller = getattr(self._hooks, name, None)
        if caller is None or not caller.get_hookimpls():
            return None

        def call(**kwargs: Any) -> None:
            try:
                caller(**kwargs)
            except Exception:
                log.exception("a plugin's %s hook raised (ignored)", name)

        return call

    def _limit(self, spec: EnvSpec, asked: float | None = None) -> float | None:
        """The deadline of a call of `spec`'s env: the env's own, else the server's; a request
        may ask for less, never more."""
        limit = spec.call_timeout if spec.call_timeout is not None else self.limits.call_timeout
        if asked is not None and asked > 0 and (limit is None or asked < limit):
            return asked
        return limit

    def _spec(self, name: str | None, rid: RequestId) -> EnvSpec | Error:
        """The served env called `name` (the default one for None), or `unknown_env`."""
        spec = self.envs.get(name or self.default_env)
        if spec is None:
            return answers.error(
                ErrorCode.UNKNOWN_ENV,
                f"this server does not serve env {name!r}; it serves: {', '.join(self.envs)}",
                rid,
                env=name,
            )
        return spec

    def _make(self, call: Call, jobs: list[Call], timeout: float | None = None) -> Any:
        """Make `call` now if it is INLINE and return its answer; else return it for the
        driver, which makes it within `timeout` seconds (None: no deadline)."""
        if self._on_call is not None or self._on_step is not None:
            call.started = time.perf_counter()
        if call.mode is Mode.INLINE:
            call.run()
            return self._finish(call, jobs)
        call.timeout = timeout
        return call

    def _finish(self, call: Call, jobs: list[Call]) -> Any:
        """A made call's answer (its kind's finisher), told to `ecotone_call_completed`."""
        if call.started and self._on_call is not None and type(call) is not StepCall:
            self._timed(call)  # steps have their own hook
        return self._finishers[type(call)](call, jobs)

    def _timed(self, call: Call) -> None:
        """Tell `ecotone_call_completed` how long an env call (not a step) took."""
        session = call.session
        if type(call) is OpenCall:
            spec = call.spec
        elif session is not None:
            spec = session.spec
        else:  # an env nobody holds, closed
            return
        self._on_call(
            session_id=None if session is None else session.id,
            env=spec.name,
            op=call.op,
            duration_s=time.perf_counter() - call.started,
        )

    def _remove(self, session: Session) -> None:
        """`session` leaves the table (CLOSED, its slot free, no longer leased); what was
        queued behind it learns, when it is next pumped, that it is gone."""
        self.sessions.remove(session)
        self.leases.forget(session)
        self._ready.append(session)

    # --- parts of the engine defined by the classes that compose it --------------------------

    def _begin_reset(self, session: Session, peer: Peer, req: Reset, jobs: list[Call]) -> Any:
        """A reset on its idle session (operations.py)."""
        raise NotImplementedError

    def _outcome(self, session: Session, peer: Peer, request: Any, jobs: list[Call]) -> Any:
        """What a request on its idle session comes to (engine.py)."""
        raise NotImplementedError

    def _retire(self, session: Session, reason: str, jobs: list[Call], quiet: bool = False) -> None:
        """Close a session no request asked to close (engine.py)."""
        raise NotImplementedError

    def _drain(self, jobs: list[Call]) -> None:
        """Start what waits on the sessions that became free (engine.py)."""
        raise NotImplementedError

    def resume_key(self, session: Session) -> str | None:
        """A new resume key for `session`, on a server that keeps checkpoints
        (snapshotting.py)."""
        raise NotImplementedError

    def refuse_new(self, kind: type, rid: RequestId, session: str | None) -> Error | None:
        """A draining server's refusal of a request that starts a session or an episode
        (draining.py), or None."""
        raise NotImplementedError

    def gone(self, session_id: str, rid: RequestId | None) -> Error:
        """The `unknown_session` answer to a request naming `session_id` (leasing.py)."""
        raise NotImplementedError

    def reset_seats(
        self, session: Session, why: str = "the episode was reset", kind: str = "reset"
    ) -> None:
        """A multi-agent session's reset (or restore: `why`, `kind`) was answered
        (seating.py)."""
        raise NotImplementedError

    def log_seats(
        self, session: Session, kind: str, mover: str | None, actions: dict[str, Any]
    ) -> None:
        """Keep a multi-agent session's event in its log (seating.py)."""
        raise NotImplementedError

    def seats_moved(self, session: Session) -> None:
        """A multi-agent session's reset, move or round happened (seating.py)."""
        raise NotImplementedError

    def waiting_for(self, session: Session) -> list[str]:
        """The seats whose move a multi-agent session waits for now (rounds.py)."""
        raise NotImplementedError

    def round_move(
        self, session: Session, peer: Peer, req: Any, seat: str, action: Any, jobs: list[Call]
    ) -> Any:
        """A simultaneous env's move, kept for its round or making it (rounds.py)."""
        raise NotImplementedError

    def drop_round(self, session: Session, why: str, closed: bool = False) -> None:
        """Answer the moves kept for a round that will not be played (rounds.py)."""
        raise NotImplementedError

    def round_overdue(self, session: Session, jobs: list[Call]) -> None:
        """Play a free session's round whose deadline passed while it was busy (rounds.py)."""
        raise NotImplementedError

    def round_timed_out(self, call: Any, answer: Any) -> None:
        """Answer every move of a round past its call's deadline (rounds.py)."""
        raise NotImplementedError

    def rounds_due(self, now: float, jobs: list[Call]) -> None:
        """Play the rounds whose deadline passed (rounds.py)."""
        raise NotImplementedError

    def forget_checkpoint(self, session: Session, jobs: list[Call]) -> None:
        """Remove a closed session's checkpoint (snapshotting.py)."""
        raise NotImplementedError

    def resumable(self, session: Session) -> bool:
        """Whether a checkpoint of `session` could be resumed (snapshotting.py)."""
        raise NotImplementedError

    def checkpoint_now(self, session: Session, jobs: list[Call]) -> None:
        """Start a checkpoint of the idle `session` nobody asked for (snapshotting.py)."""
        raise NotImplementedError

    def release_seats(self, now: float) -> None:
        """Release the seats whose lease ran out (seating.py)."""
        raise NotImplementedError

    def renew_seats(self, session: Session, owner: Any, now: float) -> None:
        """Renew the leases of the seats `owner` holds in `session` (seating.py)."""
        raise NotImplementedError

    def renew_seat(self, key: str, now: float) -> bool:
        """Renew the lease of the seat `key` gives, if it is held (seating.py)."""
        raise NotImplementedError

    def seated_session(self, session_id: str, owner: Any) -> Session | None:
        """The open session where `owner` holds a seat or spectates (seating.py)."""
        raise NotImplementedError
