"""Stopping, when the program ends, what a blocking face left running.

`start_server()` and `server_pool()` run their provider's calls in a private event loop on a
daemon thread (an anyio blocking portal). A program that ends without stopping them (its last
line run, an uncaught exception, Ctrl-C outside the `with` block) would hang at exit: the
portal is closed only when the interpreter finalizes its objects, after it has frozen daemon
threads, so the close waits for a loop that never runs again. The servers would outlive it too.

So each face registers its `stop` here while it runs and withdraws it when stopped. At exit
(an atexit hook, while daemon threads still run) the ones left are stopped, newest first, each
as its own `stop` would: the servers end and the loops close. A stop that fails or is
interrupted (a second Ctrl-C) is logged and the next one is still made.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("ecotone.launcher")

_running: dict[Callable[[], object], None] = {}  # an ordered set: oldest first
_lock = threading.Lock()


def stop_at_exit(stop: Callable[[], object]) -> None:
    """Call `stop` when the program ends, unless `forget(stop)` came first."""
    with _lock:
        _running[stop] = None


def forget(stop: Callable[[], object]) -> None:
    """Withdraw a `stop_at_exit` (the face was stopped); nothing if it was not registered."""
    with _lock:
        _running.pop(stop, None)


@atexit.register
def _stop_all() -> None:
    while True:
        with _lock:
            if not _running:
                return
            stop, _ = _running.popitem()
        try:
            stop()
        except BaseException as exc:  # the next one must still be stopped
            log.warning("at exit: %r failed: %r", stop, exc)


__all__ = ["forget", "stop_at_exit"]
