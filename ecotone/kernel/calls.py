"""Env calls the engine hands to its driver: how each env method is run, and one record per
kind of call.

The engine decides, once per env class, how each method runs (`Mode`, `modes.py`): INLINE
right away on the thread that fed the engine, THREAD in a worker thread (`Call.run`), AWAIT
on the driver's event loop (`Call.arun`).

A `Call` never raises out of `run`/`arun`, whatever the env raises (BaseException included:
`SystemExit` or `KeyboardInterrupt` from env code is the env's failure, not the server's);
only the driver's own cancellation goes through. The outcome (`value` or `error`) is kept on
it, and the driver hands the call back with `Engine.complete`, which turns it into the answer.
A call past its `timeout` (seconds, None: none) is handed back with `Engine.timed_out`
instead.

The driver reads only what `Call` itself has (`mode`, `timeout`, `cleanup`, `env`, the
outcome). Each kind of call is a subclass holding what the engine needs to answer it (the
session, the peer, the request), so the engine finds its way by the call's type, never by
probing what it carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, final

import anyio

from ecotone.kernel.modes import Mode
from ecotone.kernel.snapshots import Saved, aapply, acapture, afork, apply, capture, fork

if TYPE_CHECKING:
    from ecotone.kernel.envspec import EnvSpec
    from ecotone.kernel.seats import Move
    from ecotone.kernel.sessions import Session
    from ecotone.specs import (
        CallTool,
        Close,
        Fork,
        GetState,
        ListTools,
        Open,
        Play,
        Render,
        Reset,
        Restore,
        Snapshot,
    )
    from ecotone.specs.frames import RequestId


class EnvLost(Exception):
    """The env a call was made on is gone with the process it ran in: what a driver that runs
    each session's env in a process of its own (`ecotone.server.isolation`) raises when that
    process dies (a segfault, `os.abort()`, `os._exit()`, a kill). Answered `env_error` with
    `details.reason` `env_lost` and what the driver knows of the death (`signal`,
    `exit_status`), which a client connected with `resume=True` takes as its cue to resume
    the session from its last checkpoint.

    Args:
        message: How the process ended (`killed by signal SIGSEGV (11)`).
        **details: The same, as data (plain values).
    """

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class Call:
    """One env call the driver must make (`mode` THREAD or AWAIT), and what became of it.

    The driver reads `mode`, `timeout` and `cleanup`, calls `run` or `arun`, then hands the
    call to `Engine.complete` (or, past its deadline, `Engine.timed_out`)."""

    __slots__ = (
        "args",
        "done",
        "entry",
        "error",
        "fn",
        "kwargs",
        "mode",
        "peer",
        "rid",
        "session",
        "started",
        "timeout",
        "value",
    )

    op: ClassVar[str] = "call"
    """The operation, as `ecotone_call_completed` names it."""
    what: ClassVar[str] = "call"
    """What it is, as a `timeout` error says (`the env's WHAT did not end...`)."""
    cleanup: ClassVar[bool] = False
    """An env's `close()`: the driver makes it even when it is stopping (shielded)."""
    essential: ClassVar[bool] = False
    """Made even when the driver is stopping (a checkpoint the shutdown writes)."""

    def __init__(
        self,
        mode: Mode,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.mode = mode
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.rid: RequestId | None = None
        """The id of the request the call answers (None: no request asked for it)."""
        self.session: Session | None = None
        """The session whose env the call is made on (None: a constructor, or an env no
        session holds)."""
        self.peer: Any = None
        """Where its answer goes (None: nobody waits for one)."""
        self.entry: Any = None
        """The batch item it answers (a `step_many`'s), or None: it answers `peer`."""
        self.started = 0.0
        """When it was handed out (`time.perf_counter()`), when someone times calls."""
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

    def stranded(self) -> list[Any]:
        """The envs to close when the call ends after its deadline (the engine set them
        aside): the one it was made on, or the one a constructor made."""
        env = self.value if self.env is None else self.env
        return [] if env is None or self.cleanup else [env]

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"<{type(self).__name__} {self.mode.value} {name}>"


@final
class OpenCall(Call):
    """An env's constructor, for an `open` (`value`: the new env)."""

    __slots__ = ("request", "spec")
    op = "open"
    what = "open"

    def __init__(self, mode: Mode, spec: EnvSpec, peer: Any, request: Open) -> None:
        super().__init__(mode, spec.make)
        self.spec = spec
        self.peer = peer
        self.request = request
        self.rid = request.id


class SessionCall(Call):
    """A call on a session's env, answering `peer` (or, with `entry`, an item of a batch)."""

    __slots__ = ()
    session: Session

    def __init__(
        self,
        mode: Mode,
        fn: Callable[..., Any],
        session: Session,
        peer: Any,
        args: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(mode, fn, args)
        self.session = session
        self.peer = peer


@final
class StepCall(SessionCall):
    """`env.step(action)` (`args[0]`: the typed action)."""

    __slots__ = ()
    rid: RequestId
    op = "step"
    what = "step"

    def __init__(self, mode: Mode, session: Session, peer: Any, action: Any, rid: RequestId):
        super().__init__(mode, session.env.step, session, peer, (action,))
        self.rid = rid


@final
class PlayCall(SessionCall):
    """A seat's move in a multi-agent session (`SeatedEnv.play(seat, action)`; `value`: the
    seat's view after it)."""

    __slots__ = ("request", "seat")
    op = "play"
    what = "play"

    def __init__(
        self, mode: Mode, session: Session, peer: Any, request: Play, seat: str, action: Any
    ) -> None:
        super().__init__(mode, session.env.play, session, peer, (seat, action))
        self.request = request
        self.seat = seat
        self.rid = request.id


@final
class RoundCall(SessionCall):
    """A simultaneous env's round (`SeatedEnv.play_round(actions)`; `value`: every seat's view
    after it). It answers every `play` of the round (`moves`), not one peer."""

    __slots__ = ("moves",)
    op = "play"
    what = "round"

    def __init__(self, mode: Mode, session: Session, moves: dict[str, Move]) -> None:
        actions = {seat: move.action for seat, move in moves.items()}
        super().__init__(mode, session.env.play_round, session, None, (actions,))
        self.moves = moves


@final
class ReplaceCall(SessionCall):
    """A fresh env instance for a session whose env was set aside, made before its reset."""

    __slots__ = ("request",)
    op = "open"
    what = "reset"

    def __init__(self, mode: Mode, session: Session, peer: Any, request: Reset) -> None:
        super().__init__(mode, session.spec.make, session, peer)
        self.request = request
        self.rid = request.id

    @property
    def env(self) -> Any:
        return None


@final
class ResetCall(SessionCall):
    """`env.reset(seed=..., episode_id=..., **options)`."""

    __slots__ = ("request",)
    op = "reset"
    what = "reset"

    def __init__(
        self, mode: Mode, session: Session, peer: Any, request: Reset, kwargs: dict[str, Any]
    ) -> None:
        super().__init__(mode, session.env.reset, session, peer)
        self.kwargs = kwargs
        self.request = request
        self.rid = request.id


@final
class StateCall(SessionCall):
    """`env.state()`."""

    __slots__ = ("request",)
    op = "state"
    what = "state"

    def __init__(self, mode: Mode, session: Session, peer: Any, request: GetState) -> None:
        super().__init__(mode, session.env.state, session, peer)
        self.request = request
        self.rid = request.id


@final
class ListToolsCall(SessionCall):
    """`env.list_tools()`."""

    __slots__ = ("request",)
    op = "list_tools"
    what = "list_tools"

    def __init__(self, mode: Mode, session: Session, peer: Any, request: ListTools) -> None:
        super().__init__(mode, session.env.list_tools, session, peer)
        self.request = request
        self.rid = request.id


@final
class CallToolCall(SessionCall):
    """`env.call_tool(name, arguments)`."""

    __slots__ = ("request",)
    op = "call_tool"
    what = "call_tool"

    def __init__(self, mode: Mode, session: Session, peer: Any, request: CallTool) -> None:
        super().__init__(
            mode, session.env.call_tool, session, peer, (request.name, request.arguments)
        )
        self.request = request
        self.rid = request.id


@final
class RenderCall(SessionCall):
    """`env.render()`, or `target` (a multi-agent env's `render` with its seat bound)."""

    __slots__ = ("request",)
    op = "render"
    what = "render"

    def __init__(
        self,
        mode: Mode,
        session: Session,
        peer: Any,
        request: Render,
        target: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(mode, target or session.env.render, session, peer)
        self.request = request
        self.rid = request.id


class _OnEnv(SessionCall):
    """A call of a kernel function on the session's env (`target`), not of an env method."""

    __slots__ = ("request", "target")
    target: Any

    @property
    def env(self) -> Any:
        return self.target


@final
class SnapshotCall(_OnEnv):
    """A snapshot of the session's episode (`snapshots.capture`; `value`: a `Saved`). Made
    even while the server stops (`essential`), within what is left of its deadline: the
    checkpoints the shutdown writes are snapshots."""

    op = "snapshot"
    what = "snapshot"
    essential = True

    def __init__(self, mode: Mode, session: Session, peer: Any, request: Snapshot) -> None:
        fn = acapture if mode is Mode.AWAIT else capture
        super().__init__(mode, fn, session, peer, (session.env, session.spec))
        self.target = session.env
        self.request = request
        self.rid = request.id


@final
class RestoreCall(_OnEnv):
    """A saved episode put into the session's env (`snapshots.apply`)."""

    __slots__ = ("saved",)
    op = "restore"
    what = "restore"

    def __init__(
        self, mode: Mode, session: Session, peer: Any, request: Restore, saved: Saved
    ) -> None:
        fn = aapply if mode is Mode.AWAIT else apply
        args = (session.env, session.spec, saved, saved.episode_id)
        super().__init__(mode, fn, session, peer, args)
        self.target = session.env
        self.request = request
        self.saved = saved
        self.rid = request.id


@final
class ForkCall(_OnEnv):
    """The session's episode saved, and `n` new envs made holding it (`value`: the `Saved`
    and the envs), each as one of `episode_ids`."""

    __slots__ = ("episode_ids",)
    op = "fork"
    what = "fork"

    def __init__(
        self, mode: Mode, session: Session, peer: Any, request: Fork, episode_ids: list[str]
    ) -> None:
        fn = afork if mode is Mode.AWAIT else fork
        super().__init__(mode, fn, session, peer, (session.env, session.spec, episode_ids))
        self.target = session.env
        self.request = request
        self.episode_ids = episode_ids
        self.rid = request.id

    def stranded(self) -> list[Any]:
        made = [] if self.value is None else list(self.value[1])
        return [self.target, *made]


@final
class CheckpointCall(SessionCall):
    """A session's checkpoint file written, read or removed by the server's checkpoint store
    (`purpose`: `write`, `read`, `delete`), in a worker thread: no env is called."""

    __slots__ = ("key", "purpose", "request")
    op = "checkpoint"
    what = "checkpoint"
    essential = True

    def __init__(
        self,
        session: Session,
        peer: Any,
        request: Any,
        key: str,
        call: tuple[str, Any, tuple[Any, ...]],
    ) -> None:
        purpose, fn, args = call
        super().__init__(Mode.THREAD, fn, session, peer, args)
        self.request = request
        self.key = key
        self.purpose = purpose
        self.rid = None if request is None else request.id

    @property
    def env(self) -> Any:
        return None

    def stranded(self) -> list[Any]:
        return []


@final
class CloseCall(SessionCall):
    """`env.close()` of a session leaving the table: asked for by its owner (`request`, which
    it answers), or retired without a request (`reason`: `disconnect`, `idle`, `shutdown`)."""

    __slots__ = ("quiet", "reason", "request")
    op = "close"
    what = "close"
    cleanup = True

    def __init__(self, mode: Mode, session: Session, peer: Any, request: Close | None) -> None:
        super().__init__(mode, session.env.close, session, peer)
        self.request = request
        self.rid = None if request is None else request.id
        self.reason = "client"
        self.quiet = False
        """Nobody is told (a session whose owner left while its env was being built)."""


@final
class DisposeCall(Call):
    """`close()` of an env no session holds any more (set aside after a cancelled coroutine
    call): nobody waits for it, and only a failure is logged."""

    __slots__ = ()
    op = "close"
    what = "close"
    cleanup = True

    def __init__(self, env: Any, mode: Mode = Mode.AWAIT) -> None:
        super().__init__(mode, env.close)
