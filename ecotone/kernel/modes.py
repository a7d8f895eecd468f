"""How an env's methods run, decided once per env class.

* `INLINE`: called right away, on the thread that fed the engine. Only for envs that declare
  `inline = True` and whose method is a plain function: fast, never blocking.
* `THREAD`: a blocking call. The engine hands out a `Call`; the driver runs `Call.run` in a
  worker thread (the server: trio's thread pool; the blocking inproc channel: the caller's
  own thread).
* `AWAIT`: a coroutine function. The driver awaits `Call.arun` on its event loop (trio in the
  server; trio or asyncio in the async inproc channel).
"""

from __future__ import annotations

import enum


class Mode(enum.Enum):
    """How an env method runs."""

    INLINE = "inline"
    THREAD = "thread"
    AWAIT = "await"


def mode_of(inline: bool, is_async: bool) -> Mode:
    """How a method runs: coroutines are awaited; plain functions run inline when the env says
    it is cheap (`inline = True`), else in a worker thread."""
    if is_async:
        return Mode.AWAIT
    return Mode.INLINE if inline else Mode.THREAD
