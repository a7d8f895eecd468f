"""Malformed frames on every transport (`ecotone.conformance.fuzz`): each gets an answer, a
victim session stepping on another connection throughout loses nothing, and the server goes
on. docs/reliability.md quotes the same fuzzer's run of 100,000 frames per transport."""

from __future__ import annotations

import pytest

import ecotone
from ecotone.conformance.fuzz import KINDS, frames, fuzz
from tests.conftest import run_server


@pytest.mark.parametrize("transport", ["websocket", "http", "tcp"])
def test_malformed_frames_are_all_answered_and_the_victim_loses_nothing(transport: str) -> None:
    with run_server("counter", transport=transport) as server:
        report = fuzz(server.url, 2500, seed=3)
        assert report.unanswered == 0, report.as_dict()
        assert report.answered + report.closed_with_reason == report.frames == 2500
        assert report.victim_steps > 0 and report.victim_lost == 0, report.as_dict()
        assert report.codes["invalid_frame"] > 1000
        assert set(report.kinds) == set(KINDS)
        with ecotone.connect(server.url) as env:  # and the server goes on
            env.reset()
            assert env.step({"delta": 5}).observation["count"] == 5


def test_the_frames_are_the_same_for_a_seed() -> None:
    import random

    one, two = frames(random.Random(11)), frames(random.Random(11))
    assert [next(one) for _ in range(50)] == [next(two) for _ in range(50)]
