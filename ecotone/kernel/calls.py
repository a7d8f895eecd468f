"""Env calls the engine hands to its driver: how each env method is run, and the record of one.

The engine decides, once per env class, how each method runs (`Mode`):

* `INLINE`: called right away, on the thread that fed the engine. Only for envs that declare
  `inline = True` and whose method is a plain function: fast, never blocking.
* `THREAD`: a blocking call. The engine returns a `Call`; the driver runs `Call.run` in a
  worker thread (the server: trio's thread pool; the blocking inproc channel: the caller's
  own thread).
* `AWAIT`: a coroutine function. The driver awaits `Call.arun` on its event loop (trio in the
  server; trio or asyncio in the async inproc channel).

A `Call` never raises out of `run`/`arun`, whatever the env raises (BaseException included:
`SystemExit` or `KeyboardInterrupt` from env code is the env's failure, not the server's);
only the driver's own cancellation goes through. The outcome (`value` or `error`) is kept on
it, and the driver hands the call back with `Engine.complete`, which turns it into the answer.
A call past its `timeout` (seconds, None: none) is handed back with `Engine.timed_out`
instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, final

import anyio


class Mode(enum.Enum):
    INLINE = "inline"
    THREAD = "thread"
    AWAIT = "await"


def mode_of(inline: bool, is_async: bool) -> Mode:
    """How a method runs: coroutines are awaited; plain functions run inline when the env says
    it is cheap (`inline = True`), else in a worker thread."""
    if is_async:
        return Mode.AWAIT
    return Mode.INLINE if inline else Mode.THREAD


@final
class Call:
    """One env call the driver must make (`mode` THREAD or AWAIT), and what became of it.

    `session`, `peer`, `request`, `batch` and `finish` are the engine's bookkeeping: the
    driver only reads `mode` and `cleanup`, calls `run` or `arun`, then
    `Engine.complete(call)`."""

    __slots__ = (
        "args",
        "batch",
        "cleanup",
        "done",
        "error",
        "finish",
        "fn",
        "kwargs",
        "mode",
        "peer",
        "request",
        "session",
        "started",
        "timeout",
        "value",
    )

    def __init__(
        self,
        mode: Mode,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        finish: Callable[[Call, list[Call]], Any],
        *,
        session: Any = None,
        peer: Any = None,
        request: Any = None,
        started: float = 0.0,
        cleanup: bool = False,
    ) -> None:
        self.mode = mode
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.finish = finish
        self.session = session
        self.peer = peer
        self.request = request
        self.batch: Any = None
        self.started = started
        self.cleanup = cleanup
        """An env's `close()`: the driver makes it even when it is stopping (shielded)."""
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False
        """The call was made (`value` or `error` holds its outcome)."""
        self.timeout: float | None = None
        """Seconds the driver lets it run (None: no deadline)."""

    def run(self) -> None:
        """Make a blocking call (in a worker thread), keeping its result or exception."""
        try:
            if self.kwargs:
                self.value = self.fn(*self.args, **self.kwargs)
            else:
                self.value = self.fn(*self.args)
        except BaseException as exc:  # env code: even SystemExit is the env's failure
            self.error = exc
        self.done = True

    async def arun(self) -> None:
        """Await a coroutine call, keeping its result or exception (the driver's own
        cancellation propagates)."""
        try:
            if self.kwargs:
                self.value = await self.fn(*self.args, **self.kwargs)
            else:
                self.value = await self.fn(*self.args)
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            self.error = exc
        self.done = True

    @property
    def env(self) -> Any:
        """The env instance the call is made on (None for a constructor)."""
        return getattr(self.fn, "__self__", None)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"<Call {self.mode.value} {name}>"
