"""How a peer waits for its next bytes: spin a little, then sleep (busy polling).

A request/response peer whose next message comes within a few hundred microseconds loses much
of that time, and its caches, by sleeping in `epoll_wait`/`select` and being woken; on a VM a
sleep is a halted vCPU, and code right after a wake-up runs slower (the figures are in
docs/architecture.md, "Readers spin before they sleep"). So the readers of both faces first
try to read without blocking, again and again, for up to a budget (yielding the CPU between
tries, so that a process ready to run on the same core goes first), and only then block as
before. MPI libraries and Aeron's idle strategies wait the same way.

The budget adapts, so an idle or slow peer costs next to nothing: a spin that runs out makes
the next waits block at once (2, 4, ... up to 64 of them), and a wait that did not spin and
ended within the budget brings spinning back. The I/O is the caller's; this is the policy.

A spinning thread takes the GIL back after every try, so another Python thread that wants it
could be kept waiting. So a reader spins only while its gate says no other Python thread
needs to run: by default, while the process has one Python thread (`alone`: the blocking
client), not counting threads that sleep nearly always (the clients' lease keeper); the
server's gate is its own (`ecotone.server.runner.may_busy_poll`).

Servers take theirs from `Limits.busy_poll_us`; clients from `$ECOTONE_BUSY_POLL_US`
(microseconds, 0 turns it off; `DEFAULT_US` when unset).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Final, TypeVar

T = TypeVar("T")

DEFAULT_US: Final = 1000
"""Microseconds of spinning before a wait blocks, unless configured."""
ENV: Final = "ECOTONE_BUSY_POLL_US"
"""The clients' setting: microseconds, 0 for never."""
MAX_US: Final = 1_000_000
"""The largest budget taken: one second."""
MAX_BACKOFF: Final = 6
"""A spin that runs out skips spinning for the next 2**misses waits, up to 2**6 = 64."""


class BusyPoll:
    """One reader's spin-then-block policy (not thread-safe: one reader at a time).

    Per wait: `spin_for()` says how long to poll without blocking (0: block now), and while
    spinning `may_spin()` whether to go on; then `caught()` if the bytes came while
    spinning, `ran_out()` if the spin ended empty, and `blocked(seconds)` when a blocking
    wait got its bytes."""

    __slots__ = ("_gate", "_misses", "_skip", "_spun", "budget")

    def __init__(self, budget_us: float, gate: Callable[[], bool] | None = None) -> None:
        self.budget = check_budget(budget_us, "a busy-poll budget") / 1_000_000
        """Seconds a wait may spin (0: never)."""
        self._gate = gate
        self._misses = 0
        self._skip = 0
        self._spun = False  # this wait spun: its blocking part says nothing of the peer

    def may_spin(self) -> bool:
        """Whether the gate is open (no other Python thread needs to run)."""
        return (self._gate or alone)()

    def spin_for(self) -> float:
        """Seconds this wait should poll without blocking before it blocks."""
        self._spun = False
        if self._skip:
            self._skip -= 1
            return 0.0
        if not self.budget or not self.may_spin():
            return 0.0
        self._spun = True
        return self.budget

    def spin(self, attempt: Callable[[], T | None], deadline: float | None = None) -> T | None:
        """A blocking reader's spin: `attempt()` (a read that does not block: its result, or
        None for nothing yet) again and again, yielding the CPU between tries, for as long
        as this wait may spin and not past `deadline` (`time.monotonic`); then `caught` or
        `ran_out`. None: block now."""
        seconds = self.spin_for()
        if not seconds:
            return None
        clock = time.monotonic
        end = clock() + seconds
        if deadline is not None:
            end = min(end, deadline)
        while True:
            got = attempt()
            if got is not None:
                self.caught()
                return got
            if clock() >= end:
                self.ran_out()
                return None
            os.sched_yield()  # a process ready to run on this core goes first

    def caught(self) -> None:
        """The bytes came while spinning."""
        self._misses = 0

    def ran_out(self) -> None:
        """A spin ended with nothing to read: skip spinning for a while."""
        self._misses = min(self._misses + 1, MAX_BACKOFF)
        self._skip = 1 << self._misses

    def blocked(self, seconds: float) -> None:
        """A blocking wait got its bytes after `seconds`: if it did not spin first and took
        no longer than the budget, a spin would have caught them."""
        if not self._spun and seconds <= self.budget:
            self._misses = 0
            self._skip = 0


_SLEEPERS: set[threading.Thread] = set()
"""Threads that sleep but for a few milliseconds now and then (the clients' lease keeper):
`alone` does not count them."""


def add_sleeper(thread: threading.Thread) -> None:
    """`thread` sleeps nearly always: a reader may spin while it runs (see `alone`)."""
    _SLEEPERS.add(thread)


def alone() -> bool:
    """Whether this process runs one Python thread (native threads do not count, nor
    sleepers: `add_sleeper`)."""
    return threading.active_count() - len(_SLEEPERS) == 1


os.register_at_fork(after_in_child=_SLEEPERS.clear)


def check_budget(value: float, what: str) -> float:
    """`value` if it is a budget in microseconds (0 to `MAX_US`), else ValueError naming
    `what`."""
    if not (isinstance(value, int | float) and 0 <= value <= MAX_US):  # nan and inf too
        raise ValueError(f"{what} is microseconds from 0 to {MAX_US}, not {value!r}")
    return value


def client_budget_us() -> float:
    """`$ECOTONE_BUSY_POLL_US`, or `DEFAULT_US` when unset; a bad value is an error."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_US
    try:
        return check_budget(float(raw), f"{ENV}={raw!r}")
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: expected microseconds from 0 to {MAX_US}") from None


__all__ = ["DEFAULT_US", "ENV", "MAX_US", "BusyPoll", "alone", "check_budget", "client_budget_us"]
