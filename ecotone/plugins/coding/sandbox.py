"""Running untrusted Python in a separate, limited process: bubblewrap when usable, else rlimits.

`sandbox_for(mode)` returns the process-wide `Sandbox` for a mode (`auto`, `bwrap`,
`rlimits`), probing bubblewrap once. `Sandbox.run` writes the code as `solution.py` into a fresh
scratch directory, runs the trusted harness (`harness.py`) on it in a new interpreter
(`python -I`: isolated mode, clean environment) and returns what happened. What each kind
guarantees is in the package docstring (`ecotone.plugins.coding`).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import IO, Literal

import attrs

from ecotone.plugins.coding import cgroups, harness, landlock, seccomp

log = logging.getLogger("ecotone.plugins.coding")

SandboxKind = Literal["bwrap", "rlimits-only"]
SandboxMode = Literal["auto", "bwrap", "rlimits"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "rlimits")
SOLUTION = "solution.py"
SCRATCH_MOUNT = "/scratch"
"""Where the scratch directory appears inside bubblewrap (the working directory)."""
SANDBOX_UID = 65534
"""The uid and gid the code runs as inside bubblewrap's user namespace (`nobody`)."""
TMP_BYTES = 64 * 1024 * 1024
"""Size of the private /tmp (a tmpfs, in memory) inside bubblewrap."""
SCRATCH_BYTES = 32 * 1024 * 1024
"""Size of the scratch directory (a tmpfs) inside bubblewrap: what the code may write there."""
SHM_BYTES = 16 * 1024 * 1024
"""Size of /dev/shm inside bubblewrap; the rest of /dev and the root are read-only."""
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxUnavailable(RuntimeError):
    """The sandbox asked for (`bwrap`) cannot run here."""


@attrs.frozen
class Limits:
    """What one run may use."""

    timeout_s: float = 5.0
    """Wall-clock seconds, from spawn; then the process and everything it started are killed."""
    memory_mb: int = 256
    """Address space (RLIMIT_AS) of each process, in MiB."""
    cpu_s: float | None = None
    """CPU seconds per process (RLIMIT_CPU; SIGXCPU, then SIGKILL a second later). None: the
    timeout, rounded up."""
    output_bytes: int = 16384
    """Bytes of stdout and of stderr returned; the rest is cut and flagged."""
    file_bytes: int = 8 * 1024 * 1024
    """Largest file the code may write, stdout and stderr included (RLIMIT_FSIZE): past it a
    write fails with EFBIG ("File too large")."""
    open_files: int = 256
    """RLIMIT_NOFILE."""
    pids: int = 64
    """Processes and threads of the whole run at once (its cgroup's `pids.max`)."""
    cpus: float = 1.0
    """CPU of the whole run per wall second (its cgroup's quota; 1.0: one core)."""

    def for_run(self) -> cgroups.RunLimits:
        """The whole run's limits (its cgroup): memory is `memory_mb` for all its processes
        together, as well as RLIMIT_AS for each."""
        return cgroups.RunLimits(self.memory_mb * 1024 * 1024, self.pids, self.cpus)

    def for_child(self) -> dict[str, int]:
        return {
            "memory_bytes": self.memory_mb * 1024 * 1024,
            "cpu_s": max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s)),
            "file_bytes": self.file_bytes,
            "open_files": self.open_files,
        }


@attrs.frozen
class Output:
    text: str
    """The first `output_bytes` bytes, decoded (UTF-8, errors replaced), plus a note if cut."""
    truncated: bool
    size: int
    """Bytes the process wrote."""


@attrs.frozen
class Completed:
    """One finished run."""

    exit_code: int
    """The process's exit status; negative: killed by that signal (under bwrap, a status above
    128 is read as 128 + signal, as shells do)."""
    timed_out: bool
    stdout: Output
    stderr: Output
    duration_s: float
    results: bytes = b""
    """What the harness wrote to its results descriptor (test runs only)."""
    limits_hit: tuple[str, ...] = ()
    """Run-wide limits the run ran into (`memory`, `pids`), as its cgroup counted them."""


@functools.cache
def harness_source() -> str:
    return resources.files(__package__).joinpath("harness.py").read_text("utf-8")


def base_python() -> str:
    """The interpreter the sandbox runs: the base installation, never the server's venv (whose
    site-packages would leak the server's packages, and which may sit in its working tree)."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def _python_roots(python: str) -> list[str]:
    """Directories outside the system dirs that the interpreter needs, read-only."""
    roots: list[str] = []
    for path in (sys.base_prefix, os.path.realpath(sys.base_prefix), os.path.dirname(python)):
        path = os.path.realpath(path) if os.path.isdir(path) else ""
        if not path or path == "/":
            continue
        if any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS):
            continue
        if any(path == r or path.startswith(r + "/") for r in roots):
            continue
        roots.append(path)
    return roots


def _read_roots(python: str) -> list[str]:
    """What a run may read of the host: the system directories and the interpreter's."""
    return [d for d in _SYSTEM_DIRS if os.path.isdir(d)] + _python_roots(python)


def _bwrap_args(python: str, user_namespace: bool, no_nesting: bool = True) -> list[str]:
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if user_namespace:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        if no_nesting:
            args.append("--disable-userns")  # no user namespaces inside (bwrap >= 0.8)
    args += ["--hostname", "sandbox", "--clearenv"]
    for name, value in _child_env(SCRATCH_MOUNT, tmp="/tmp").items():
        args += ["--setenv", name, value]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for root in _python_roots(python):
        args += ["--ro-bind", root, root]
    args += landlock.bwrap_masks(_read_roots(python))  # the server's package, if beneath
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    return args


def _bwrap_command(
    base: Sequence[str],
    scratch: str | None,
    argv: Sequence[str],
    *,
    solution_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The full bwrap command line: `base`; the scratch directory as the cwd: the host
    directory `scratch`, read-write, or (None) a size-capped tmpfs, holding `solution.py`
    copied from `solution_fd` if given; the seccomp filter from `seccomp_fd`; the root (a
    tmpfs of mount points) made read-only last; then the command."""
    cmd = list(base)
    if scratch is None:
        cmd += ["--size", str(SCRATCH_BYTES), "--tmpfs", SCRATCH_MOUNT]
        if solution_fd is not None:
            cmd += ["--file", str(solution_fd), f"{SCRATCH_MOUNT}/{SOLUTION}"]
    else:
        cmd += ["--bind", scratch, SCRATCH_MOUNT]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += ["--remount-ro", "/"]
    return [*cmd, "--chdir", SCRATCH_MOUNT, "--", *argv]


def _memfd(name: str, data: bytes) -> int:
    """A file in memory holding `data`, read from its start (for bwrap's `--file`, `--seccomp`)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _child_env(home: str, tmp: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8"}


def _python_argv(python: str, args: Sequence[str]) -> list[str]:
    return [python, "-I", "-u", "-B", "-X", "utf8", "-c", harness_source(), *args]


@attrs.frozen(kw_only=True, slots=True)
class _ChildFiles:
    """What a run's process is handed: its standard streams, and descriptors it inherits."""

    stdin: IO[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    pass_fds: tuple[int, ...]
    """Descriptors beyond the standard three (the results descriptor, when asked for)."""


@attrs.frozen
class Sandbox:
    """How to start a limited process; one per mode per server process, shared by sessions."""

    kind: SandboxKind
    python: str
    bwrap: tuple[str, ...] = ()
    """`bwrap` and its arguments (empty for rlimits-only)."""
    seccomp: bytes | None = None
    """The seccomp filter bwrap loads (`ecotone.plugins.coding.seccomp`), if any."""
    cgroups: cgroups.Support = attrs.field(factory=lambda: cgroups.Support("none"))
    """Where run-wide limits come from (cgroup v2, v1), or why there are none."""
    walls: landlock.Walls | None = None
    """rlimits-only: the Landlock walls each run raises before the submission starts, where
    this kernel offers Landlock (its capabilities are dropped either way)."""

    @property
    def isolation(self) -> list[str]:
        """What guards a run, as observations say it: the sandbox kind, then its parts."""
        parts: list[str] = [self.kind]
        if self.kind == "bwrap":
            if "--disable-userns" in self.bwrap:
                parts.append("no-user-namespaces")
            parts.append("seccomp" if self.seccomp is not None else "no-seccomp")
        else:
            parts.append("landlock" if self.walls is not None else "no-landlock")
        if self.cgroups.usable:
            parts.append(f"cgroup-{self.cgroups.kind}")
        else:
            parts.append("per-process-limits-only")
        return parts

    def run(
        self,
        parent: Path,
        code: str,
        args: Sequence[str],
        limits: Limits,
        *,
        stdin: bytes = b"",
        results: bool = False,
    ) -> Completed:
        """Run the harness with `args` (and, if `results`, the results descriptor's number
        appended) on `code` in a fresh directory under `parent`, removed afterwards."""
        rundir = Path(tempfile.mkdtemp(prefix="run-", dir=parent))
        try:
            scratch, private = rundir / "scratch", rundir / "io"
            scratch.mkdir()
            private.mkdir(mode=0o700)
            (scratch / SOLUTION).write_text(code, encoding="utf-8", errors="surrogatepass")
            (private / "stdin").write_bytes(stdin)
            with (
                open(private / "stdin", "rb") as fin,
                open(private / "stdout", "wb") as fout,
                open(private / "stderr", "wb") as ferr,
                open(private / "results", "wb") as fres,
            ):
                (private / "stdin").unlink()  # the open descriptor is all the child gets
                argv = [*args, str(fres.fileno())] if results else list(args)
                files = _ChildFiles(
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    pass_fds=(fres.fileno(),) if results else (),
                )
                exit_code, timed_out, duration, hit = self._spawn(scratch, argv, limits, files)
            # Outside bubblewrap the code ran in a host directory of a random name: show it as
            # bubblewrap's /scratch, so that tracebacks neither reveal the host's layout nor
            # differ between two runs of the same code.
            host = None if self.kind == "bwrap" else (str(scratch), os.path.realpath(scratch))
            return Completed(
                exit_code=exit_code,
                timed_out=timed_out,
                stdout=_read_output(private / "stdout", limits.output_bytes, host),
                stderr=_read_output(private / "stderr", limits.output_bytes, host),
                duration_s=duration,
                results=(private / "results").read_bytes() if results else b"",
                limits_hit=hit,
            )
        finally:
            remove_tree(rundir)

    def _spawn(
        self, scratch: Path, args: Sequence[str], limits: Limits, files: _ChildFiles
    ) -> tuple[int, bool, float, tuple[str, ...]]:
        given: dict[str, object] = dict(limits.for_child())
        if self.kind != "bwrap" and sys.platform.startswith("linux"):
            # no capabilities, and the Landlock walls if any
            given["walls"] = self.walls.for_run(str(scratch)) if self.walls else None
        child = _python_argv(self.python, [*args[:1], json.dumps(given), *args[1:]])
        extra: list[int] = []
        try:
            if self.kind == "bwrap":
                solution = _memfd("solution", (scratch / SOLUTION).read_bytes())
                extra.append(solution)
                filter_fd = None
                if self.seccomp is not None:
                    filter_fd = _memfd("seccomp", self.seccomp)
                    extra.append(filter_fd)
                cmd = _bwrap_command(
                    self.bwrap, None, child, solution_fd=solution, seccomp_fd=filter_fd
                )
                env = _child_env("/", "/tmp")
                cwd = "/"
            else:
                cmd, env, cwd = child, _child_env(str(scratch), str(scratch)), str(scratch)
            group = (
                cgroups.RunGroup.make(self.cgroups, limits.for_run())
                if self.cgroups.usable
                else None
            )
            try:
                if group is not None:
                    cmd = group.command(cmd)
                started = time.monotonic()
                proc = subprocess.Popen(
                    cmd,
                    stdin=files.stdin,
                    stdout=files.stdout,
                    stderr=files.stderr,
                    cwd=cwd,
                    env=env,
                    pass_fds=(*files.pass_fds, *extra),
                    start_new_session=True,  # its own process group, killed as a whole
                )
                try:
                    exited = _wait_for_exit(proc, limits.timeout_s)
                finally:
                    # Everything, even after a normal exit: nothing the code started outlives
                    # the run (the cgroup holds what left the group: setsid, double forks).
                    if group is not None:
                        group.kill()
                    _kill_group(proc)
                hit = tuple(group.limits_hit()) if group is not None else ()
            finally:
                if group is not None:
                    group.remove()
        finally:
            for fd in extra:
                os.close(fd)
        duration = time.monotonic() - started
        code = proc.returncode
        if self.kind == "bwrap" and 128 < code < 128 + signal.NSIG:
            code = 128 - code
        return code, not exited, duration, hit


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to `timeout` for the process to exit, without reaping it where the platform
    allows (a pidfd), so its pid, the group's id, cannot be reused before the group is
    killed."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(left * 1000):
                return True
    finally:
        os.close(pidfd)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_output(path: Path, cap: int, scratch: tuple[str, ...] | None = None) -> Output:
    """`output_of` the file at `path`; the host paths `scratch` (the directory as given, and
    resolved) written as SCRATCH_MOUNT."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        data = f.read(cap)
    for host in sorted(set(scratch or ()), key=len, reverse=True):
        data = data.replace(host.encode(), SCRATCH_MOUNT.encode())
    return output_of(data, size, cap)


def output_of(data: bytes, size: int, cap: int) -> Output:
    """What a run wrote (its first `cap` bytes, of `size` in all), as observations show it."""
    text = data[:cap].decode("utf-8", errors="replace")
    truncated = size > cap
    if truncated:
        text += f"\n[output truncated: {size} bytes written, the first {cap} shown]"
    return Output(text=text, truncated=truncated, size=size)


def remove_tree(path: Path | str) -> None:
    """Remove a directory tree the sandboxed code may have made awkward (mode 000 dirs)."""

    def unlock(fn: object, failed: str, exc: object) -> None:
        parent = os.path.dirname(failed)
        for p in (parent, failed):
            try:
                os.chmod(p, stat.S_IRWXU)
            except OSError:
                pass
        try:
            if os.path.isdir(failed) and not os.path.islink(failed):
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)
        except OSError:
            pass

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)


# --- choosing the sandbox -------------------------------------------------------------------

_lock = threading.Lock()
_chosen: dict[SandboxMode, Sandbox] = {}
_warned = False


def _probe(bwrap: str, python: str) -> tuple[tuple[str, ...] | None, str]:
    """The first bwrap argument set that runs the interpreter here (the strongest first), or
    None and why not."""
    why = ""
    for user_namespace, no_nesting in ((True, True), (True, False), (False, False)):
        cmd = (bwrap, *_bwrap_args(python, user_namespace, no_nesting))
        with tempfile.TemporaryDirectory(prefix="ecotone-bwrap-probe-") as scratch:
            check = [python, "-I", "-c", "open('probe', 'w').write('ok')"]
            probe = _bwrap_command(cmd, scratch, check)
            try:
                done = subprocess.run(
                    probe, capture_output=True, timeout=30, env=_child_env("/", "/tmp")
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                why = str(exc)
                continue
            if done.returncode == 0 and Path(scratch, "probe").read_text() == "ok":
                return cmd, ""
            why = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
    return None, why


def sandbox_for(mode: SandboxMode) -> Sandbox:
    """The sandbox for `mode`: `bwrap` (required: SandboxUnavailable if it cannot run),
    `rlimits` (forced), or `auto` (bwrap if it works here, else rlimits-only with a warning,
    logged once per process)."""
    global _warned
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(SANDBOX_MODES)}, got {mode!r}")
    with _lock:
        if mode in _chosen:
            return _chosen[mode]
        python = base_python()
        why = "forced by configuration"
        if mode != "rlimits":
            found = shutil.which("bwrap")
            if found is None:
                why = "bwrap (bubblewrap) is not installed"
            else:
                args, why = _probe(found, python)
                if args is not None:
                    filter_ = _probe_seccomp(args, python)
                    _chosen[mode] = Sandbox(
                        kind="bwrap",
                        python=python,
                        bwrap=args,
                        seccomp=filter_,
                        cgroups=_cgroups(),
                    )
                    return _chosen[mode]
                why = f"bwrap cannot run here: {why}"
            if mode == "bwrap":
                raise SandboxUnavailable(f"the coding env requires bubblewrap, but {why}")
        walls = _probe_walls(python)
        if not _warned:
            _warned = True
            log.warning(
                "coding env: submitted code runs without bubblewrap (%s): %s; install "
                "bubblewrap for isolation",
                why,
                "behind Landlock walls (the host's files, TCP, signals and ptrace out of "
                "reach) and with no capabilities, but in the host's namespaces"
                if walls is not None
                else "a separate process with resource limits, but it can read and write "
                "whatever this server's user can, and reach the network",
            )
        _chosen[mode] = Sandbox(kind="rlimits-only", python=python, cgroups=_cgroups(), walls=walls)
        return _chosen[mode]


def _cgroups() -> cgroups.Support:
    found = cgroups.support()
    if not found.usable:
        log.warning(
            "coding env: no cgroups (%s): memory and process limits hold per process, not "
            "for a whole run",
            found.why,
        )
    return found


def _probe_seccomp(args: tuple[str, ...], python: str) -> bytes | None:
    """This machine's seccomp filter, if bwrap loads it and the interpreter runs under it."""
    filter_ = seccomp.program()
    if filter_ is None:
        log.warning("coding env: no seccomp filter for this architecture")
        return None
    with tempfile.TemporaryDirectory(prefix="ecotone-bwrap-probe-") as scratch:
        fd = _memfd("seccomp", filter_)
        try:
            check = [python, "-I", "-c", "open('probe', 'w').write('ok')"]
            cmd = _bwrap_command(args, scratch, check, seccomp_fd=fd)
            done = subprocess.run(
                cmd, capture_output=True, timeout=30, env=_child_env("/", "/tmp"), pass_fds=(fd,)
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("coding env: bwrap cannot load the seccomp filter: %s", exc)
            return None
        finally:
            os.close(fd)
        if done.returncode != 0 or Path(scratch, "probe").read_text() != "ok":
            log.warning(
                "coding env: bwrap cannot load the seccomp filter: %s",
                done.stderr.decode("utf-8", "replace").strip(),
            )
            return None
    return filter_


def _probe_walls(python: str) -> landlock.Walls | None:
    """The Landlock walls of rlimits-only runs, if a run behind them works here: it writes its
    scratch directory and cannot see what is hidden (`landlock.hidden_paths`)."""
    abi = harness.landlock_abi()
    if abi < 1:
        log.warning("coding env: no Landlock in this kernel: rlimits-only runs see this host")
        return None
    walls = landlock.Walls(
        abi=abi, read=tuple(landlock.readable(_read_roots(python), landlock.hidden_paths()))
    )
    code = (
        "import os\n"
        "open('probe', 'w').write('ok')\n"
        f"for path in {list(landlock.hidden_paths())!r}:\n"
        "    try:\n"
        "        os.listdir(path)\n"
        "        print('READ', path)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    with tempfile.TemporaryDirectory(prefix="ecotone-landlock-probe-") as scratch:
        Path(scratch, SOLUTION).write_text(code)
        limits = {**Limits(timeout_s=30).for_child(), "walls": walls.for_run(scratch)}
        argv = _python_argv(python, ["run", json.dumps(limits)])
        try:
            done = subprocess.run(
                argv, cwd=scratch, capture_output=True, timeout=30, env=_child_env(scratch, scratch)
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
        else:
            why = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
            probe = Path(scratch, "probe")
            if done.returncode == 0 and probe.exists() and probe.read_text() == "ok":
                why = done.stdout.decode("utf-8", "replace").strip()  # READ: not hidden
    if why:
        log.warning("coding env: no Landlock walls for rlimits-only runs: %s", why)
        return None
    return walls
