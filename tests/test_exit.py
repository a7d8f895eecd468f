"""`ecotone.close_at_exit`: what is left open is closed when the program ends, newest first,
past a close that fails, including one registered by another close. Real subprocesses."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import ecotone

def say(word):
    return lambda: print(word, flush=True)

def fails():
    raise RuntimeError("this close fails")

def opens_another():
    print("opens", flush=True)
    ecotone.close_at_exit(say("late"))

class Dropped:
    def close(self):
        print("dropped", flush=True)

ecotone.close_at_exit(say("first"))
ecotone.close_at_exit(fails)
ecotone.close_at_exit(opens_another)
ecotone.forget_at_exit(ecotone.close_at_exit(say("forgotten")))
ecotone.close_at_exit(Dropped().close, weak=True)  # collected at once: nothing to close
kept = Dropped()
ecotone.close_at_exit(kept.close, weak=True)
print("end", flush=True)
"""


def test_what_is_left_open_is_closed_at_exit_newest_first_past_a_failure() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["end", "dropped", "opens", "late", "first"]
    assert "this close fails" in done.stderr  # logged, and the next one was still made
