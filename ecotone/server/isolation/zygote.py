"""The zygote and the workers it forks: the other side of `ecotone.server.isolation`, run as
`python -m ecotone.server.isolation.zygote FD PARENT` by the server (`parent.py`).

The zygote is a warm parent: it imports the env's module (unpickling the env's factory and
types, or resolving its name through the installed plugins), says it is ready, and then
forks a worker per session, so a new session costs a fork, not an interpreter start. It is
single-threaded and runs no event loop, so forking it is safe; it reaps every worker and
tells the server how each ended (`EXITED`: its exit status, or the signal that killed it).

A worker builds the env (its constructor's outcome is its first frame), then answers the
server's requests one at a time, each an env call (`wire.py`); `close` is its last. Env code
that raises, `BaseException` included, is an answer (`RAISED`); env code that kills the
process is what the zygote reports.

Neither outlives the server: each asks the kernel to kill it when its parent dies
(PR_SET_PDEATHSIG; the server forks the zygote from a thread that lives as long as its
process), the zygote kills its workers when the server's end of the control socket closes,
and a worker exits when the server's end of its data socket does. Ctrl-C at a terminal is
the server's to handle (it drains): they ignore SIGINT, and the zygote leads a process
group of its own.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import inspect
import os
import pickle
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, Final

import attrs
import msgspec

from ecotone.kernel.contract import InvalidAction
from ecotone.server.isolation import wire

PR_SET_PDEATHSIG: Final = 1


@attrs.frozen
class Maker:
    """What a worker needs of the env: its factory and the types its calls take."""

    factory: Callable[[], Any]
    action_type: Any
    state_type: Any
    task_type: Any
    asynchronous: bool


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library (loaded once, by the zygote: its workers inherit it)."""
    return ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when `parent` ends; exit at once if it already
    has (it ended before the ask)."""
    if _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(0)


def maker_of(recipe: wire.Recipe) -> Maker:
    """The env's factory and types, from the recipe: unpickled (importing the env's module),
    or resolved by name through the installed plugins."""
    if recipe.factory is not None:
        factory, action_type, state_type, task_type = pickle.loads(recipe.factory)
        return Maker(factory, action_type, state_type, task_type, recipe.asynchronous)
    from ecotone.kernel.registry import Registry

    spec = Registry.discover().env_spec(recipe.name)
    task_type = None if spec.tasks is None else spec.tasks.type
    return Maker(spec.factory, spec.action_type, spec.state_type, task_type, spec.asynchronous)


# --- a worker: one session's env --------------------------------------------------------------


def _details(exc: BaseException) -> dict[str, Any]:
    """What travels of an exception besides its type and message (an InvalidAction's field
    and details), as plain data."""
    if not isinstance(exc, InvalidAction):
        return {}
    details: dict[str, Any] = {"field": exc.field}
    for key, value in exc.details.items():
        try:
            details[key] = msgspec.to_builtins(value, str_keys=True)
        except (TypeError, ValueError):
            details[key] = repr(value)
    return details


def raised(exc: BaseException) -> bytes:
    """The answer saying env code raised `exc`."""
    if isinstance(exc, InvalidAction):
        kind = "invalid_action"
    elif isinstance(exc, LookupError):
        kind = "lookup"
    else:
        kind = "error"
    described = (type(exc).__qualname__, str(exc), kind, _details(exc))
    return wire.frame((wire.RAISED, described))


def _answer(value: Any) -> bytes:
    try:
        return wire.frame((wire.OK, value))
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        return raised(TypeError(f"the env returned what cannot be encoded: {exc}"))


def call_of(env: Any, maker: Maker, op: str, raw: msgspec.Raw) -> Any:
    """The env call a request names, made (a coroutine, for an async env)."""
    if op == "step":
        return env.step(wire.decode(raw, maker.action_type))
    if op == "reset":
        kwargs = wire.decode(raw, dict[str, Any])
        task = kwargs.get("task")
        if task is not None and maker.task_type is not None:
            kwargs["task"] = msgspec.convert(task, maker.task_type)
        return env.reset(**kwargs)
    if op == "state":
        return env.state()
    if op == "close":
        return env.close()
    if op == "snapshot":
        return env.snapshot()
    if op == "restore":
        data, episode_id = wire.decode(raw, tuple[bytes, str | None])
        return env.restore(data, episode_id=episode_id)
    if op == "load_state":
        return env.load_state(wire.decode(raw, maker.state_type))
    if op == "list_tools":
        return env.list_tools()
    if op == "call_tool":
        name, arguments = wire.decode(raw, tuple[str, Any])
        return env.call_tool(name, arguments)
    if op == "render":
        return env.render()
    raise ValueError(f"no env call {op!r}")


def _made(maker: Maker) -> tuple[Any, bytes]:
    """The env, and the first frame: its constructor's outcome."""
    try:
        env = maker.factory()
    except BaseException as exc:  # env code: even SystemExit is the env's failure
        return None, raised(exc)
    return env, wire.frame((wire.OK, None))


def serve_plain(sock: socket.socket, maker: Maker) -> None:
    """Answer the server's requests with a plain env, until `close` or end of file."""
    env, first = _made(maker)
    sock.sendall(first)
    if env is None:
        return
    buffer = bytearray()
    while True:
        body = wire.read_frame(sock, buffer)
        if body is None:  # the server dropped the session
            return
        op, raw = wire.read_request(body)
        try:
            answer = _answer(call_of(env, maker, op, raw))
        except BaseException as exc:
            answer = raised(exc)
        sock.sendall(answer)
        if op == "close":
            return


async def serve_async(sock: socket.socket, maker: Maker) -> None:
    """`serve_plain` for an env whose methods are coroutines, awaited on trio."""
    import trio

    env, first = _made(maker)
    sock.sendall(first)
    if env is None:
        return
    sock.setblocking(False)
    buffer = bytearray()
    while True:
        body = wire.split(buffer)
        if body is None:
            try:
                chunk = sock.recv(1 << 16)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            if not chunk:
                return
            buffer += chunk
            continue
        op, raw = wire.read_request(body)
        try:
            value = call_of(env, maker, op, raw)
            if inspect.isawaitable(value):
                value = await value
            answer = _answer(value)
        except BaseException as exc:
            if isinstance(exc, trio.Cancelled):
                raise
            answer = raised(exc)
        view = memoryview(answer)
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
        if op == "close":
            return


def worker(sock: socket.socket, maker: Maker, zygote: int) -> None:
    """A forked worker's life (it never returns: the process exits)."""
    status = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        die_with_parent(zygote)
        faulthandler.enable()  # a segfault's traceback on the server's stderr
        if maker.asynchronous:
            import trio

            trio.run(serve_async, sock, maker)
        else:
            serve_plain(sock, maker)
    except BaseException:  # the server went away mid-answer, or worse: nothing to tell
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


# --- the zygote ---------------------------------------------------------------------------------


class _Zygote:
    """The zygote's loop: spawn, kill, reap and report, until the server's end closes."""

    def __init__(self, control: socket.socket, maker: Maker) -> None:
        self.control = control
        self.maker = maker
        self.live: set[int] = set()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)

    def run(self) -> None:
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the poll
        poller = select.poll()
        poller.register(self.control, select.POLLIN)
        poller.register(self.wake_read, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self.wake_read in ready:
                    try:
                        os.read(self.wake_read, 4096)
                    except BlockingIOError:
                        pass
                self.reap()
                if self.control.fileno() in ready and not self.obey():
                    return
        finally:
            self.end()

    def obey(self) -> bool:
        """Do what the server asks; False at its end."""
        got = wire.receive_control(self.control)
        if got is None:
            return False
        message, _ = got
        if message[0] == wire.SPAWN:
            self.spawn(message[1])
        elif message[0] == wire.KILL and message[1] in self.live:
            try:
                os.kill(message[1], signal.SIGKILL)
            except ProcessLookupError:
                pass
        return True

    def spawn(self, ident: int) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        zygote = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            mine.close()
            theirs.close()
            wire.send_control(self.control, [wire.SPAWN_FAILED, ident, f"fork failed: {exc}"])
            return
        if pid == 0:
            try:
                self.control.close()
                os.close(self.wake_read)
                os.close(self.wake_write)
                mine.close()
            finally:
                worker(theirs, self.maker, zygote)
        theirs.close()
        self.live.add(pid)
        try:
            wire.send_control(self.control, [wire.SPAWNED, ident, pid], fd=mine.fileno())
        finally:
            mine.close()

    def reap(self) -> None:
        """Reap every worker that ended, and say how."""
        while self.live:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.live.discard(pid)
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            try:
                wire.send_control(self.control, [wire.EXITED, pid, code, sig])
            except OSError:  # the server is gone: its end of the socket says so next
                pass

    def end(self) -> None:
        """Kill and reap every worker still running."""
        for pid in list(self.live):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(self.live):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.live.clear()


def main(argv: list[str] | None = None) -> int:
    """`python -m ecotone.server.isolation.zygote FD PARENT`: the control socket's descriptor
    and the server's pid."""
    fd, parent = (int(arg) for arg in (argv if argv is not None else sys.argv[1:]))
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    got = wire.receive_control(control)
    if got is None:
        return 0
    message, _ = got
    if message[0] != wire.START:
        wire.send_control(control, [wire.READY, f"expected {wire.START!r}, got {message[0]!r}"])
        return 1
    recipe = msgspec.convert(message[1], wire.Recipe)
    sys.path[:0] = [entry for entry in recipe.path if entry not in sys.path]
    try:
        maker = maker_of(recipe)
    except BaseException as exc:
        wire.send_control(control, [wire.READY, f"{type(exc).__qualname__}: {exc}"])
        return 1
    if maker.asynchronous:
        import trio  # noqa: F401  (warm: every worker runs it)
    wire.send_control(control, [wire.READY, None])
    _Zygote(control, maker).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
