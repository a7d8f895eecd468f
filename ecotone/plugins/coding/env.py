"""The `coding` environment: tasks, judging, and the episode logic around the sandbox."""

from __future__ import annotations

import ast
import functools
import json
import os
import pickle
import random
import secrets
import tempfile
import tomllib
import uuid
import weakref
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec

import ecotone
from ecotone.plugins.coding.asserts import compares, split_asserts
from ecotone.plugins.coding.sandbox import (
    SANDBOX_MODES,
    Completed,
    Limits,
    Sandbox,
    SandboxMode,
    SandboxUnavailable,
    remove_tree,
    sandbox_for,
)
from ecotone.plugins.coding.zygote import pool_for

SANDBOX_ENV_VAR: Final = "ECOTONE_CODING_SANDBOX"
ZYGOTE_ENV_VAR: Final = "ECOTONE_CODING_ZYGOTE"
WHOLE_MODULE_TEST: Final = "tests"
"""The name of the single test when custom `tests` define no `test*` functions."""
_SHOWN_VALUE_CHARS: Final = 200
_TAMPERED: Final = "rejected: something other than the test harness wrote to its results channel"
_FOOTER: Final = (
    "\n\nSubmit a complete Python module as `code`. It runs as a script with no input; then "
    "hidden tests import it and call your function."
)


# --- tasks ------------------------------------------------------------------------------------


class Case(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A hidden test: `expr` is evaluated in the sandbox against the submitted module, and
    its JSON value is compared with `expected` by the server (the expected value never enters
    the sandbox). A task given inline or in a task file may carry them too; `name` defaults
    to the expression."""

    name: str = ""
    expr: str
    expected: Any


class Task(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    prompt: str
    stub: str = ""
    """A signature with no body: a valid program that fails the tests (sample_action)."""
    reference: str = ""
    """A correct solution, never shown: the test suite checks that it passes every case."""
    timeout_s: float = 5.0
    memory_mb: int = 256
    cases: tuple[Case, ...] = ()
    tests: str = ""
    """Custom tasks: test code run in the sandbox, its sound `assert CALL == LITERAL`
    statements already turned into the last `embedded` cases (`asserts.split_asserts`)."""
    test_names: tuple[str, ...] = ()
    """Custom tasks: its `test*` functions that are tests of their own (weak: their other
    asserts run in the sandbox)."""
    calls: tuple[str, ...] = ()
    """Custom tasks: every top-level `test*` function, called in this order."""
    within: tuple[tuple[str, int, int], ...] = ()
    """Custom tasks: the cases `[start, stop)` converted inside each test function."""
    embedded: int = 0
    """How many of `cases` (the last ones) are asserts of `tests`, evaluated where they stood."""
    whole: bool = False
    """Custom tasks without `test*` functions: the module itself is one (weak) test."""

    @property
    def check_names(self) -> list[str]:
        names = [c.name for c in self.cases] + list(self.test_names)
        return [*names, WHOLE_MODULE_TEST] if self.whole else names

    @property
    def weak(self) -> list[bool]:
        """For each of `check_names`: whether it is judged in the sandbox (an assert that
        stayed one, or a given case whose expression compares there)."""
        return [_compares(c.expr) for c in self.cases] + [True] * (
            len(self.test_names) + self.whole
        )

    def harness_spec(self, nonce: str) -> dict[str, Any]:
        """What the harness in the sandbox gets: never the expected values of cases."""
        exprs = [c.expr for c in self.cases[: len(self.cases) - self.embedded]]
        if not self.tests:
            return {"nonce": nonce, "kind": "cases", "exprs": exprs}
        return {
            "nonce": nonce,
            "kind": "code",
            "exprs": exprs,
            "cases": len(self.cases),
            "code": self.tests,
            "names": list(self.test_names),
            "calls": list(self.calls or self.test_names),
            "within": [list(w) for w in self.within],
            "whole": self.whole,
        }


@functools.lru_cache(maxsize=4096)
def _compares(expr: str) -> bool:
    """Whether a case's expression compares in the sandbox (`f(x) == 3`, `y in f(x)`): its
    verdict, not the value, then crosses, and an always-equal value wins it."""
    try:
        return compares(ast.parse(expr, "<case>", mode="eval"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True


class _TaskFile(msgspec.Struct, forbid_unknown_fields=True):
    tasks: list[Task]


class CodingTask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A coding task as the env publishes it: what a trainer may see. A shipped task's hidden
    tests and reference solution stay on the server; a task given inline or in a task file
    brings its own `cases` (expressions and their expected values, compared on the server)
    and/or `tests` (test code: `test*` functions or plain asserts; `assert CALL == LITERAL`
    statements at the top level become cases, other asserts run in the sandbox and their
    results are marked `weak`)."""

    id: str
    prompt: str
    stub: str = ""
    timeout_s: float = 5.0
    memory_mb: int = 256
    tests: str = ""
    cases: tuple[Case, ...] = ()


TEST_SPLIT: Final = ("balanced_brackets", "merge_intervals", "to_roman")
"""The shipped tasks in the `test` split; the others are `train`."""


@functools.cache
def task_set() -> ecotone.TaskSet[CodingTask]:
    """The published tasks: the shipped ones, without their tests, split train/test."""
    public = {
        name: CodingTask(
            id=name,
            prompt=task.prompt,
            stub=task.stub,
            timeout_s=task.timeout_s,
            memory_mb=task.memory_mb,
        )
        for name, task in tasks().items()
    }
    return ecotone.TaskSet(
        {
            "train": [t for name, t in public.items() if name not in TEST_SPLIT],
            "test": [t for name, t in public.items() if name in TEST_SPLIT],
        },
        type=CodingTask,
        hidden=("tests", "cases"),  # a task file's tests and cases stay on the server
    )


@functools.cache
def tasks() -> dict[str, Task]:
    """The shipped task set (`data/coding_tasks.toml`), by name, in file order."""
    text = resources.files("ecotone.plugins").joinpath("data/coding_tasks.toml").read_text("utf-8")
    loaded = msgspec.convert(tomllib.loads(text), _TaskFile)
    out: dict[str, Task] = {}
    for task in loaded.tasks:
        if task.name in out or not task.cases:
            raise ValueError(f"coding task {task.name!r}: duplicate name, or no cases")
        if len({c.name for c in task.cases}) != len(task.cases):
            raise ValueError(f"coding task {task.name!r}: two cases share a name")
        out[task.name] = msgspec.structs.replace(task, prompt=task.prompt.strip() + _FOOTER)
    return out


def custom_task(
    name: str, prompt: str, tests: str, max_chars: int, cases: tuple[Case, ...] = ()
) -> Task:
    """A task given inline or in a task file: its `cases` checked, its `tests` parsed here
    (never run) to learn its test names and turn `assert CALL == LITERAL` into cases."""
    if not isinstance(prompt, str) or not isinstance(tests, str):
        raise ValueError("`prompt` and `tests` must be strings")
    if len(tests) > max_chars:
        raise ValueError(f"`tests` is {len(tests)} characters; the limit is {max_chars}")
    given = [_checked_case(case) for case in cases]
    if not tests:
        return Task(name=name, prompt=prompt, cases=tuple(_named(given)))
    split = split_asserts(tests, first=len(given))
    embedded = [Case(name=name, expr=expr, expected=value) for name, expr, value in split.cases]
    return Task(
        name=name,
        prompt=prompt,
        cases=tuple(_named(given + embedded)),
        tests=split.code,
        test_names=split.names,
        calls=split.calls,
        within=split.within,
        embedded=len(embedded),
        whole=split.whole,
    )


def _checked_case(case: Case) -> Case:
    """A given case whose expression parses, named by it if it has no name."""
    if not isinstance(case.expr, str):
        raise ValueError("a case's `expr` must be a string")
    try:
        ast.parse(case.expr, "<case>", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"case {case.expr!r} is not a Python expression: {exc}") from None
    return case if case.name else msgspec.structs.replace(case, name=case.expr.strip())


def _named(cases: list[Case]) -> list[Case]:
    """`cases` with names made unique (`f(1)`, `f(1) #2`...)."""
    seen: dict[str, int] = {}
    out: list[Case] = []
    for case in cases:
        seen[case.name] = seen.get(case.name, 0) + 1
        name = case.name if seen[case.name] == 1 else f"{case.name} #{seen[case.name]}"
        out.append(msgspec.structs.replace(case, name=name))
    return out


# --- judging ----------------------------------------------------------------------------------


class CaseResult(msgspec.Struct, kw_only=True):
    """One hidden test's outcome."""

    name: str
    passed: bool
    message: str = ""
    weak: bool = False
    """An assert that ran in the sandbox, next to the submission, which can fake its pass
    (an always-equal value, say): only cases, compared on the server, cannot be gamed so
    (docs/sandbox.md, "Writing tests a submission cannot game")."""


def _same(a: Any, b: Any) -> bool:
    """Equality of JSON values where a boolean is not a number (True != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "..."


def _records(
    raw: bytes, nonce: str, count: int
) -> tuple[dict[int, dict[str, Any]], str | None, bool]:
    """Parse the harness's lines: (records by test index, import error, tampered).

    Only complete lines count (a line cut by a kill is dropped). A line without this run's
    nonce, a second record for a test, or anything unreadable means the submission wrote to
    the channel: the whole run is rejected."""
    records: dict[int, dict[str, Any]] = {}
    load_error: str | None = None
    ended = False
    *lines, _partial = raw.split(b"\n")
    for line in lines:
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return {}, None, True
        if not isinstance(rec, dict) or rec.get("nonce") != nonce or ended:
            return {}, None, True
        i = rec.get("i")
        if "load_error" in rec and load_error is None and not records:
            load_error = str(rec["load_error"])
        elif rec.get("end") is True:
            ended = True
        elif type(i) is int and 0 <= i < count and i not in records:
            records[i] = rec
        else:
            return {}, None, True
    return records, load_error, False


def judge(task: Task, run: Completed, nonce: str, limits: Limits) -> list[CaseResult]:
    names, weak = task.check_names, task.weak
    records, load_error, tampered = _records(run.results, nonce, len(names))
    if tampered:
        return [
            CaseResult(name=n, passed=False, message=_TAMPERED, weak=w)
            for n, w in zip(names, weak, strict=True)
        ]
    if load_error is not None:
        missing = f"the solution failed to import: {load_error}"
    elif run.timed_out:
        missing = f"no result: the tests ran out of time ({limits.timeout_s:g} s)"
    else:
        last = run.stderr.text.strip().splitlines()[-1:] or [""]
        missing = f"no result: the test process ended (exit code {run.exit_code}) first"
        if last[0]:
            missing += f"; its last error line: {_short(last[0])}"
    cases = [*task.cases, *[None] * (len(names) - len(task.cases))]
    return [
        _verdict(case, name, records.get(i), missing, w)
        for i, (case, name, w) in enumerate(zip(cases, names, weak, strict=True))
    ]


def _verdict(
    case: Case | None, name: str, rec: dict[str, Any] | None, missing: str, weak: bool
) -> CaseResult:
    """A check's result from its record (None: there was none); `case` None: a weak test."""
    if rec is None:
        return CaseResult(name=name, passed=False, message=missing, weak=weak)
    if "error" in rec:
        where = f"{case.expr} raised " if case is not None else ""
        return CaseResult(name=name, passed=False, message=where + str(rec["error"]), weak=weak)
    if case is None:
        return CaseResult(name=name, passed=rec.get("ok") is True, weak=True)
    shown = str(rec.get("value"))
    try:
        value = json.loads(shown)
    except (ValueError, RecursionError):
        return CaseResult(name=name, passed=False, message=_TAMPERED, weak=weak)
    if _same(value, case.expected):
        return CaseResult(name=name, passed=True, weak=weak)
    message = f"{case.expr} returned {_short(shown)}, which is not the expected value"
    return CaseResult(name=name, passed=False, message=message, weak=weak)


# --- the environment --------------------------------------------------------------------------


class CodingAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    code: str
    """A complete Python module."""


class CodingObservation(ecotone.Observation, kw_only=True):
    task: str = ""
    prompt: str = ""
    stdout: str = ""
    """The program's output (the submission run as a script), cut at the output cap."""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exit_code: int | None = None
    """The program's exit status (negative: killed by that signal); None after reset."""
    timed_out: bool = False
    """The program, or the hidden tests, ran out of time and were killed."""
    tests: list[CaseResult] = []
    passed: int = 0
    total: int = 0
    weak: int = 0
    """How many of the `total` tests are weak, the weaker kind: asserts judged in the sandbox,
    next to the submission, which can fake their pass (0 for the shipped tasks, and for
    tests that are all cases: see docs/sandbox.md)."""
    attempt: int = 0
    attempts_left: int = 0
    sandbox: str = ""
    """`bwrap` or `rlimits-only` (weaker isolation: see the env's docstring)."""
    isolation: list[str] = []
    """What guards each run: the sandbox kind, then `no-user-namespaces`, `seccomp` (or
    `no-seccomp`), and `cgroup-v2` / `cgroup-v1` (limits for the whole run) or
    `per-process-limits-only` (no cgroups here: memory and process limits per process)."""
    limits_hit: list[str] = []
    """Run-wide limits the step's runs ran into: `memory`, `pids` (a fork refused)."""


class CodingState(ecotone.State, kw_only=True):
    task: str = ""
    attempts: int = 0
    max_attempts: int = 5
    best_score: float = 0.0
    solved: bool = False
    sandbox: str = ""
    timeout_s: float = 0.0
    memory_mb: int = 0


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


class CodingEnv(ecotone.Environment[CodingAction, CodingObservation, CodingState]):
    """Write Python that passes hidden unit tests; the code runs in a sandbox.

    Each episode is a task (`CodingTask`, published in splits `train` and `test`): a shipped
    one by id (`reset(task="fizzbuzz")`, or `split=`/`index=`, or drawn with the seed), or a
    custom one given inline, `reset(task={"id": ..., "prompt": ..., "tests": ...})` (test code
    with `test*` functions or plain asserts). Options `timeout_s` and `memory_mb` override the
    task's limits; `max_attempts` (default 5) bounds the episode. Each step runs the action's
    `code` as a script (stdout, stderr and exit code come back), then in a fresh interpreter
    imports it as the module `solution` and runs the hidden tests (skipped when the program
    timed out). The reward is the fraction of tests passed; the episode is done when all pass
    and truncated when the attempts run out.

    Sandboxing and its limits are described in `ecotone.plugins.coding`. Class attributes set
    the server-side bounds; `sandbox_mode` (else `$ECOTONE_CODING_SANDBOX`, else `auto`) picks
    bwrap, rlimits-only, or bwrap-if-usable.
    """

    name = "coding"
    version = "1"
    description = "Write Python that passes hidden unit tests; each submission runs sandboxed."
    inline = False  # a step spawns processes and waits for them: a worker thread each
    tasks = task_set

    sandbox_mode: ClassVar[str] = ""
    zygote: ClassVar[bool | None] = None
    """Runs under bubblewrap fork from a pre-started sandbox's zygote (`zygote.py`) instead of
    starting a sandbox and interpreter each; None: unless `$ECOTONE_CODING_ZYGOTE` is `0`."""
    max_timeout_s: ClassVar[float] = 60.0
    max_memory_mb: ClassVar[int] = 4096
    min_memory_mb: ClassVar[int] = 64
    max_code_chars: ClassVar[int] = 1_000_000
    max_tests_chars: ClassVar[int] = 1_000_000
    output_bytes: ClassVar[int] = 16384

    def __init__(self) -> None:
        self._state = CodingState()
        self._task: Task | None = None
        self._limits = Limits()
        self._sandbox: Sandbox | None = None
        self._root: Path | None = None
        self._cleanup: weakref.finalize[..., Any] | None = None

    def _mode(self) -> SandboxMode:
        mode = self.sandbox_mode or os.environ.get(SANDBOX_ENV_VAR, "") or "auto"
        for known in SANDBOX_MODES:
            if mode == known:
                return known
        raise ValueError(f"{SANDBOX_ENV_VAR}/sandbox_mode must be one of {SANDBOX_MODES}")

    @classmethod
    def _zygotes(cls, sandbox: Sandbox) -> bool:
        # Without the seccomp filter, System V IPC objects made by one run would outlive it in
        # the IPC namespace a zygote's runs share: a fresh sandbox per run, then.
        if sandbox.kind != "bwrap" or sandbox.seccomp is None:
            return False
        if cls.zygote is not None:
            return cls.zygote
        return os.environ.get(ZYGOTE_ENV_VAR, "1").strip().lower() not in ("0", "false", "no")

    @classmethod
    def _isolation(cls, sandbox: Sandbox) -> list[str]:
        return [*sandbox.isolation, "zygote"] if cls._zygotes(sandbox) else sandbox.isolation

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        task: CodingTask | str | None = None,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
        max_attempts: int = 5,
    ) -> CodingObservation:
        shipped = tasks()
        if task is None:  # called directly, not through a server (which always picks one)
            chosen = shipped[random.Random(seed).choice(sorted(shipped))]
        elif isinstance(task, CodingTask) and (task.tests or task.cases):
            chosen = custom_task(task.id, task.prompt, task.tests, self.max_tests_chars, task.cases)
            chosen = msgspec.structs.replace(
                chosen, timeout_s=task.timeout_s, memory_mb=task.memory_mb
            )
        else:
            name = task.id if isinstance(task, CodingTask) else task
            if name not in shipped:
                raise ValueError(
                    f"no coding task {name!r} (and no `tests` or `cases` to make it a custom "
                    "one); "
                    f"tasks: {', '.join(shipped)}"
                )
            chosen = shipped[name]
        timeout = _number(
            "timeout_s",
            chosen.timeout_s if timeout_s is None else timeout_s,
            0.1,
            self.max_timeout_s,
        )
        memory = _number(
            "memory_mb",
            chosen.memory_mb if memory_mb is None else memory_mb,
            self.min_memory_mb,
            self.max_memory_mb,
        )
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        mode = self._mode()
        sandbox = sandbox_for(mode)
        if mode == "auto" and sandbox.kind != "bwrap" and ecotone.served_beyond_loopback():
            raise SandboxUnavailable(
                "refusing to run agent code with rlimits only on a server reachable beyond "
                "loopback (bubblewrap cannot run here): install bubblewrap, or opt in to the "
                "weaker sandbox with ECOTONE_CODING_SANDBOX=rlimits (see docs/sandbox.md)"
            )
        self._sandbox = sandbox
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="ecotone-coding-"))
            self._cleanup = weakref.finalize(self, remove_tree, self._root)
        self._task = chosen
        self._limits = Limits(
            timeout_s=timeout, memory_mb=int(memory), output_bytes=self.output_bytes
        )
        self._state = CodingState(
            episode_id=episode_id or uuid.uuid4().hex,
            task=chosen.name,
            max_attempts=max_attempts,
            sandbox=self._sandbox.kind,
            timeout_s=timeout,
            memory_mb=int(memory),
        )
        return CodingObservation(
            task=chosen.name,
            prompt=chosen.prompt,
            total=len(chosen.check_names),
            weak=sum(chosen.weak),
            attempts_left=max_attempts,
            sandbox=self._sandbox.kind,
            isolation=self._isolation(self._sandbox),
        )

    def step(self, action: CodingAction) -> CodingObservation:
        task, sandbox, root, st = self._task, self._sandbox, self._root, self._state
        if task is None or sandbox is None or root is None:
            raise RuntimeError("step before reset")
        if len(action.code) > self.max_code_chars:
            raise ecotone.InvalidAction(
                f"code is {len(action.code)} characters; the limit is {self.max_code_chars}",
                field="code",
            )
        limits = self._limits
        runner = pool_for(sandbox) if self._zygotes(sandbox) else sandbox
        program = runner.run(root, action.code, ["run"], limits)
        tests_timed_out = False
        checked_hit: tuple[str, ...] = ()
        if program.timed_out:
            note = f"not run: the program ran out of time ({limits.timeout_s:g} s)"
            results = [
                CaseResult(name=n, passed=False, message=note, weak=w)
                for n, w in zip(task.check_names, task.weak, strict=True)
            ]
        else:
            nonce = secrets.token_hex(16)
            spec = json.dumps(task.harness_spec(nonce)).encode()
            checked = runner.run(root, action.code, ["test"], limits, stdin=spec, results=True)
            tests_timed_out = checked.timed_out
            checked_hit = checked.limits_hit
            results = judge(task, checked, nonce, limits)
        passed = sum(r.passed for r in results)
        score = passed / len(results)
        st.step_count += 1
        st.attempts += 1
        st.best_score = max(st.best_score, score)
        st.solved = passed == len(results)
        return CodingObservation(
            task=task.name,
            prompt=task.prompt,
            stdout=program.stdout.text,
            stderr=program.stderr.text,
            stdout_truncated=program.stdout.truncated,
            stderr_truncated=program.stderr.truncated,
            exit_code=program.exit_code,
            timed_out=program.timed_out or tests_timed_out,
            tests=results,
            passed=passed,
            total=len(results),
            weak=sum(r.weak for r in results),
            attempt=st.attempts,
            attempts_left=st.max_attempts - st.attempts,
            sandbox=sandbox.kind,
            isolation=self._isolation(sandbox),
            limits_hit=sorted(set(program.limits_hit) | set(checked_hit)),
            reward=score,
            done=st.solved,
            truncated=not st.solved and st.attempts >= st.max_attempts,
            metadata={"is_success": st.solved},
        )

    def state(self) -> CodingState:
        return self._state

    def snapshot(self) -> bytes:
        """The episode: its task (hidden tests included), limits, attempts and best score,
        pickled (the server keeps it, and seals what leaves it). Files a program left in the
        session's scratch directory are not kept: every run starts from the submitted code."""
        if self._task is None:
            raise RuntimeError("nothing to save before the first reset")
        return pickle.dumps((self._task, self._limits, msgspec.msgpack.encode(self._state)))

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id`, on this server's sandbox."""
        task, limits, encoded = pickle.loads(data)  # the server's own bytes, or a sealed blob
        state = msgspec.msgpack.decode(encoded, type=CodingState)
        sandbox = sandbox_for(self._mode())
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="ecotone-coding-"))
            self._cleanup = weakref.finalize(self, remove_tree, self._root)
        self._sandbox, self._task, self._limits = sandbox, task, limits
        self._state = msgspec.structs.replace(state, episode_id=episode_id, sandbox=sandbox.kind)

    @classmethod
    def status(cls) -> str:
        """How runs are guarded here and tests judged (`ecotone list`): the sandbox this mode
        gives, and which tests are the weaker kind."""
        mode = cls.sandbox_mode or os.environ.get(SANDBOX_ENV_VAR, "") or "auto"
        grading = "tests: cases judged on the server; asserts left in the sandbox are weak"
        try:
            sandbox = sandbox_for(mode)  # type: ignore[arg-type]
        except (SandboxUnavailable, ValueError) as exc:
            return f"sandbox ({mode}): unavailable: {exc}; {grading}"
        weaker = " (weaker than bwrap: see docs/sandbox.md)" if sandbox.kind != "bwrap" else ""
        return f"sandbox ({mode}): {', '.join(cls._isolation(sandbox))}{weaker}; {grading}"

    def sample_action(self, rng: random.Random) -> CodingAction:
        """The task's stub (a valid program that fails the tests) or a trivial program."""
        options = ["print('hello')\n"]
        if self._task is not None and self._task.stub:
            options.append(self._task.stub)
        return CodingAction(code=rng.choice(options))

    def close(self) -> None:
        """Remove this session's scratch directories (idempotent)."""
        if self._cleanup is not None:
            self._cleanup()
        self._root = None
