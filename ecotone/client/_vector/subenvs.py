"""The vector core's state: links, sub-envs, the requests in flight, what a call waits for.

A link is one server URL and the connection its sub-envs share; a sub-env is one session. The
records are plain (`__slots__`, no logic beyond their own bookkeeping): the core decides.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ecotone.client._vector.failures import Failure
from ecotone.client.errors import ConnectionLost
from ecotone.client.results import StepResult


class FrameKind(enum.StrEnum):
    """What an `InFlight` frame asks.

    The value is the frame's op, and is what timeout messages name.
    """

    HELLO = "hello"
    OPEN = "open"
    CLOSE = "close"
    RESET = "reset"
    STEP = "step"
    STEP_MANY = "step_many"
    """A batched step: a `step_many` frame, or a `step_columns` where the server takes it."""


class Verb(enum.StrEnum):
    """What a call asked of one sub-env (a `SubOutcome`'s `kind`)."""

    STEP = "step"
    """Step it (or reset it instead, when its episode is over: its `action` is then None)."""
    RESET = "reset"
    RESTART = "restart"
    """Open a new session for it, then reset it."""
    OPEN = "open"


def pipelines(url: str) -> bool:
    """Tell whether a connection to `url` carries several requests at once.

    Args:
        url: The server's URL.

    Returns:
        False for HTTP and OpenEnv's profile, which carry one at a time.
    """
    return not url.startswith(("http:", "https:", "openenv+"))


class Link:
    """One server URL: the connection its sub-envs share, and the requests in flight on it.

    Args:
        index: Its place among the vector env's URLs.
        url: The server's URL.
    """

    __slots__ = (
        "columns",
        "conn",
        "down",
        "folds_resets",
        "index",
        "inflight",
        "members",
        "outbox",
        "pipelines",
        "positions",
        "roster",
        "stride",
        "unanswered",
        "url",
    )

    def __init__(self, index: int, url: str) -> None:
        self.index = index
        self.url = url
        self.conn: Any = None
        self.pipelines = pipelines(url)
        """HTTP carries one request at a time: frames wait in the outbox for the answer."""
        self.outbox: collections.deque[Any] = collections.deque()
        self.inflight: dict[Any, InFlight] = {}
        self.unanswered = 0
        self.down: ConnectionLost | None = None  # why the link is down, when it is
        self.folds_resets = False
        """Its server takes resets inside `step_many` (its `welcome` lists the feature)."""
        self.columns = False
        """Its server takes `step_columns` (its `welcome` lists the feature): a batched
        step goes as one, not as a `step_many`."""
        self.members: list[Sub] = []
        """Its sub-envs, in index order (they never move to another link)."""
        self.positions: list[int] = []
        """Their indices, in the same order."""
        self.roster: list[str] | None = None
        """Its sub-envs' session ids, in order, while every one is open on `conn` (None: not
        known). Whatever opens, loses or reopens a session of the link clears it."""
        self.stride: slice | None = None
        """`positions` as a slice of the vector's indices, when they are one (round robin
        over distinct URLs): a column of results is laid out with one slice assignment."""

    @property
    def alive(self) -> bool:
        """Whether it has a connection, and that connection is open."""
        return self.conn is not None and not self.conn.closed


class Sub:
    """One sub-env: its session, its last observation and what it needs next.

    Args:
        index: The sub-env's index.
        link: The link (server) its session lives on.
    """

    __slots__ = (
        "busy",
        "conn",
        "index",
        "link",
        "lost",
        "needs_reset",
        "obs",
        "outcome",
        "resume_key",
        "sent",
        "session",
    )

    def __init__(self, index: int, link: Link) -> None:
        self.index = index
        self.link = link
        self.conn: Any = None  # the connection its session lives on
        self.session: str | None = None
        self.resume_key: str | None = None
        """Its session's resume key, on a server that keeps checkpoints."""
        self.obs: Any = None
        self.needs_reset = True
        self.lost: Failure | None = None  # its session is gone: only `restart` helps
        self.busy: InFlight | None = None
        self.outcome: SubOutcome | None = None
        self.sent: Tally | None = None
        """The batched send it is part of, until that send's results are all in (`ready`)."""


class SubOutcome:
    """What happened to one sub-env in one call (a step, a reset, a restart).

    Args:
        index: The sub-env's index.
        kind: What the call asked of it.
        tally: The call's tally (None: a `send`'s own step).
        before: The sub-env's observation before the call.
    """

    __slots__ = (
        "action",
        "before",
        "failure",
        "index",
        "kind",
        "options",
        "reset",
        "seed",
        "step",
        "tally",
    )

    def __init__(self, index: int, kind: Verb, tally: Tally | None, before: Any) -> None:
        self.index = index
        self.kind = kind
        self.tally = tally
        self.before = before  # the sub-env's observation before the call
        self.action: Any = None
        self.seed: int | None = None
        self.options: dict[str, Any] | None = None
        self.step: StepResult[Any] | None = None
        self.reset: StepResult[Any] | None = None
        self.failure: Failure | None = None


class InFlight:
    """A frame sent (or queued) on a link, and the sub-envs waiting for its answer.

    A batched step's `step_many` also keeps its `tally` and the sub-envs' `actions` (in the
    order of `subs`): its sub-envs have no `SubOutcome` until one is needed (`materialize`).

    Args:
        kind: What the frame asks.
        frame: The frame.
        link: The link it goes on.
        subs: The sub-envs waiting for its answer.
        deadline: When it expires, a `time.monotonic()` value (None: never).
    """

    __slots__ = (
        "actions",
        "deadline",
        "frame",
        "kind",
        "link",
        "resets",
        "started",
        "subs",
        "tally",
    )

    def __init__(
        self, kind: FrameKind, frame: Any, link: Link, subs: list[Sub], deadline: float | None
    ) -> None:
        self.kind = kind
        self.frame = frame
        self.link = link
        self.subs = subs
        self.deadline = deadline
        self.started = time.perf_counter()
        self.tally: Tally | None = None
        self.actions: list[Any] | None = None  # set while the sub-envs have no outcome
        self.resets: list[int] | None = None
        """A `step_many`'s items that are resets (autoresets folded into it), by position."""

    def serves(self, tally: Tally) -> bool:
        """Tell whether `tally` waits for this request.

        Args:
            tally: A call's tally.

        Returns:
            True when it is a batched step's for `tally`, or one of its sub-envs has an
            outcome for `tally`.
        """
        return self.tally is tally or any(
            s.outcome is not None and s.outcome.tally is tally for s in self.subs
        )


class Rows(NamedTuple):
    """A `step_many` answered in bulk: per item, in the order of `subs`, what it carries.

    The observation, and the reward (float64, None as 0.0) and flags it carries. `metadata`
    is each observation's metadata, or None when none has any.
    """

    subs: list[Sub]
    observations: list[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    metadata: list[Any] | None


class Tally:
    """What one call waits for.

    A blocking call's (`step`, `reset`, `restart`, opening), or one link's share of a
    batched `send`. Complete when every sub-env it touches has its outcome (or, for a batched
    step, its place in `rows`).

    Args:
        order: A batched send's sub-envs, in the order sent (None: a blocking call's).
    """

    __slots__ = ("open", "order", "outcomes", "rows")

    def __init__(self, order: list[int] | None = None) -> None:
        self.outcomes: dict[int, SubOutcome] = {}
        self.rows: list[Rows] = []  # step_many answers taken in bulk; `outcomes` win over them
        self.open = 0  # sub-envs still waiting
        self.order = order
        """A batched send's (one link's sub-envs, in the order sent): when complete it goes to
        `VectorCore.ready` whole. None: a blocking call."""

    @property
    def complete(self) -> bool:
        """Whether every sub-env it touches has its result."""
        return self.open == 0

    def settle(self, n: int) -> bool:
        """Count `n` more of its sub-envs as having their results.

        Args:
            n: How many.

        Returns:
            True when that completes a batched send's tally, which then goes to `ready` whole
            (`VectorCore._sent_complete`).
        """
        self.open -= n
        return self.open == 0 and self.order is not None


class StepBatch(NamedTuple):
    """The results `recv` returns: the sub-envs that finished, in the order they finished.

    A named tuple; position `j` of each field is sub-env `env_ids[j]`'s.

    Args:
        env_ids: The sub-envs' indices (a numpy int array).
        observations: Their observations (the Observation type, or dicts).
        rewards: Their rewards (float64).
        terminated: Whether each episode reached a terminal state (bool).
        truncated: Whether each episode was cut short (bool).
        infos: Batched as in Gymnasium (`infos[key][j]`, mask `infos["_" + key]`), over the
            positions of this batch.
    """

    env_ids: np.ndarray
    observations: list[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]


def stale_sessions(subs: Sequence[Sub], conn: Any) -> list[Sub]:
    """Find the sub-envs whose session cannot take a request as it is.

    One pass over the sub-envs, not a call per sub-env: a batched step asks it of every
    sub-env.

    Args:
        subs: Sub-envs, all of one link.
        conn: The link's live connection.

    Returns:
        Those of `subs` whose session is lost, not open (or being reopened), or opened on an
        earlier connection; the others' sessions are open on `conn`.
    """
    return [s for s in subs if s.lost is not None or s.session is None or s.conn is not conn]


def session_gone(sub: Sub) -> Failure | None:
    """Tell why a sub-env's session cannot take a request.

    Args:
        sub: The sub-env.

    Returns:
        Its `lost` failure, a lost-connection failure (no open session on its link's
        connection, or that connection closed), or None when it can take a request.
    """
    if sub.lost is not None:
        return sub.lost
    if sub.conn is None or stale_sessions((sub,), sub.link.conn):
        return Failure.lost(ConnectionLost(f"sub-env {sub.index} has no open session"))
    if sub.conn.closed:
        return Failure.lost(ConnectionLost(f"the connection to {sub.link.url} is closed"))
    return None


def in_flight(subs: Iterable[Sub]) -> list[Sub]:
    """Find the sub-envs that may not be asked anything else until their result is in.

    Args:
        subs: Sub-envs.

    Returns:
        Those with a request in flight, or in a batched send not complete yet.
    """
    return [s for s in subs if s.busy is not None or s.sent is not None]


def check_idle(subs: Iterable[Sub]) -> None:
    """Refuse to ask anything of sub-envs that are `in_flight`.

    Args:
        subs: The sub-envs to be asked.

    Raises:
        ValueError: Naming the first of them.
    """
    busy = in_flight(subs)
    if busy:
        raise ValueError(
            f"sub-env {busy[0].index} has a request in flight: recv() its result first"
        )
