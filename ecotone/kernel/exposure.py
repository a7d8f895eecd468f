"""What an env may know about how it is served: whether this process serves beyond loopback.

A server marks it before it builds its engine (`mark_served`), so an env deciding how careful
to be (the coding sandbox fails closed without bubblewrap on an exposed server) can ask
`served_beyond_loopback()`. It is process-wide and only ever turns on: once any server of
this process listens beyond loopback, every env in it is reachable from elsewhere.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_beyond_loopback = False


def mark_served(beyond_loopback: bool) -> None:
    """Record that a server of this process is about to listen.

    Args:
        beyond_loopback: It listens beyond loopback (not only on loopback or a unix socket).
            Once true, it stays true for the process.
    """
    global _beyond_loopback
    with _lock:
        _beyond_loopback = _beyond_loopback or beyond_loopback


def served_beyond_loopback() -> bool:
    """Tell whether any server of this process listens beyond loopback.

    An env deciding how careful to be asks it (the coding sandbox fails closed without
    bubblewrap on an exposed server). It only ever turns on: once any server of this process
    listens beyond loopback, every env in the process is reachable from elsewhere.

    Returns:
        True once a server of this process was marked as listening beyond loopback.
    """
    return _beyond_loopback


def _reset_for_tests() -> None:
    global _beyond_loopback
    with _lock:
        _beyond_loopback = False


__all__ = ["mark_served", "served_beyond_loopback"]
