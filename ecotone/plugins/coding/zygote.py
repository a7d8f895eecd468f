"""Fast sandboxed runs: a pool of pre-started bubblewrap sandboxes, each holding a zygote.

A fresh run (`Sandbox.run`) starts bubblewrap and a new interpreter twice per step, and those
starts are most of a short run's time (docs/benchmarks.md, "Sandboxed runs: fresh interpreter
vs zygote", has the figures). Here each sandbox is started once, with the same namespaces,
mounts, seccomp filter and cgroup as a fresh run, and its first process is a *zygote*: the
harness as PID 1 of the sandbox's pid namespace, the standard library's common modules already
imported. For a run it forks a child that becomes the run (its limits set, its descriptors its
own); when the run ends the zygote kills every other process in the namespace, reaps them, and
empties the writable directories (/scratch, /tmp, /dev/shm), so that the next run starts from
the same state as the first. Memory (a forked copy), environment variables, imported modules
and processes cannot carry over; the tests in `tests/test_sandbox_zygote.py` try each. What the
zygote protocol looks like is in `harness.py`.

`pool_for(sandbox)` is the process-wide pool for a bubblewrap sandbox: zygotes are started on
demand (up to `$ECOTONE_CODING_ZYGOTES`, default 32), kept while idle, replaced when one dies,
and stopped at exit or `close()`. `Pool.prestart(n)` starts `n` ahead of the first run.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import os
import select
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, Final

import attrs

from ecotone.plugins.coding import cgroups
from ecotone.plugins.coding.sandbox import (
    SCRATCH_MOUNT,
    Completed,
    Limits,
    Sandbox,
    _bwrap_command,
    _child_env,
    _memfd,
    _python_argv,
    output_of,
)

log = logging.getLogger("ecotone.plugins.coding")

ZYGOTES_ENV_VAR: Final = "ECOTONE_CODING_ZYGOTES"
DEFAULT_ZYGOTES: Final = 32
WIPED: Final = (SCRATCH_MOUNT, "/tmp", "/dev/shm")
"""The sandbox's writable directories, emptied after every run."""
HEADROOM_BYTES: Final = 48 * 1024 * 1024
"""Memory of the cgroup beyond the run's own: the zygote and bwrap themselves."""
HEADROOM_PIDS: Final = 2
START_TIMEOUT_S: Final = 30.0
GRACE_S: Final = 10.0
"""How long past a run's timeout the zygote may take to answer before it is thought hung."""
_HEADER: Final = 4


class ZygoteDied(RuntimeError):
    """The zygote stopped answering, or its sandbox exited (`during_run`: after a run was
    handed to it)."""

    def __init__(self, message: str, *, during_run: bool = True) -> None:
        super().__init__(message)
        self.during_run = during_run


# PR_SET_PDEATHSIG (bwrap's --die-with-parent) fires when the *thread* that started bwrap ends,
# so sandboxes are started from one thread that lives as long as the process.
_spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ecotone-zygotes")


def _zygote_command(sandbox: Sandbox, filter_fd: int | None) -> list[str]:
    base = [*sandbox.bwrap, "--as-pid-1"]
    config = {"wipe": list(WIPED)}
    argv = _python_argv(sandbox.python, ["zygote", json.dumps(config)])
    return _bwrap_command(base, None, argv, seccomp_fd=filter_fd)


@attrs.define(eq=False)
class Zygote:
    """One started sandbox and the zygote in it; runs one at a time."""

    proc: subprocess.Popen[bytes]
    group: cgroups.RunGroup | None
    limits: cgroups.RunLimits | None = None
    retired: str = ""
    """Why the zygote ended itself after its last run (a state it could not undo)."""

    @classmethod
    def start(cls, sandbox: Sandbox) -> Zygote:
        if sandbox.kind != "bwrap":
            raise ValueError("a zygote needs bubblewrap's pid namespace")
        return _spawner.submit(cls._start, sandbox).result()

    @classmethod
    def _start(cls, sandbox: Sandbox) -> Zygote:
        group = None
        if sandbox.cgroups.usable:
            group = cgroups.RunGroup.make(sandbox.cgroups, _run_limits(Limits()))
        filter_fd = None
        try:
            if sandbox.seccomp is not None:
                filter_fd = _memfd("seccomp", sandbox.seccomp)
            cmd = _zygote_command(sandbox, filter_fd)
            if group is not None:
                cmd = group.command(cmd)
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                env=_child_env("/", "/tmp"),
                pass_fds=() if filter_fd is None else (filter_fd,),
                start_new_session=True,
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
        zygote = cls(proc, group, _run_limits(Limits()) if group is not None else None)
        try:
            ready, _ = zygote._receive(time.monotonic() + START_TIMEOUT_S)
            if not ready.get("ready"):
                raise ZygoteDied(f"the zygote did not start: {ready}")
        except BaseException as exc:
            why = zygote._stderr()
            zygote.close()
            if why and isinstance(exc, ZygoteDied):
                raise ZygoteDied(f"{exc}: {why}") from exc
            raise
        return zygote

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self,
        code: str,
        mode: str,
        limits: Limits,
        *,
        stdin: bytes = b"",
        results: bool = False,
    ) -> Completed:
        """One run of the harness (`mode` "run" or "test") on `code`."""
        self._limit(_run_limits(limits))
        before = self.counts()
        solution = code.encode("utf-8", errors="surrogatepass")
        request = {
            "mode": mode,
            "limits": limits.for_child(),
            "timeout": limits.timeout_s,
            "cwd": SCRATCH_MOUNT,
            "results": results,
            "output_bytes": limits.output_bytes,
            "results_cap": limits.file_bytes,
            "solution_bytes": len(solution),
            "stdin_bytes": len(stdin),
        }
        self._send(request, solution, stdin)
        reply, blobs = self._receive(time.monotonic() + limits.timeout_s + GRACE_S)
        out, err, res = blobs
        self.retired = reply.get("retire", "")
        return Completed(
            exit_code=reply["status"],
            timed_out=reply["timed_out"],
            stdout=output_of(out, reply["stdout_size"], limits.output_bytes),
            stderr=output_of(err, reply["stderr_size"], limits.output_bytes),
            duration_s=reply["duration"],
            results=res,
            limits_hit=self.limits_hit(before),
        )

    def counts(self) -> dict[str, int]:
        """The cgroup's limit counters now (`cgroups.RunGroup.counts`)."""
        return self.group.counts() if self.group is not None else {}

    def limits_hit(self, before: dict[str, int]) -> tuple[str, ...]:
        return tuple(self.group.limits_hit(before)) if self.group is not None else ()

    def _limit(self, wanted: cgroups.RunLimits | None) -> None:
        if self.group is None or wanted is None or wanted == self.limits:
            return
        self.group.limit(wanted)
        self.limits = wanted

    def _send(self, header: dict[str, Any], *blobs: bytes) -> None:
        body = json.dumps(header).encode()
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(len(body).to_bytes(_HEADER, "big") + body + b"".join(blobs))
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise ZygoteDied(f"the zygote is gone ({exc})", during_run=False) from exc

    def _receive(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        size = int.from_bytes(_read(fd, _HEADER, deadline), "big")
        header = json.loads(_read(fd, size, deadline))
        blobs = [_read(fd, n, deadline) if n else b"" for n in header.get("sent", [])]
        return header, blobs

    def _stderr(self) -> str:
        """What the zygote wrote to stderr, once it has exited (else "")."""
        stream: IO[bytes] | None = self.proc.stderr
        if stream is None or self.alive:
            return ""
        try:
            return stream.read(4096).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        """End the sandbox now (bwrap; --die-with-parent takes the zygote) and reap it."""
        if self.alive:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """Stop the sandbox: its zygote, and (its cgroup) anything left in it."""
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if self.alive:
            try:
                self.proc.wait(1.0)  # closing its stdin ends the zygote, then bwrap
            except subprocess.TimeoutExpired:
                self.proc.kill()  # bwrap; --die-with-parent takes the zygote
                self.proc.wait()
        if self.group is not None:
            self.group.remove()


def _read(fd: int, n: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while n:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise ZygoteDied("the zygote did not answer in time")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise ZygoteDied("the zygote exited")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _run_limits(limits: Limits) -> cgroups.RunLimits:
    run = limits.for_run()
    return cgroups.RunLimits(run.memory_bytes + HEADROOM_BYTES, run.pids + HEADROOM_PIDS, run.cpus)


def _pool_size() -> int:
    raw = os.environ.get(ZYGOTES_ENV_VAR, "")
    if not raw:
        return DEFAULT_ZYGOTES
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"{ZYGOTES_ENV_VAR} must be a whole number >= 1, got {raw!r}")
    return size


class Pool:
    """Zygotes of one sandbox, shared by every session of the process (each run is isolated
    from every other, whoever asked for it). Thread-safe; `run` has `Sandbox.run`'s shape."""

    def __init__(self, sandbox: Sandbox, size: int | None = None) -> None:
        self.sandbox = sandbox
        self.size = size if size is not None else _pool_size()
        self._idle: list[Zygote] = []
        self._count = 0
        self._closed = False
        self._cond = threading.Condition()

    @property
    def started(self) -> int:
        """Zygotes running now (idle or busy)."""
        with self._cond:
            return self._count

    def prestart(self, n: int) -> None:
        """Start zygotes until `n` (at most the pool's size) are running."""
        while True:
            with self._cond:
                if self._closed or self._count >= min(n, self.size):
                    return
                self._count += 1
            try:
                zygote = Zygote.start(self.sandbox)
            except BaseException:
                self._forget()
                raise
            self._release(zygote)

    def run(
        self,
        parent: Path | None,
        code: str,
        args: list[str],
        limits: Limits,
        *,
        stdin: bytes = b"",
        results: bool = False,
    ) -> Completed:
        """Run the harness (`args[0]`: "run" or "test") on `code` in a zygote of the pool."""
        del parent  # runs see only their sandbox's own scratch directory
        for attempt in (1, 2):
            zygote = self._acquire()
            before: dict[str, int] = {}
            try:
                before = zygote.counts()
                done = zygote.run(code, args[0], limits, stdin=stdin, results=results)
            except ZygoteDied as exc:
                hit = zygote.limits_hit(before)
                zygote.kill()
                why = zygote._stderr()  # its traceback, if it left one, before the pipes go
                zygote.close()
                self._forget()
                if why:
                    exc = ZygoteDied(f"{exc}: {why}", during_run=exc.during_run)
                if attempt == 1 and not exc.during_run:
                    continue  # it died idle: the run never began, so start it again
                log.warning("coding env: a sandbox died during a run: %s", exc)
                note = "[the sandbox was killed during the run]"
                return Completed(
                    exit_code=-9,
                    timed_out=False,
                    stdout=output_of(b"", 0, limits.output_bytes),
                    stderr=output_of(note.encode(), len(note), limits.output_bytes),
                    duration_s=0.0,
                    limits_hit=hit,
                )
            except BaseException:
                zygote.close()
                self._forget()
                raise
            self._release(zygote)
            return done
        raise AssertionError("unreachable")

    def _acquire(self) -> Zygote:
        with self._cond:
            while True:
                if self._closed:
                    raise ZygoteDied("the pool is closed")
                while self._idle:
                    zygote = self._idle.pop()
                    if zygote.alive:
                        return zygote
                    self._count -= 1
                    zygote.close()
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return Zygote.start(self.sandbox)
        except BaseException:
            self._forget()
            raise

    def _release(self, zygote: Zygote) -> None:
        if zygote.retired:
            log.info("coding env: a sandbox ended after its run: %s", zygote.retired)
        with self._cond:
            if not self._closed and not zygote.retired:
                self._idle.append(zygote)
                self._cond.notify()
                return
            self._count -= 1
        zygote.close()

    def _forget(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def close(self) -> None:
        """Stop every idle zygote now, and each busy one when its run ends."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for zygote in idle:
            zygote.close()


_pools: dict[Sandbox, Pool] = {}
_pools_lock = threading.Lock()


def pool_for(sandbox: Sandbox) -> Pool:
    """The process-wide pool of `sandbox` (a bubblewrap one)."""
    with _pools_lock:
        pool = _pools.get(sandbox)
        if pool is None:
            pool = _pools[sandbox] = Pool(sandbox)
        return pool


@atexit.register
def close_all() -> None:
    """Stop every pool's zygotes (at exit; their sandboxes would die with us anyway)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


__all__ = ["Pool", "Zygote", "ZygoteDied", "pool_for"]
