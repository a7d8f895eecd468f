"""Every bundled env passes the conformance suite (`ecotone validate` in process), with no
check failed and no check skipped for want of an episode end."""

from __future__ import annotations

import pytest

from ecotone.conformance import run

BUNDLED = {
    "counter": {"target": 4},
    "echo": {},
    "gridworld": {},
    "wordle": {},
    "chess": {"max_moves": 6},
    "chess-duel": {"max_moves": 12},
    "chess-duel-indexed": {"max_moves": 12},
    "dilemma": {"rounds": 5},
    "coding": {},
}


@pytest.mark.parametrize("env", sorted(BUNDLED))
def test_a_bundled_env_passes_every_conformance_check(env: str) -> None:
    report = run(env, reset_options=BUNDLED[env])
    assert report.ok, report.text()
    skipped = [r for r in report.results if r.status != "PASS"]
    assert not skipped, report.text()
