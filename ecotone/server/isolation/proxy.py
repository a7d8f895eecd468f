"""`IsolatedEnv`: a session's env in a process of its own, as the engine sees it.

To the engine it is an async env like any other (its calls are awaited on the server's event
loop, `Mode.AWAIT`, with their deadlines): each method sends one request on the worker's data
socket and waits for the answer (no thread hop: the socket is waited on by trio). What it
sends and gets back are the env's declared types (`wire.py`): an action, an observation, a
State; a snapshot's bytes.

How a worker ends, and what the engine hears:

* **it dies** (a segfault, `os.abort()`, `os._exit()`, killed from outside): the call in
  flight, or the next one, raises `EnvLost` saying how (`killed by signal SIGSEGV (11)`),
  which the engine answers `env_error` (`details.reason` `env_lost`); every later call says
  the same, except `reset` and a restore, which start a fresh worker first (as a timed-out
  env's next reset gets a fresh instance);
* **a call outlives its deadline**: the engine cancels it and closes the env (`Engine.
  timed_out`), and `close` kills the worker (its answer would come too late to be read);
* **the session closes**: the worker runs the env's `close()`, answers and exits; `close`
  returns once the zygote has reaped it (killed after `CLOSE_GRACE` seconds if it lingers),
  so a closed session leaves no process behind.
"""

from __future__ import annotations

import builtins
import functools
import socket
from collections.abc import Callable
from typing import Any, Final, NoReturn

import attrs
import trio

from ecotone.kernel.calls import EnvLost
from ecotone.kernel.contract import InvalidAction
from ecotone.server.isolation import wire
from ecotone.server.isolation.parent import Exit, Zygote

CLOSE_GRACE: Final = 2.0
"""Seconds a worker has to exit after its env's `close()` before it is killed."""
EXIT_WAIT: Final = 5.0
"""Seconds to wait for the zygote's word on how a worker ended."""


@attrs.frozen
class Host:
    """What every worker of one env shares: its zygote (started again if it died), the types
    its answers are decoded as, and the deadline of its constructor."""

    zygote: Callable[[], Zygote]
    observation_type: Any
    state_type: Any
    open_timeout: float | None


class _Gone(Exception):
    """The worker's socket reached its end: the process is gone."""


@functools.cache
def _stand_in(name: str, lookup: bool) -> type[Exception]:
    """An exception class named as the env's was (`MyEnvError`), for the error's `type`: a
    LookupError (`lookup`), else an Exception."""
    base = LookupError if lookup else Exception
    return type(name, (base,), {"__module__": "env"})


def rebuilt(name: str, message: str, kind: str, details: dict[str, Any]) -> Exception:
    """The exception the worker's env code raised, as the engine reads it: an InvalidAction
    (answered `invalid_action`), a LookupError (a tool not found), a builtin exception by
    name, or one of a class named as the env's."""
    if kind == "invalid_action":
        field = str(details.pop("field", ""))
        return InvalidAction(message, field=field, **details)
    base: type[Exception] = LookupError if kind == "lookup" else Exception
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, base):
        try:
            return builtin(message)
        except TypeError:  # a builtin that takes other arguments (UnicodeDecodeError...)
            pass
    return _stand_in(name, kind == "lookup")(message)


def _start(host: Host) -> tuple[Zygote, int, socket.socket]:
    """A worker with its env made (blocking): its zygote, its pid and its socket
    (non-blocking).

    Raises:
        EnvLost: It died while its constructor ran.
        TimeoutError: The constructor did not end within the open deadline (it is killed).
        Exception: What the constructor raised.
    """
    zygote = host.zygote()
    pid, sock = zygote.spawn()
    buffer = bytearray()
    try:
        sock.settimeout(host.open_timeout)
        try:
            body = wire.read_frame(sock, buffer)
        except TimeoutError:
            zygote.kill(pid)
            zygote.wait_exit(pid, EXIT_WAIT)
            raise TimeoutError(
                f"the env's constructor did not end within {host.open_timeout}s"
            ) from None
        if body is None:
            exit = zygote.wait_exit(pid, EXIT_WAIT) or Exit(None, None)
            raise EnvLost(f"{exit} while its constructor ran", pid=pid, **exit.details())
        status, raw = wire.read_answer(body)
        if status != wire.OK:
            zygote.wait_exit(pid, EXIT_WAIT)  # it exits after a failed constructor
            raise rebuilt(*wire.decode(raw, tuple[str, str, str, dict[str, Any]]))
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return zygote, pid, sock


class IsolatedEnv:
    """One session's env, running in worker process `pid`."""

    def __init__(self, host: Host) -> None:
        """Start a worker and make the env in it (blocking: the engine's constructor call
        runs in a worker thread)."""
        self._host = host
        self._zygote, self.pid, self._sock = _start(host)
        self._buffer = bytearray()
        self._busy = False
        """A request was sent and its answer not read (a call cut off at its deadline)."""
        self._exit: Exit | None = None
        """How the worker ended, once known."""
        self._closed = False

    # --- the env's methods, as the engine calls them ----------------------------------------

    async def reset(self, **kwargs: Any) -> Any:
        await self._revive()
        return await self._ask("reset", kwargs, self._host.observation_type)

    async def step(self, action: Any) -> Any:
        return await self._ask("step", action, self._host.observation_type)

    async def state(self) -> Any:
        return await self._ask("state", None, self._host.state_type)

    async def snapshot(self) -> bytes:
        value: bytes = await self._ask("snapshot", None, bytes)
        return value

    async def restore(self, data: bytes, *, episode_id: str | None = None) -> None:
        await self._revive()
        await self._ask("restore", (data, episode_id), Any)

    async def load_state(self, state: Any) -> None:
        await self._revive()
        await self._ask("load_state", state, Any)

    async def list_tools(self) -> Any:
        return await self._ask("list_tools", None, Any)

    async def call_tool(self, name: str, arguments: Any) -> Any:
        return await self._ask("call_tool", (name, arguments), Any)

    async def render(self) -> Any:
        return await self._ask("render", None, Any)

    async def close(self) -> None:
        """The env's `close()` in the worker, then the worker gone (killed if it does not
        exit, or if a call was cut off); returns once the zygote has reaped it."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._exit is None and not self._busy:
                await self._ask("close", None, Any)
        except EnvLost:
            pass
        finally:
            with trio.CancelScope(shield=True):
                await self._reap()

    # --- the worker ---------------------------------------------------------------------------

    async def _ask(self, op: str, argument: Any, answer: Any) -> Any:
        if self._exit is not None:
            raise EnvLost(
                f"{self._exit} earlier (pid {self.pid})", pid=self.pid, **self._exit.details()
            )
        message = wire.request(op, argument)
        self._busy = True
        try:
            await self._send(message)
            body = await self._receive()
        except _Gone:
            await self._lost()
        self._busy = False
        status, raw = wire.read_answer(body)
        if status == wire.OK:
            return wire.decode(raw, answer)
        raise rebuilt(*wire.decode(raw, tuple[str, str, str, dict[str, Any]]))

    async def _send(self, message: bytes) -> None:
        sock = self._sock
        view = memoryview(message)
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
            except OSError as exc:  # EPIPE, ECONNRESET: the worker is gone
                raise _Gone from exc

    async def _receive(self) -> bytes:
        sock, buffer = self._sock, self._buffer
        while True:
            body = wire.split(buffer)
            if body is not None:
                return body
            try:
                chunk = sock.recv(1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            except OSError as exc:
                raise _Gone from exc
            if not chunk:
                raise _Gone
            buffer += chunk

    async def _lost(self) -> NoReturn:
        """The worker died under a call: how, from the zygote."""
        self._busy = False
        with trio.CancelScope(shield=True):
            exit = await trio.to_thread.run_sync(self._zygote.wait_exit, self.pid, EXIT_WAIT)
        self._exit = exit or Exit(None, None)
        self._sock.close()
        raise EnvLost(f"{self._exit} (pid {self.pid})", pid=self.pid, **self._exit.details())

    async def _revive(self) -> None:
        """A fresh worker in place of one that died (before a reset or a restore)."""
        if self._exit is None:
            return
        self._zygote, self.pid, self._sock = await trio.to_thread.run_sync(_start, self._host)
        self._buffer, self._exit = bytearray(), None

    async def _reap(self) -> None:
        """Make sure the worker is gone and reaped: wait for it after a close, kill it
        after `CLOSE_GRACE` (at once when a call was cut off)."""
        self._sock.close()
        if self._exit is not None:
            return
        zygote, pid = self._zygote, self.pid
        exit = None
        if not self._busy:
            exit = await trio.to_thread.run_sync(zygote.wait_exit, pid, CLOSE_GRACE)
        if exit is None:
            zygote.kill(pid)
            exit = await trio.to_thread.run_sync(zygote.wait_exit, pid, EXIT_WAIT)
        self._exit = exit or Exit(None, None)

    def __repr__(self) -> str:
        return f"<IsolatedEnv pid={self.pid}>"
