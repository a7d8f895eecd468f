"""A crash of env code costs one session, not the server; and SIGTERM ends the server within
its grace period whatever env code does.

* SIGTERM to a real `ecotone serve` whose inline env blocks the event loop (a step that
  sleeps): the process ends at the hard deadline (drain + 2 x shutdown + margin), saying why.
"""

from __future__ import annotations

import re
import signal
import sys
import time

import ecotone
from tests.conftest import ecotone_serving


def test_sigterm_ends_a_server_whose_inline_env_blocks_the_event_loop() -> None:
    # The inline env's step sleeps on the event loop: trio never sees the signal, so only a
    # deadline armed by the signal's handler itself can end the process.
    with ecotone_serving(
        "inline_hostile",
        "--port",
        "0",
        "--drain-timeout",
        "1",
        "--shutdown-timeout",
        "1",
        python=("-m", "tests.serve_with_test_envs"),
    ) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"at (ws://\S+)", line)
        assert url, line
        conn = ecotone.Connection(url.group(1))
        client = conn.open()
        client.reset()
        action = conn.core.raw({"do": "sleep", "seconds": 120})
        conn.send(
            ecotone.specs.Step(id=conn.core.next_id(), session=client.session_id, action=action)
        )
        time.sleep(0.5)  # the step is sleeping, and the loop with it
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)  # without the deadline: the step's 120 s
        took = time.monotonic() - started
        # drain 1 + 2 x shutdown 1 + the 3 s margin = 6 s; generous for a busy machine
        assert 5.0 < took < 20.0, took
        assert code == 1
        said = proc.stderr.read()
        assert "SIGTERM came 6s ago and the shutdown has not ended" in said, said
        assert "env code holds the event loop" in said
        conn.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
