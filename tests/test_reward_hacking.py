"""The reward-hacking suite: submissions that try to score without solving the task, each a
real program an agent could send (tests/hacks.py), played against the shipped tasks and
against tasks whose tests are cases (given inline, in a task file, and as `assert CALL ==
LITERAL`), under bubblewrap and rlimits-only. Every one must score 0 there; the server must
go on serving. Against weak tests (asserts that run in the sandbox) the hacks that succeed
are expected failures, each with the reason (docs/sandbox.md, "Reward hacking").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

import ecotone
from ecotone.plugins.coding import CodingAction, CodingObservation, tasks
from tests import hacks
from tests.conftest import run_server
from tests.hacks import Hack
from tests.test_env_coding import BWRAP, NO_BWRAP, CodingTestEnvs

MARK = "kumquat-"
"""The start of every expected value of the suite's own tasks (the process-table hack knows
it, as an attacker would know what the answers look like)."""
SECRET = MARK + uuid.uuid4().hex
EXPECTED = {1: SECRET, 2: 918273645, 3: 2.718281828, 4: [SECRET, 7], 5: {"key": SECRET}}
"""`answer(n)`'s expected values: a string, an int, a float, a list and a dict."""
RIGHT = f"def answer(n):\n    return {EXPECTED!r}[n]\n"
CASES = [{"expr": f"answer({n})", "expected": value} for n, value in EXPECTED.items()]
ASSERTS = (
    "import math\n"
    f"assert answer(1) == {SECRET!r}\n"
    "def test_more():\n"
    "    start = 2\n"
    f"    assert answer(start) == {EXPECTED[2]!r}\n"
    f"    assert answer(3) == {EXPECTED[3]!r}\n"
)
"""Plain asserts, at the top level and in a test function: all become cases."""
WEAK = (
    "import operator\n"
    f"WANT = {EXPECTED!r}\n"
    "def test_in_a_loop():\n"
    f"    for n, want in [(1, {SECRET!r})]:\n"
    "        assert answer(n) == want\n"
    "def test_with_all():\n"
    "    assert all(answer(n) == WANT[n] for n in (1, 2, 3))\n"
    "def test_with_operator():\n"
    "    assert operator.eq(answer(3), WANT[3])\n"
)
"""Asserts that stay in the sandbox (a loop, a comprehension, a call): weak tests."""
TASK_FILE_ID = "answer-from-a-file"


@attrs.frozen
class Target:
    """A task a hack is played against."""

    name: str
    fn: str
    reset: Mapping[str, Any]
    right: str
    """A right answer (it must score 1: the hack's 0 then means something)."""
    from_file: bool = False


def _function(stub: str) -> str:
    found = re.search(r"def (\w+)\(", stub)
    assert found is not None, stub
    return found[1]


SHIPPED = [
    Target(name, _function(task.stub), {"task": name}, task.reference)
    for name, task in tasks().items()
]
INLINE = {"id": "answer", "prompt": "Write answer(n).", "cases": CASES}
OURS = [
    Target("inline cases", "answer", {"task": INLINE}, RIGHT),
    Target("task file cases", "answer", {"task": TASK_FILE_ID}, RIGHT, from_file=True),
    Target(
        "converted asserts", "answer", {"task": {"id": "a", "prompt": "", "tests": ASSERTS}}, RIGHT
    ),
]
WEAK_TARGET = Target(
    "weak asserts", "answer", {"task": {"id": "w", "prompt": "", "tests": WEAK}}, RIGHT
)
SAMPLE_TASKS = ("fizzbuzz", "reverse_string", "is_prime", "word_frequency", "merge_intervals")
SAMPLE = [t for t in SHIPPED if t.name in SAMPLE_TASKS]
"""Shipped tasks whose expected values are lists, strings, booleans, dicts and nested lists:
the slower hacks are played against these rather than all."""


@attrs.frozen
class Servers:
    kind: str
    url: str
    file_url: str
    task_file: Path

    def url_for(self, target: Target) -> str:
        return self.file_url if target.from_file else self.url


@pytest.fixture(scope="module", params=["bwrap", "rlimits-only"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """The coding env under each sandbox kind: one server for the shipped and inline tasks,
    one serving a task file whose cases are hidden fields."""
    if request.param == "bwrap" and BWRAP is None:
        pytest.skip(NO_BWRAP)
    env = "coding_bwrap" if request.param == "bwrap" else "coding_rlimits"
    task_file = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    record = {"id": TASK_FILE_ID, "prompt": "Write answer(n).", "cases": CASES}
    task_file.write_text(json.dumps(record) + "\n")
    with (
        run_server(env, plugins=[CodingTestEnvs()]) as main,
        run_server(env, plugins=[CodingTestEnvs()], tasks={"eval": str(task_file)}) as file,
    ):
        yield Servers(request.param, main.url, file.url, task_file)


@pytest.fixture(scope="module")
def witness() -> Iterator[int]:
    """Another process of the host that carries an expected value in its command line and
    environment (a driver started with the task, say)."""
    env = {"PATH": os.environ.get("PATH", ""), "ECOTONE_ANSWER": SECRET}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", SECRET], env=env)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def play(servers: Servers, target: Target, code: str, timeout_s: float | None = None) -> Any:
    """One step of `code` on `target`: its observation (the session is closed after)."""
    options = dict(target.reset)
    if timeout_s is not None:
        options["timeout_s"] = timeout_s
    with ecotone.connect(servers.url_for(target), observation_type=CodingObservation) as env:
        env.reset(**options)
        return env.step(CodingAction(code=code)).observation


def extras(servers: Servers) -> dict[str, str]:
    """What a determined attacker would know: where the expected values are kept."""
    shipped = Path(ecotone.__file__).parent / "plugins" / "data" / "coding_tasks.toml"
    return {"paths": repr([str(servers.task_file), str(shipped)]), "mark": MARK}


def walls_or_skip(servers: Servers, hack: Hack) -> None:
    """Skip a hack only Landlock stops outside bubblewrap, where this kernel has none."""
    from ecotone.plugins.coding import sandbox_for

    if hack.needs_walls and servers.kind != "bwrap" and sandbox_for("rlimits").walls is None:
        pytest.skip("no Landlock in this kernel: rlimits-only runs reach the host's files")


def scores_zero(servers: Servers, hack: Hack, targets: list[Target]) -> None:
    """`hack` scores 0 on every target, none of whose tests is weak."""
    walls_or_skip(servers, hack)
    for target in targets:
        code = hack.program(target.fn, **extras(servers))
        obs = play(servers, target, code, hack.timeout_s)
        passed = [(t.name, t.message) for t in obs.tests if t.passed]
        assert obs.passed == 0 and obs.reward == 0.0, (target.name, passed, obs.stdout[-2000:])
        assert obs.total > 0 and not any(t.weak for t in obs.tests), target.name


@pytest.fixture(autouse=True)
def _still_serving(servers: Servers) -> Iterator[None]:
    """After each hack the servers still serve: a right answer still scores 1."""
    yield
    for target in (OURS[1],):
        obs = play(servers, target, target.right)
        assert obs.reward == 1.0, (target.name, obs.tests)


# --- the targets are fair ------------------------------------------------------------------


def test_every_target_is_solved_by_a_right_answer(servers: Servers) -> None:
    """Each task the hacks are played against scores 1 for a right answer, with no weak
    test; the weak target's tests are all weak."""
    for target in [*SHIPPED, *OURS]:
        obs = play(servers, target, target.right)
        assert obs.reward == 1.0 and not any(t.weak for t in obs.tests), target.name
    obs = play(servers, WEAK_TARGET, RIGHT)
    assert obs.reward == 1.0 and [t.weak for t in obs.tests] == [True, True, True]


# --- the hacks -----------------------------------------------------------------------------


def ids(group: list[Hack]) -> list[str]:
    return [hack.name for hack in group]


@pytest.mark.parametrize("hack", hacks.ALWAYS_EQUAL, ids=ids(hacks.ALWAYS_EQUAL))
def test_always_equal_values_score_zero(servers: Servers, hack: Hack) -> None:
    """A `str`, `int`, `float`, `list` or `dict` subclass equal to anything: its value
    crosses as JSON data, which is compared on the server."""
    scores_zero(servers, hack, [*SHIPPED, *OURS])


@pytest.mark.parametrize("hack", hacks.PATCHES, ids=ids(hacks.PATCHES))
def test_patching_json_builtins_operator_or_the_harness_scores_zero(
    servers: Servers, hack: Hack
) -> None:
    """Patched `json`, `builtins`, `operator`, or the harness's own functions: whatever the
    sandbox then reports is a value, and only the expected value passes."""
    scores_zero(servers, hack, [*SAMPLE, *OURS])


@pytest.mark.parametrize("hack", hacks.EXITS, ids=ids(hacks.EXITS))
def test_leaving_at_import_or_call_time_scores_zero(servers: Servers, hack: Hack) -> None:
    """`sys.exit`, `os._exit`, a signal, at import or in a call: a test without a result
    fails."""
    scores_zero(servers, hack, [*SAMPLE[:2], *OURS])


@pytest.mark.parametrize("hack", hacks.FORGERIES, ids=ids(hacks.FORGERIES))
def test_forged_records_with_the_nonce_from_memory_score_zero(servers: Servers, hack: Hack) -> None:
    """Records written with the run's nonce (found through `gc` or the frames), alone or
    alongside the harness's: a record is only as good as its value."""
    scores_zero(servers, hack, [*SAMPLE, *OURS])


@pytest.mark.parametrize("hack", hacks.LOOKUPS, ids=ids(hacks.LOOKUPS))
def test_expected_values_are_beyond_files_processes_environment_and_memory(
    servers: Servers, hack: Hack, witness: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task files, the server's memory, command line and environment, another process
    that holds an expected value, the harness's memory: nothing there to find."""
    monkeypatch.setenv("ECOTONE_ANSWER", SECRET)  # the server's environment holds one too
    scores_zero(servers, hack, [*SAMPLE, *OURS])


@pytest.mark.parametrize("hack", hacks.OVERWRITES, ids=ids(hacks.OVERWRITES))
def test_overwriting_the_tests_scores_zero_and_changes_nothing(
    servers: Servers, hack: Hack
) -> None:
    """The task files, the harness and the env's code cannot be written, nor can a file be
    planted where later interpreters would run it; rewriting the tests in the harness's
    memory only changes what runs in the sandbox."""
    walls_or_skip(servers, hack)
    package = Path(ecotone.__file__).parent
    files = [
        servers.task_file,
        package / "plugins" / "data" / "coding_tasks.toml",
        package / "plugins" / "coding" / "harness.py",
        package / "plugins" / "coding" / "env.py",
    ]
    folders = [sysconfig.get_paths(vars={"base": sys.base_prefix})["purelib"], str(package)]
    before = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    extra = {"paths": repr([str(p) for p in files]), "folders": repr(folders), "mark": MARK}
    for target in [*SAMPLE, *OURS]:
        code = hack.program(target.fn, **extra)
        obs = play(servers, target, code, hack.timeout_s)
        assert obs.reward == 0.0 and "WROTE" not in obs.stdout, (target.name, obs.stdout)
    assert {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in files} == before


@pytest.mark.parametrize("hack", hacks.SLOW, ids=ids(hacks.SLOW))
def test_slow_answers_racing_the_deadline_score_zero(servers: Servers, hack: Hack) -> None:
    """Answers that come as the run is killed, and a child that writes after the harness has
    gone: a cut line is dropped, a late one rejects the run, nothing outlives it."""
    scores_zero(servers, hack, [SAMPLE[0], OURS[0], OURS[2]])


@pytest.mark.parametrize("hack", hacks.FLOODS, ids=ids(hacks.FLOODS))
def test_output_floods_score_zero(servers: Servers, hack: Hack) -> None:
    """Fake result lines on stdout, garbage on every descriptor, huge or bottomless values,
    huge errors: output is capped, the channel rejects what is not the harness's."""
    scores_zero(servers, hack, [SAMPLE[0], OURS[0], OURS[2]])


# --- weak tests ------------------------------------------------------------------------------

ALL = [
    *hacks.ALWAYS_EQUAL,
    *hacks.PATCHES,
    *hacks.EXITS,
    *hacks.FORGERIES,
    *hacks.LOOKUPS,
    *hacks.OVERWRITES,
    *hacks.SLOW,
    *hacks.FLOODS,
]


@pytest.mark.parametrize(
    "hack",
    [
        pytest.param(h, marks=pytest.mark.xfail(strict=True, reason=h.beats_weak))
        if h.beats_weak
        else h
        for h in ALL
    ],
    ids=ids(ALL),
)
def test_weak_tests_fall_only_to_what_runs_in_the_sandbox(
    servers: Servers, hack: Hack, witness: int
) -> None:
    """Asserts that stay in the sandbox (marked weak) judge themselves: a hack that reaches
    them wins (an expected failure, with the reason); every other hack scores 0 on them too."""
    walls_or_skip(servers, hack)
    extra = {**extras(servers), "folders": "[]"}
    obs = play(servers, WEAK_TARGET, hack.program("answer", **extra), hack.timeout_s)
    assert all(t.weak for t in obs.tests)
    assert obs.reward == 0.0, [(t.name, t.passed) for t in obs.tests]


# --- where the expected values live ------------------------------------------------------------


def test_the_servers_package_is_hidden_even_beneath_what_runs_may_read(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed into the interpreter's own site-packages (as in a container image), the
    `ecotone` package, shipped tasks and all, would lie beneath what every run reads. It is
    hidden there too: bubblewrap mounts an empty tmpfs over it, Landlock leaves it out of
    the paths it allows. Shown with a stand-in, a package of the standard library, hidden
    the same way while its neighbours stay readable."""
    from ecotone.plugins.coding import Limits, landlock
    from ecotone.plugins.coding import sandbox as chooser

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    hidden, neighbour = stdlib / "wsgiref", stdlib / "json" / "__init__.py"
    monkeypatch.setattr(landlock, "hidden_paths", lambda: (str(hidden.resolve()),))
    monkeypatch.setattr(chooser, "_chosen", {})
    sandbox = chooser.sandbox_for("bwrap" if servers.kind == "bwrap" else "rlimits")
    if sandbox.kind != "bwrap" and sandbox.walls is None:
        pytest.skip("no Landlock in this kernel: rlimits-only runs see the host's files")
    code = (
        "import os\n"
        f"for path in [{str(hidden / '__init__.py')!r}, {str(neighbour)!r}]:\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print('READ', path)\n"
        "    except OSError as exc:\n"
        "        print('HIDDEN', path, type(exc).__name__)\n"
    )
    run = sandbox.run(tmp_path, code, ["run"], Limits(timeout_s=20))
    assert run.stdout.text.splitlines() == [
        f"HIDDEN {hidden / '__init__.py'} "
        + ("FileNotFoundError" if sandbox.kind == "bwrap" else "PermissionError"),
        f"READ {neighbour}",
    ], run.stderr.text
