"""The server's side of a zygote: starting it, asking it for workers, hearing how they end.

`Zygote.start(recipe)` starts `python -m ecotone.server.isolation.zygote` with one end of a
control socket and waits until it has imported the env (or says why it could not).
`spawn()` asks for a worker and returns its pid and the server's end of its data socket;
`wait_exit(pid)` waits for the zygote's word on how a worker ended (`Exit`); `kill(pid)`
asks the zygote to kill one (it alone knows whether the pid is still its child, so a pid the
system gave to another process since is never signalled). A reader thread takes the
zygote's messages as they come. Every method may be called from any thread.

The zygote is started from one thread that lives as long as the process: PR_SET_PDEATHSIG
fires when the thread that forked a child ends, not only its process.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Final

import attrs

from ecotone.server.isolation import wire

log = logging.getLogger("ecotone.isolation")

START_TIMEOUT: Final = 60.0
"""Seconds a zygote may take to import the env and say it is ready."""
SPAWN_TIMEOUT: Final = 30.0
"""Seconds a fork may take to be answered."""
EXITS_KEPT: Final = 4096
"""Exit statuses kept for workers nobody asked about (the oldest go first)."""

_spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ecotone-zygotes")


class ZygoteDied(RuntimeError):
    """The zygote is gone (or could not start): no worker can be had from it."""


@attrs.frozen
class Exit:
    """How a worker ended: its exit status, or the signal that killed it (both None: not
    known, its zygote died too)."""

    status: int | None
    signal: int | None

    def __str__(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "signal"
            return f"killed by signal {name} ({self.signal})"
        if self.status is not None:
            return f"exited with status {self.status}"
        return "ended, how is not known (its zygote died too)"

    def details(self) -> dict[str, Any]:
        """The same, as an error's details."""
        name = None
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = str(self.signal)
        return {"exit_status": self.status, "signal": name}


class Zygote:
    """A running zygote, for one env."""

    def __init__(self, process: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.process = process
        self.control = control
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._spawned: dict[int, tuple[int, int] | str] = {}
        """Answers to spawns, by request id: (pid, fd), or why not."""
        self._exits: dict[int, Exit] = {}
        self._live: set[int] = set()
        self.dead = False
        self._reader = threading.Thread(target=self._read, name="ecotone-zygote", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, recipe: wire.Recipe, timeout: float = START_TIMEOUT) -> Zygote:
        """A zygote that has made ready `recipe`'s env.

        Raises:
            ZygoteDied: It could not (the env did not import, say), or did not say in time.
        """
        return _spawner.submit(cls._start, recipe, timeout).result()

    @classmethod
    def _start(cls, recipe: wire.Recipe, timeout: float) -> Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ecotone.server.isolation.zygote",
                    str(theirs.fileno()),
                    str(os.getpid()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # env code's prints go to the server's stderr: its stdout may be a transport's
                stdout=2,
                start_new_session=True,  # a terminal's Ctrl-C is the server's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            wire.send_control(ours, [wire.START, recipe])
            ours.settimeout(timeout)
            got = wire.receive_control(ours)
            ours.settimeout(None)
        except (OSError, TimeoutError) as exc:
            got = None
            why = f"it did not answer ({exc})"
        else:
            why = "it exited"
        if got is None or got[0][0] != wire.READY or got[0][1] is not None:
            if got is not None:
                why = str(got[0][1])
            ours.close()
            _end(process)
            raise ZygoteDied(f"the env's zygote could not make {recipe.name!r} ready: {why}")
        return cls(process, ours)

    # --- asking ---------------------------------------------------------------------------------

    def spawn(self, timeout: float = SPAWN_TIMEOUT) -> tuple[int, socket.socket]:
        """A new worker: its pid and the server's end of its data socket (blocking).

        Raises:
            ZygoteDied: The zygote is gone, or could not fork.
        """
        ident = next(self._ids)
        self._send([wire.SPAWN, ident])
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._spawned:
                left = deadline - time.monotonic()
                if self.dead or left <= 0:
                    raise ZygoteDied("the env's zygote is gone" if self.dead else "no fork came")
                self._cond.wait(left)
            answer = self._spawned.pop(ident)
        if isinstance(answer, str):
            raise ZygoteDied(answer)
        pid, fd = answer
        return pid, socket.socket(fileno=fd)

    def wait_exit(self, pid: int, timeout: float) -> Exit | None:
        """How worker `pid` ended, once the zygote has reaped it (None: not within
        `timeout` seconds); told once."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while pid not in self._exits:
                left = deadline - time.monotonic()
                if self.dead:
                    self._live.discard(pid)
                    return Exit(None, None)
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._exits.pop(pid)

    def kill(self, pid: int) -> None:
        """Ask the zygote to SIGKILL worker `pid` (if it still runs)."""
        try:
            self._send([wire.KILL, pid])
        except ZygoteDied:  # its workers died with it
            pass

    def workers(self) -> set[int]:
        """The workers that have not ended (or whose end was not told yet)."""
        with self._cond:
            return set(self._live)

    def stop(self, timeout: float = 5.0) -> None:
        """End the zygote: it kills its workers and exits (killed after `timeout`)."""
        try:
            self.control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _end(self.process, timeout)
        self._reader.join(timeout)
        self.control.close()

    # --- the reader thread ------------------------------------------------------------------

    def _send(self, message: list[Any]) -> None:
        with self._send_lock:
            if self.dead:
                raise ZygoteDied("the env's zygote is gone")
            try:
                wire.send_control(self.control, message)
            except OSError as exc:
                raise ZygoteDied(f"the env's zygote is gone ({exc})") from exc

    def _read(self) -> None:
        try:
            while True:
                got = wire.receive_control(self.control)
                if got is None:
                    return
                self._heard(*got)
        except (OSError, ValueError):  # stopped: the socket is shut
            pass
        finally:
            with self._cond:
                self.dead = True
                for answer in self._spawned.values():  # nobody will take these sockets
                    if not isinstance(answer, str):
                        os.close(answer[1])
                self._spawned.clear()
                self._cond.notify_all()
            if self.process.poll() is not None and self.process.returncode:
                log.warning("the env's zygote ended with status %s", self.process.returncode)

    def _heard(self, message: list[Any], fds: list[int]) -> None:
        kind = message[0]
        with self._cond:
            if kind == wire.SPAWNED and fds:
                _, ident, pid = message
                self._spawned[ident] = (pid, fds.pop(0))
                self._live.add(pid)
            elif kind == wire.SPAWN_FAILED:
                self._spawned[message[1]] = str(message[2])
            elif kind == wire.EXITED:
                _, pid, status, sig = message
                self._live.discard(pid)
                self._exits[pid] = Exit(status, sig)
                while len(self._exits) > EXITS_KEPT:
                    del self._exits[next(iter(self._exits))]
            self._cond.notify_all()
        for fd in fds:  # nothing else carries descriptors
            os.close(fd)


def _end(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Wait for `process` to exit, killing it after `timeout`; reaped either way."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
