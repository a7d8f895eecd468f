"""One tenant cannot starve the others: a connection whose blocking steps hang holds at most
`limits.max_thread_share` of the worker threads (its further calls wait in a queue of its
own), and opening and closing sessions run on threads of their own, so another peer still
opens, steps and closes at once. Real servers on loopback, a real worker-thread env."""

from __future__ import annotations

import time

import pytest

import ecotone
from ecotone.kernel.limits import Limits
from tests import hostile_envs
from tests.conftest import run_server
from tests.test_containment import send_step

STALL = 3.0
"""Seconds each of the hog's steps blocks its worker thread (well within call_timeout)."""


@pytest.mark.parametrize("hung", [41, 400])
def test_a_peer_whose_steps_hang_never_starves_another_peer(hung: int) -> None:
    limits = Limits(max_sessions=hung + 8, max_sessions_per_connection=None)
    with run_server("thread_hostile", limits=limits, plugins=[hostile_envs]) as server:
        hog = ecotone.Connection.open_url(server.url)
        sessions = [hog.open() for _ in range(hung)]
        for session in sessions:
            session.reset()
        for session in sessions:  # more than the 40 worker threads, all of one connection
            send_step(hog, session.session_id, {"do": "sleep", "seconds": STALL})
        time.sleep(0.3)  # the hog's steps hold its share of the threads; the rest wait
        began = time.monotonic()
        with ecotone.connect(server.url) as other:  # open (a constructor on a thread)
            other.reset()
            assert other.step({}).observation["steps"] == 1  # a step on a worker thread
        # ...and close: each answered in well under the hog's stall, all three within 1 s
        assert time.monotonic() - began < 1.0
        hog.close()


def test_the_share_is_a_limit_of_its_own() -> None:
    with pytest.raises(ValueError, match="max_thread_share"):
        Limits(max_thread_share=0)
    with pytest.raises(ValueError, match="max_thread_share"):
        Limits(max_thread_share=1.5)
    assert Limits().worker_threads == 40 and Limits().max_thread_share == 0.5
