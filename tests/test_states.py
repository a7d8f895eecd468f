"""The session state machine: the table in states.py's docstring is the one the engine obeys,
an event the table does not list is an engine bug, and refusals are by phase."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ecotone.kernel import states
from ecotone.kernel.states import (
    REFUSALS,
    TRANSITIONS,
    Event,
    Phase,
    PhaseError,
    Refusal,
    advance,
    ends_episode,
    refusal,
)
from ecotone.specs import CallTool, Close, GetState, Render, Reset, Share, Step


class _Session:
    def __init__(self, phase: Phase) -> None:
        self.phase = phase


def _documented_table() -> dict[Phase, dict[Event, Phase]]:
    """The transition table as the module's docstring draws it."""
    doc = states.__doc__ or ""
    lines = doc[doc.index("The table") :].splitlines()
    header = next(line for line in lines if "RESET" in line and "REPLACED" in line).split()
    table: dict[Phase, dict[Event, Phase]] = {}
    for line in lines:
        cells = line.split()
        if cells and cells[0] in Phase.__members__ and len(cells) == len(header) + 1:
            table[Phase[cells[0]]] = {
                Event[event]: Phase[cell]
                for event, cell in zip(header, cells[1:], strict=True)
                if cell != "-"
            }
    return table


def test_the_documented_table_is_the_table() -> None:
    assert _documented_table() == {phase: dict(row) for phase, row in TRANSITIONS.items()}
    assert set(TRANSITIONS) == set(Phase)


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("event", list(Event))
def test_advance_follows_the_table_and_refuses_anything_else(phase: Phase, event: Event) -> None:
    session = _Session(phase)
    after = TRANSITIONS[phase].get(event)
    if after is None:
        with pytest.raises(PhaseError, match=f"{event.value} cannot happen .* {phase.value}"):
            advance(session, event)
        assert session.phase is phase  # nothing moved
    else:
        assert advance(session, event) is after and session.phase is after


def test_a_closed_session_takes_no_event_at_all() -> None:
    assert TRANSITIONS[Phase.CLOSED] == {}
    assert all(
        TRANSITIONS[phase][Event.CLOSED] is Phase.CLOSED
        for phase in Phase
        if phase.value != "closed"
    )


@pytest.mark.parametrize(
    ("phase", "kind", "why"),
    [
        (Phase.FRESH, Step, Refusal.RESET_REQUIRED),
        (Phase.ENDED, Step, Refusal.EPISODE_DONE),
        (Phase.BROKEN, Step, Refusal.BROKEN),
        (Phase.BROKEN, GetState, Refusal.BROKEN),
        (Phase.BROKEN, CallTool, Refusal.BROKEN),
        (Phase.BROKEN, Render, Refusal.BROKEN),
        (Phase.BROKEN, Share, Refusal.BROKEN),
        (Phase.RUNNING, Step, None),
        (Phase.FRESH, GetState, None),
        (Phase.ENDED, GetState, None),
    ],
)
def test_refusals_by_phase(phase: Phase, kind: type, why: Refusal | None) -> None:
    assert refusal(phase, kind) is why


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.CLOSED])
def test_reset_and_close_are_refused_in_no_phase(phase: Phase) -> None:
    assert refusal(phase, Reset) is None and refusal(phase, Close) is None
    assert Reset not in REFUSALS[phase] and Close not in REFUSALS[phase]


@pytest.mark.parametrize(
    ("observation", "ends"),
    [
        (type("Obs", (), {"done": True, "truncated": False})(), True),
        (type("Obs", (), {"done": False, "truncated": True})(), True),
        (type("Obs", (), {"done": False, "truncated": False})(), False),
        ({"done": True}, False),  # a mapping has no flags as attributes
        (object(), False),
    ],
)
def test_ends_episode_reads_the_flags_and_nothing_else(observation: Any, ends: bool) -> None:
    assert ends_episode(observation) is ends


def test_the_module_docstring_names_every_phase_and_event() -> None:
    doc = states.__doc__ or ""
    for name in [*Phase.__members__, *Event.__members__]:
        assert re.search(rf"\b{name}\b", doc), name
