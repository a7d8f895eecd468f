"""A session's phase, and the events that move it, as data: the one table the engine obeys.

Rules:

* A session is in exactly one `Phase`. Only `advance` changes it, and only along
  `TRANSITIONS`: an event the table does not list for the session's phase is an engine bug
  (`PhaseError`), never a silent change.
* What a request may do in each phase is `REFUSALS`: a request kind listed for a phase is
  answered with that refusal and reaches no env; anything else runs. Reset and close run in
  every phase but CLOSED (a closed session is out of the table, so nothing reaches it).
* A phase changes when an env call's outcome is known, never ahead of it: a step whose
  observation cannot be encoded for its answer moved nothing, so nothing is ever undone.

The phases:

    FRESH    no episode is running: the session was opened, or a reset began (and, if it
             raised, the episode never started)
    RUNNING  an episode runs: steps go to the env
    ENDED    the episode is over (an observation was done or truncated): steps are refused
             until the next reset
    BROKEN   a call outlived its deadline: the env was set aside (closed once the call
             ends); a reset makes a fresh instance, a close closes the session
    CLOSED   the session left the table (closed by its owner, its connection's end, idleness
             or the server's shutdown)

The table (events across, phases down; `-` means the event cannot happen there):

           RESET  REPLACED  OBSERVED  FINISHED  TIMED_OUT  CLOSED  RESUMED  RESUMED_ENDED  SEAT_LOST
    FRESH  FRESH  -         RUNNING   ENDED     BROKEN     CLOSED  RUNNING  ENDED          -
    RUNNING FRESH -         RUNNING   ENDED     BROKEN     CLOSED  RUNNING  ENDED          ENDED
    ENDED  FRESH  -         -         -         BROKEN     CLOSED  RUNNING  ENDED          -
    BROKEN -      FRESH     -         -         BROKEN     CLOSED  -        -              -
    CLOSED -      -         -         -         -          -       -        -              -

A restore (or a fork's copy, made FRESH) takes the phase of the episode it puts back:
RESUMED for one that was running, RESUMED_ENDED for one that had ended. A snapshot or a fork
needs an episode (FRESH refuses them: `reset_required`); a session whose env was set aside
takes none of the three.

In a multi-agent session a seat's move (`play`) is a step: FINISHED when the public view ends
the episode. SEAT_LOST ends a running episode whose seat's connection dropped and was not
taken back within its lease, when the env's rule (`seat_lost = "truncate"`) says so.

A step that raises moves nothing (the env decides whether its episode goes on; the client may
always reset), except a rubric's failure after the env's step ended the episode (FINISHED).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from ecotone.specs import (
    CallTool,
    Fork,
    GetState,
    ListTools,
    Observe,
    Play,
    Render,
    Restore,
    Share,
    SharedSteps,
    Snapshot,
    Step,
)


class Phase(enum.Enum):
    """Where a session is in its life (see the module's table)."""

    FRESH = "fresh"
    RUNNING = "running"
    ENDED = "ended"
    BROKEN = "broken"
    CLOSED = "closed"


class Event(enum.Enum):
    """What happened to a session, as far as its phase cares."""

    RESET = "reset"
    """A reset began on the session's env."""
    REPLACED = "replaced"
    """A fresh env instance took the place of one set aside."""
    OBSERVED = "observed"
    """A reset or a step was answered with an observation, and the episode goes on."""
    FINISHED = "finished"
    """A reset or a step was answered with an observation that ends the episode."""
    TIMED_OUT = "timed_out"
    """A call outlived its deadline: the env is set aside."""
    CLOSED = "closed"
    """The session left the table."""
    RESUMED = "resumed"
    """A saved episode that was running was put back into the session (restore, fork)."""
    RESUMED_ENDED = "resumed_ended"
    """A saved episode that had ended was put back into the session."""
    SEAT_LOST = "seat_lost"
    """A seat's connection dropped and nobody took the seat back: the env's rule ended the
    episode."""


class Refusal(enum.Enum):
    """Why a request of a session is answered without reaching its env."""

    RESET_REQUIRED = "reset_required"
    """A step before the first reset (or after a reset that failed)."""
    EPISODE_DONE = "episode_done"
    """A step after the episode ended."""
    BROKEN = "broken"
    """The env was set aside: only a reset or a close will do."""


class PhaseError(RuntimeError):
    """An event the table does not allow in the session's phase: a bug of the engine's."""


_F, _R, _E, _B, _C = Phase.FRESH, Phase.RUNNING, Phase.ENDED, Phase.BROKEN, Phase.CLOSED

TRANSITIONS: Final[Mapping[Phase, Mapping[Event, Phase]]] = {
    _F: {
        Event.RESET: _F,
        Event.OBSERVED: _R,
        Event.FINISHED: _E,
        Event.TIMED_OUT: _B,
        Event.CLOSED: _C,
        Event.RESUMED: _R,
        Event.RESUMED_ENDED: _E,
    },
    _R: {
        Event.RESET: _F,
        Event.OBSERVED: _R,
        Event.FINISHED: _E,
        Event.TIMED_OUT: _B,
        Event.CLOSED: _C,
        Event.RESUMED: _R,
        Event.RESUMED_ENDED: _E,
        Event.SEAT_LOST: _E,
    },
    _E: {
        Event.RESET: _F,
        Event.TIMED_OUT: _B,
        Event.CLOSED: _C,
        Event.RESUMED: _R,
        Event.RESUMED_ENDED: _E,
    },
    _B: {Event.REPLACED: _F, Event.TIMED_OUT: _B, Event.CLOSED: _C},
    _C: {},
}
"""The phase each event leads to, by the phase it happens in."""

_SET_ASIDE: Final = (
    GetState,
    ListTools,
    CallTool,
    Render,
    Share,
    SharedSteps,
    Snapshot,
    Restore,
    Fork,
    Play,
    Observe,
)

REFUSALS: Final[Mapping[Phase, Mapping[type, Refusal]]] = {
    _F: {
        Step: Refusal.RESET_REQUIRED,
        Snapshot: Refusal.RESET_REQUIRED,
        Fork: Refusal.RESET_REQUIRED,
        Play: Refusal.RESET_REQUIRED,
    },
    _R: {},
    _E: {Step: Refusal.EPISODE_DONE, Play: Refusal.EPISODE_DONE},
    _B: {Step: Refusal.BROKEN, **dict.fromkeys(_SET_ASIDE, Refusal.BROKEN)},
    _C: {},
}
"""What each phase refuses, by request frame type (a type not listed runs)."""


def advance(session: Any, event: Event) -> Phase:
    """Move `session` (anything with a `phase`) along the table; its new phase.

    Raises:
        PhaseError: the event cannot happen in the session's phase.
    """
    phase = session.phase
    after = TRANSITIONS[phase].get(event)
    if after is None:
        raise PhaseError(f"event {event.value} cannot happen to a session in phase {phase.value}")
    session.phase = after
    return after


def refusal(phase: Phase, kind: type) -> Refusal | None:
    """Why a request of type `kind` is refused in `phase`, or None when it may run."""
    return REFUSALS[phase].get(kind)


def ends_episode(observation: Any) -> bool:
    """Whether an observation ends its episode (done or truncated; objects without the
    flags never do)."""
    try:  # an ecotone.Observation has both flags: no getattr default to look up
        return bool(observation.done or observation.truncated)
    except AttributeError:
        return bool(getattr(observation, "done", False) or getattr(observation, "truncated", False))
