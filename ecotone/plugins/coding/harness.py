"""The trusted first code of every `coding` run, executed inside the sandbox.

The server reads this file's text (and a constant or two) and runs it in a fresh interpreter as
`python -I -u -B -X utf8 -c <this file> MODE LIMITS [FD]`, with the submission saved as
`solution.py` in the current (scratch) directory. Standard library only.

Before any submitted code runs it lowers its own resource limits (address space, CPU time,
file size, open files, core dumps; soft = hard where it matters, so the code cannot raise them
back unless it holds CAP_SYS_RESOURCE, which it never does under bwrap). Then:

* `run`: runs solution.py as `__main__`, like `python solution.py` (tracebacks show only the
  program's own frames).
* `test FD`: reads the test spec (JSON) from stdin before importing anything submitted, points
  stdin at /dev/null, imports solution.py as the module `solution`, runs the tests and writes
  one JSON line per test to file descriptor FD (a file the server opened; the sandbox cannot
  see its path), each line carrying the run's nonce, then `{"end": true}`, and leaves with
  `os._exit` so that no atexit handler of the submission runs after it.

  Cases (`{"kind": "cases"}`) are expressions whose *value* is reported, as JSON; the server
  compares it with the expected value, which never enters the sandbox. Code tests
  (`{"kind": "code"}`) report pass or fail themselves, since their asserts run here.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import resource
import sys
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


def run_cases(module: types.ModuleType, exprs: list[str], emit: Emit) -> None:
    for i, expr in enumerate(exprs):
        try:
            value = eval(compile(expr, "<case>", "eval"), dict(vars(module)))
        except BaseException as exc:
            emit({"i": i, "error": describe(exc)})
            continue
        try:
            text = _dumps(value, ensure_ascii=False)
        except BaseException:
            kind = type(value).__name__
            emit({"i": i, "error": f"returned a {kind}, which is not JSON data (lists, dicts...)"})
            continue
        if len(text) > MAX_VALUE_CHARS:
            emit({"i": i, "error": f"returned a value too large to compare ({len(text)} chars)"})
        else:
            emit({"i": i, "value": text})


def run_code(module: types.ModuleType, code: str, names: list[str], emit: Emit) -> None:
    namespace: dict[str, Any] = {
        k: v for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))
    }
    namespace.update(__name__="hidden_tests", __builtins__=builtins, solution=module)
    try:
        exec(compile(code, TESTS_FILE, "exec"), namespace)
    except BaseException as exc:
        message = describe(exc)
        if names:
            message = f"the hidden tests failed to load: {message}"
        for i in range(max(len(names), 1)):
            emit({"i": i, "error": message})
        return
    if not names:  # the module itself is the one test, and it ran
        emit({"i": 0, "ok": True})
        return
    for i, name in enumerate(names):
        try:
            namespace[name]()
        except BaseException as exc:
            emit({"i": i, "error": describe(exc)})
        else:
            emit({"i": i, "ok": True})


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
        run_code(module, spec["code"], spec["names"], emit)
    emit({"end": True})


def main(argv: list[str]) -> None:
    mode, limits = argv[1], json.loads(argv[2])
    set_limits(limits)
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


if __name__ == "__main__":
    main(sys.argv)
