"""The trusted first code of every `coding` run, executed inside the sandbox.

The server reads this file's text (and a constant or two) and runs it in a fresh interpreter as
`python -I -u -B -X utf8 -c <this file> MODE LIMITS [FD]`, with the submission saved as
`solution.py` in the current (scratch) directory. Standard library only.

Before any submitted code runs it lowers its own resource limits (address space, CPU time,
file size, open files, core dumps; soft = hard where it matters, so the code cannot raise them
back unless it holds CAP_SYS_RESOURCE, which it never does) and, outside bubblewrap, raises its
walls when LIMITS has `walls` (no capabilities, Landlock: `confine`). Then:

* `run`: runs solution.py as `__main__`, like `python solution.py` (tracebacks show only the
  program's own frames).
* `test FD`: reads the test spec (JSON) from stdin before importing anything submitted, points
  stdin at /dev/null, imports solution.py as the module `solution`, runs the tests and writes
  one JSON line per test to file descriptor FD (a file the server opened; the sandbox cannot
  see its path), each line carrying the run's nonce, then `{"end": true}`, and leaves with
  `os._exit` so that no atexit handler of the submission runs after it.

  Cases (`{"kind": "cases"}`) are expressions whose *value* is reported, as JSON; the server
  compares it with the expected value, which never enters the sandbox. Code tests
  (`{"kind": "code"}`) report pass or fail themselves, since their asserts run here (weak
  tests); their sound `assert CALL == LITERAL` statements (top level, or in a test function)
  arrive already turned into calls of `__ecotone_case__(i, lambda: CALL)` (asserts.py), which
  report the call's value as a case.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import resource
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

SOLUTION = "solution.py"
TESTS_FILE = "<hidden tests>"
MAX_VALUE_CHARS = 65536
MAX_MESSAGE_CHARS = 1000

Emit = Callable[[dict[str, Any]], None]


def set_limits(limits: dict[str, int]) -> None:
    """Lower this process's rlimits; inherited by anything it starts."""
    memory = limits["memory_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = limits["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL
    size = limits["file_bytes"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    files = limits["open_files"]
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# --- walls: what a run outside bubblewrap may reach (Landlock), and no capabilities -------
#
# Under rlimits-only the run shares the server's file system, processes and network. There
# (LIMITS has `walls`: the rules from `landlock.py`, or null), before any submitted code runs,
# the harness drops every capability (the bounding and ambient sets too, so that no exec gives
# them back, with no_new_privs), then, where the kernel has Landlock, restricts itself and all
# it starts with a ruleset: files only beneath the paths given (read and execute; read and
# write beneath the scratch directory; a few devices), no TCP bind or connect, and (Landlock
# ABI 6) no signals to and no abstract unix sockets of processes outside the run. Landlock also
# refuses ptrace, and so the memory, environment and descriptors in /proc, of any process
# outside the run. Anything that fails here ends the run before the submission starts.

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_CHAR, FS_MAKE_BLOCK, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 6, 1 << 11, 1 << 14, 1 << 15
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""The rights that apply to a file (a rule on a file may grant only these)."""


def landlock_fs_rights(abi: int) -> int:
    """Every file system right Landlock ABI `abi` handles."""
    rights = (1 << 13) - 1  # ABI 1: execute ... make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or not Linux)."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_long(0), ctypes.c_long(1)
    )
    return max(int(version), 0)


def _failed(what: str) -> OSError:
    import ctypes

    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def drop_capabilities() -> None:
    """No capabilities now, none from any later exec (bounding and ambient sets emptied,
    no_new_privs set); refuses to go on if any is left."""
    import ctypes

    libc = _libc()
    for cap in range(64):  # EINVAL past the kernel's last; EPERM without CAP_SETPCAP (none)
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise _failed("capset")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _failed("no_new_privs")
    if libc.capget(header, data) != 0 or any(data):
        raise OSError("capabilities remain after dropping them")


def landlock(walls: dict[str, Any]) -> None:
    """Restrict this process (and all it starts) to `walls`: `abi`, and `rules`, a list of
    `[path, rights]` (rights a mask of FS_* bits; a path that cannot be opened is skipped,
    as there is nothing there to reach)."""
    import ctypes

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    abi = int(walls["abi"])
    handled = landlock_fs_rights(abi)
    attr = RulesetAttr(handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # TCP; scopes
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    libc = _libc()
    ruleset = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_long(size),
        ctypes.c_long(0),
    )
    if ruleset < 0:
        raise _failed("landlock_create_ruleset")
    try:
        for path, rights in walls["rules"]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= FS_FILE_RIGHTS
                rule = PathBeneath(rights & handled, fd)
                added = libc.syscall(
                    ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                    ctypes.c_long(ruleset),
                    ctypes.c_long(1),  # LANDLOCK_RULE_PATH_BENEATH
                    ctypes.byref(rule),
                    ctypes.c_long(0),
                )
                if added != 0:
                    raise _failed(f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        restricted = libc.syscall(
            ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(0)
        )
        if restricted != 0:
            raise _failed("landlock_restrict_self")
    finally:
        os.close(ruleset)


def confine(walls: dict[str, Any] | None) -> None:
    """Drop capabilities, then raise the Landlock walls if there are any (None: this kernel
    has no Landlock), before any submitted code runs."""
    drop_capabilities()
    if walls is not None:
        landlock(walls)


def describe(exc: BaseException) -> str:
    """`Type: message`, plus the line of the hidden tests it came from (not the line's text)."""
    text = type(exc).__name__
    try:
        message = str(exc)
        lines = [
            f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == TESTS_FILE
        ]
    except Exception:  # a submitted exception class whose __str__ fails
        message, lines = "", []
    if message:
        text += f": {message}"
    if lines:
        text += f" (hidden tests, line {lines[-1]})"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "..."
    return text


def run_program(path: str) -> int:
    """Run the submission as a script: `__main__`, its directory first on sys.path."""
    with open(path, "rb") as f:
        source = f.read()
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    try:
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None)
        return 1
    return 0


# Bound before any submitted code runs, so that patching `json.dumps` or `os.write` later
# does not change what the harness writes (determined tampering is still possible: see the
# package docstring).
_dumps = json.dumps
_write = os.write


def _writer(fd: int, nonce: str) -> Emit:
    def emit(record: dict[str, Any]) -> None:
        record["nonce"] = nonce
        data = (_dumps(record) + "\n").encode()
        while data:
            data = data[_write(fd, data) :]

    return emit


def load_solution(path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("solution", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
    return module


def value_record(i: int, compute: Callable[[], Any]) -> dict[str, Any]:
    """Case `i`'s record: the value `compute()` returns, as JSON text, or why there is none."""
    try:
        value = compute()
    except BaseException as exc:
        return {"i": i, "error": describe(exc)}
    try:
        text = _dumps(value, ensure_ascii=False)
    except BaseException:
        kind = type(value).__name__
        return {"i": i, "error": f"returned a {kind}, which is not JSON data (lists, dicts...)"}
    if len(text) > MAX_VALUE_CHARS:
        return {"i": i, "error": f"returned a value too large to compare ({len(text)} chars)"}
    return {"i": i, "value": text}


def run_cases(module: types.ModuleType, exprs: list[str], emit: Emit) -> None:
    for i, expr in enumerate(exprs):
        code = compile(expr, "<case>", "eval")
        emit(value_record(i, lambda code=code: eval(code, dict(vars(module)))))  # type: ignore[misc]


def run_code(module: types.ModuleType, spec: dict[str, Any], emit: Emit) -> None:
    """Test code: the given cases (`exprs`, numbered first), then the code with its converted
    asserts (the cases up to `cases`), then each of its `calls` functions (whose converted
    asserts are the cases `within` it), of which the `names` are tests of their own (weak),
    or, if `whole`, the module run as one (weak) test; the weak tests are numbered after the
    cases."""
    exprs, names = spec.get("exprs", []), spec["names"]
    calls, first = spec.get("calls", names), spec.get("cases", 0)
    run_cases(module, exprs, emit)
    namespace: dict[str, Any] = {
        k: v for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))
    }
    reached: set[int] = set()

    def case(i: int, compute: Callable[[], Any]) -> None:
        if type(i) is int and len(exprs) <= i < first and i not in reached:
            reached.add(i)
            emit(value_record(i, compute))

    def unreached(stop: int, why: str, start: int = len(exprs)) -> None:
        for i in range(start, stop):
            if i not in reached:
                emit({"i": i, "error": why})
                reached.add(i)

    namespace.update(
        __name__="hidden_tests", __builtins__=builtins, solution=module, __ecotone_case__=case
    )
    whole = int(bool(spec.get("whole")))
    try:
        exec(compile(spec["code"], TESTS_FILE, "exec"), namespace)
    except BaseException as exc:
        message = describe(exc)
        unreached(first, f"not reached: the hidden tests stopped at {message}")
        if names:
            message = f"the hidden tests failed to load: {message}"
        for i in range(first, first + len(names) + whole):
            emit({"i": i, "error": message})
        return
    if whole:  # the module itself is the one test, and it ran
        emit({"i": first, "ok": True})
    within = {name: (start, stop) for name, start, stop in spec.get("within", [])}
    for name in calls:
        error = None
        try:
            namespace[name]()
        except BaseException as exc:
            error = describe(exc)
        if name in within:
            why = f"not reached: {name} stopped at {error}" if error else "not reached"
            unreached(within[name][1], why, within[name][0])
        if name in names:
            record = {"ok": True} if error is None else {"error": error}
            emit({"i": first + names.index(name), **record})
    unreached(first, "not reached")


def run_tests(path: str, fd: int) -> None:
    spec = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    emit = _writer(fd, spec.pop("nonce"))
    try:
        module = load_solution(path)
    except BaseException as exc:
        emit({"load_error": describe(exc)})
        return
    if spec["kind"] == "cases":
        run_cases(module, spec["exprs"], emit)
    else:
        run_code(module, spec, emit)
    emit({"end": True})


def main(argv: list[str]) -> None:
    mode, limits = argv[1], json.loads(argv[2])
    if mode == "zygote":
        zygote(limits)
        return
    set_limits(limits)
    if "walls" in limits:
        try:
            confine(limits["walls"])
        except BaseException as exc:  # never run the submission outside its walls
            sys.stderr.write(f"the sandbox could not raise its walls: {exc}\n")
            os._exit(125)
    path = os.path.join(os.getcwd(), SOLUTION)
    if mode == "run":
        sys.exit(run_program(path))
    status = 0
    try:
        run_tests(path, int(argv[3]))
    except BaseException:
        traceback.print_exc()
        status = 1
    os._exit(status)  # stdout and stderr are unbuffered (-u): nothing to flush


# --- the zygote -----------------------------------------------------------------------------
#
# `zygote CONFIG`: this interpreter is PID 1 of the sandbox's pid namespace (bwrap --as-pid-1)
# and serves runs one at a time, each in a forked child, over frames on its stdin and stdout
# (a 4-byte big-endian length, then JSON, then the blobs the JSON sizes). Between runs it kills
# every other process in the namespace (`kill(-1)`: all but PID 1), reaps them, and empties the
# writable directories, so a run starts from the state the zygote had before the first one.
#
# Its own state is out of a run's reach: as PID 1 it receives only the signals it has handlers
# for (none: SIGKILL and SIGSTOP from inside the namespace are dropped by the kernel), it is not
# dumpable (so /proc/1/mem, /proc/1/fd are closed to the run, and the seccomp filter refuses
# ptrace), and the run's memory is a copy of its own.

PRELOADED = (
    "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "enum",
    "fractions", "functools", "heapq", "itertools", "math", "operator", "random", "re",
    "statistics", "string", "textwrap", "typing", "unittest",
)  # fmt: skip
"""Imported once by the zygote, so that runs importing them pay nothing."""

_PR_SET_DUMPABLE = 4
_HEADER = 4


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, header: dict[str, Any], *blobs: bytes) -> None:
    body = json.dumps(header).encode()
    data = b"".join([len(body).to_bytes(_HEADER, "big"), body, *blobs])
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _memfd(name: str) -> int:
    return os.memfd_create(name, 0)


def _splice_exact(fd_in: int, fd_out: int, n: int) -> None:
    """Move `n` bytes from the pipe `fd_in` into the file `fd_out`, in the kernel."""
    while n:
        moved = os.splice(fd_in, fd_out, min(n, 1 << 20))
        if not moved:
            raise EOFError
        n -= moved


def _sendfile_exact(fd_out: int, fd_in: int, n: int) -> None:
    """Send the first `n` bytes of the file `fd_in` down the pipe `fd_out`, in the kernel."""
    offset = 0
    while offset < n:
        sent = os.sendfile(fd_out, fd_in, offset, n - offset)
        if not sent:
            raise EOFError
        offset += sent


def _exit_status(exc: SystemExit) -> int:
    """What the interpreter makes of `sys.exit(value)`."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except BaseException:
        pass
    return 1


def _child(request: dict[str, Any], fds: tuple[int, int, int], results: int, libc: Any) -> None:
    """In the forked child: become a fresh run (its own session, the run's descriptors only,
    default signals, dumpable, first in line for the OOM killer), then run the harness."""
    import atexit
    import signal

    status = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        keep = sorted({results} if results >= 0 else set())
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        os.chdir(request["cwd"])
        atexit._clear()
        argv = ["harness", request["mode"], json.dumps(request["limits"])]
        if results >= 0:
            argv.append(str(results))
        try:
            main(argv)
            status = 0
        except SystemExit as exc:
            status = _exit_status(exc)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(status)


def _kill_all_but_me() -> None:
    """Kill every other process of the namespace and reap them all (orphans come to PID 1)."""
    import signal

    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _rmtree(path: str) -> None:
    """Remove a tree a run may have made awkward (directories of mode 000)."""
    import shutil

    def unlock(fn: object, failed: str, exc: object) -> None:
        try:
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
                _rmtree(failed)
            else:
                os.unlink(failed)
        except OSError:
            pass  # what stays is found by the caller

    shutil.rmtree(path, onerror=unlock)


def _empty(root: str, mode: int) -> str:
    """Remove everything under `root` and restore its mode; "" if done, else what is left."""
    try:
        os.chmod(root, 0o700)
        with os.scandir(root) as entries:
            for entry in list(entries):
                if entry.is_dir(follow_symlinks=False):
                    _rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        for name in os.listxattr(root):
            os.removexattr(root, name)
        os.chmod(root, mode)
        left = os.listdir(root)
    except Exception as exc:  # OSError; RecursionError for a tree deeper than the stack
        return f"cannot empty {root}: {type(exc).__name__}: {exc}"
    return f"cannot empty {root}: {left[0]!r} stays" if left else ""


def _serve_one(
    fd_in: int, fd_out: int, request: dict[str, Any], wipe: list[tuple[str, int]], libc: Any
) -> None:
    import select

    # A run's data (its code, the hidden tests on its stdin, its output) goes between the pipe
    # and files in the kernel, never through this process's memory: every later run is a
    # fork of that memory, and freed bytes stay in it.
    cwd = request["cwd"]
    code = os.open(os.path.join(cwd, SOLUTION), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _splice_exact(fd_in, code, request["solution_bytes"])
    finally:
        os.close(code)
    fds = (_memfd("stdin"), _memfd("stdout"), _memfd("stderr"))
    _splice_exact(fd_in, fds[0], request["stdin_bytes"])
    os.lseek(fds[0], 0, os.SEEK_SET)
    results = _memfd("results") if request["results"] else -1
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(request, fds, results, libc)
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(fd_in, select.POLLIN)  # the server hanging up ends everything
    deadline = started + request["timeout"]
    exited = hung_up = False
    while not (exited or hung_up):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in poller.poll(left * 1000):
            exited = exited or fd == pidfd
            hung_up = hung_up or fd == fd_in
    duration = time.monotonic() - started
    os.close(pidfd)
    status: int | None = None
    if exited:
        _, raw = os.waitpid(pid, 0)
        status = os.waitstatus_to_exitcode(raw)
    _kill_all_but_me()
    if status is None:
        status = -9
    if hung_up:
        raise EOFError
    cap = request["output_bytes"]
    sizes = [os.fstat(fds[1]).st_size, os.fstat(fds[2]).st_size]
    sizes.append(os.fstat(results).st_size if results >= 0 else 0)
    caps = [cap, cap, request["results_cap"]]
    sent = [min(size, limit) for size, limit in zip(sizes, caps, strict=True)]
    retire = ""
    for root, mode in wipe:
        retire = retire or _empty(root, mode)
    reply = {
        "status": status,
        "timed_out": not exited,
        "duration": duration,
        "stdout_size": sizes[0],
        "stderr_size": sizes[1],
        "results_size": sizes[2],
        "sent": sent,
    }
    if retire:  # a state we cannot undo: this sandbox ends, the next run gets a new one
        reply["retire"] = retire
    _send(fd_out, reply)
    for fd, count in zip((fds[1], fds[2], results), sent, strict=True):
        if count:
            _sendfile_exact(fd_out, fd, count)
    for fd in (*fds, results):
        if fd >= 0:
            os.close(fd)
    if retire:
        os._exit(0)


def zygote(config: dict[str, Any]) -> None:
    import ctypes
    import importlib
    import signal

    if os.getpid() != 1:  # kill(-1) beyond a pid namespace of our own would be a disaster
        sys.stderr.write("the zygote must be PID 1 of its own pid namespace\n")
        os._exit(2)
    fd_in, fd_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as PID 1: ignored, not KeyboardInterrupt
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.stderr.write("the zygote cannot make itself undumpable\n")
        os._exit(2)
    for name in config.get("preload", PRELOADED):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    wipe = [(root, os.stat(root).st_mode & 0o7777) for root in config["wipe"]]
    _send(fd_out, {"ready": True, "python": sys.version.split()[0]})
    while True:
        try:
            size = int.from_bytes(_read_exact(fd_in, _HEADER), "big")
            request = json.loads(_read_exact(fd_in, size))
            _serve_one(fd_in, fd_out, request, wipe, libc)
        except (EOFError, BrokenPipeError):
            _kill_all_but_me()
            os._exit(0)
        except BaseException:
            traceback.print_exc()  # the server reads it once this sandbox has exited
            _kill_all_but_me()
            os._exit(3)


if __name__ == "__main__":
    main(sys.argv)
