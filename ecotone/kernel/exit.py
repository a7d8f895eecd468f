"""Closing, when the program ends, what runs an event loop on a daemon thread.

The blocking faces of ecotone (`start_server()`, `server_pool()`, an inproc channel to an
async env, an in-process MCP env's link) run their async calls in a private event loop on a
daemon thread (an anyio blocking portal). One still open when the program ends (its last line
run, an uncaught exception, Ctrl-C outside a `with` block, a trainer that closes no env) would
hang it at exit: the portal is closed only when the interpreter finalizes its objects, after
it has frozen daemon threads, so the close waits for a loop that never runs again.

So each registers its `close` here while open (`close_at_exit`, which returns a token) and
withdraws it when closed (`forget_at_exit`). At exit (one atexit hook, while daemon threads
still run) the ones left are closed, newest first, each as its own `close` would; one
registered meanwhile (a close that opens another) is closed too. A close that fails or is
interrupted (a second Ctrl-C) is logged and the next one is still made.

`weak=True` holds the object weakly: dropped without a close, it is collected as before (its
portal then stopped by its finalizer, while the thread runs) and its entry goes with it. The
launcher's faces hold theirs strongly: a dropped handle's server is still stopped at exit.

Registering and forgetting cost O(1) whatever the number of objects opened so far (atexit's
own `unregister` scans every callback ever registered and never shrinks its list).

Public as `ecotone.close_at_exit` / `ecotone.forget_at_exit`, for an env of one's own that runs
such a thread (the MCP env plugin uses them).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import weakref
from collections.abc import Callable

log = logging.getLogger("ecotone")

# token -> the close, or a weak reference that gives it; ordered by registration. Plain dict
# operations only (atomic under the GIL): a weak reference's callback may run in any thread,
# in the middle of any code, so it must take no lock.
_open: dict[int, Callable[[], Callable[[], object] | None]] = {}
_tokens = itertools.count()


def close_at_exit(close: Callable[[], object], *, weak: bool = False) -> int:
    """Call `close` when the program ends, unless `forget_at_exit(token)` came first.

    Closes left at exit run newest first, each as its own `close` would; one that fails is
    logged, and the next is still made.

    Args:
        close: What closes the object (its `close` method, usually).
        weak: Hold `close`'s object weakly: `close` must then be a bound method, and the entry
            goes when the object is collected (see the module docstring).

    Returns:
        The token for `forget_at_exit`.

    Raises:
        TypeError: `weak` is true and `close` is not a bound method.

    Example:
        An object that runs an event loop on a daemon thread registers its close while it is
        open, and withdraws it when it closes:

        >>> class Link:
        ...     def __init__(self):
        ...         self._at_exit = ecotone.close_at_exit(self.close)  # after starting the loop
        ...
        ...     def close(self):
        ...         ecotone.forget_at_exit(self._at_exit)
        ...         print("closed")  # stopping the loop, in a real one
        >>> link = Link()
        >>> link.close()
        closed
    """
    token = next(_tokens)
    if weak:
        _open[token] = weakref.WeakMethod(close, lambda _: _open.pop(token, None))
    else:
        _open[token] = lambda: close
    return token


def forget_at_exit(token: int | None) -> None:
    """Withdraw a `close_at_exit`: the object was closed.

    Args:
        token: What `close_at_exit` returned; None, or a token already spent, does nothing.
    """
    if token is not None:
        _open.pop(token, None)


def open_count() -> int:
    """Count the closes registered (for tests and diagnostics).

    Returns:
        How many `close_at_exit` entries are neither forgotten nor collected.
    """
    return len(_open)


@atexit.register
def _close_all() -> None:
    while True:
        try:
            try:
                _, resolve = _open.popitem()
            except KeyError:
                return
            close = resolve()
            if close is not None:
                close()
        except BaseException as exc:  # the next one must still be closed
            with contextlib.suppress(BaseException):
                log.warning("at exit: a close failed: %r", exc)


__all__ = ["close_at_exit", "forget_at_exit", "open_count"]
