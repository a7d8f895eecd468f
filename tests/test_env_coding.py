"""The `coding` env through the real client: scoring, limits, the sandbox's walls, cleanup.

Tests that take a `served` fixture run twice: against a server whose env requires bubblewrap
(skipped where `bwrap` is not installed) and against one forced to rlimits-only. Tests of what
only bubblewrap guarantees expect the opposite outcome under rlimits-only, which shows both
that the check works and that the weaker mode really is weaker.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

import ecotone
from ecotone import conformance
from ecotone.plugins.coding import (
    CodingAction,
    CodingEnv,
    CodingObservation,
    CodingState,
    Limits,
    sandbox_for,
    tasks,
)
from ecotone.plugins.coding.asserts import split_asserts
from tests.conftest import run_server, wait_until

BWRAP = shutil.which("bwrap")
NO_BWRAP = "bubblewrap is not installed (apt-get install -y bubblewrap); CI installs it"


class BwrapCodingEnv(CodingEnv):
    sandbox_mode = "bwrap"  # required: a bwrap that cannot run fails the tests, not skips them


class RlimitsCodingEnv(CodingEnv):
    sandbox_mode = "rlimits"


class BwrapFreshCodingEnv(CodingEnv):
    """A fresh sandbox and interpreter per run, not a zygote's fork."""

    sandbox_mode = "bwrap"
    zygote = False


class CodingTestEnvs:
    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return {
            "coding_bwrap": BwrapCodingEnv,
            "coding_bwrap_fresh": BwrapFreshCodingEnv,
            "coding_rlimits": RlimitsCodingEnv,
        }


@attrs.frozen
class Served:
    url: str
    kind: str

    @property
    def bwrap(self) -> bool:
        return self.kind.startswith("bwrap")

    @property
    def sandbox(self) -> str:
        """What observations name as the sandbox kind."""
        return "bwrap" if self.bwrap else self.kind

    @property
    def zygote(self) -> bool:
        return self.kind == "bwrap"

    @property
    def landlock(self) -> int:
        """rlimits-only: the Landlock ABI of its walls (0: none here); bwrap: 0."""
        walls = None if self.bwrap else sandbox_for("rlimits").walls
        return walls.abi if walls is not None else 0

    @property
    def walled(self) -> bool:
        """The host's files, processes and TCP are out of reach: bwrap, or Landlock walls."""
        return self.bwrap or self.landlock >= 6

    def connect(self) -> ecotone.EnvClient[CodingObservation, CodingState]:
        return ecotone.connect(self.url, observation_type=CodingObservation, state_type=CodingState)


@pytest.fixture(scope="module", params=["bwrap", "bwrap-fresh", "rlimits-only"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """The coding env under bubblewrap (zygote forks, and fresh sandboxes), and rlimits-only."""
    if request.param.startswith("bwrap") and BWRAP is None:
        pytest.skip(NO_BWRAP)
    env = {"bwrap": "coding_bwrap", "bwrap-fresh": "coding_bwrap_fresh"}.get(
        request.param, "coding_rlimits"
    )
    with run_server(env, plugins=[CodingTestEnvs()]) as server:
        yield Served(server.url, request.param)


def inproc() -> ecotone.EnvClient[CodingObservation, CodingState]:
    return ecotone.connect(
        "inproc://coding", observation_type=CodingObservation, state_type=CodingState
    )


ADD_TESTS = """
def test_adds():
    assert add(2, 3) == 5

def test_negatives():
    assert add(-1, -1) == -2, "negatives"

def helper():
    raise AssertionError("not a test")
"""


def custom(**options: Any) -> dict[str, Any]:
    """Reset options for a small custom task (add two numbers), overridable."""
    task = {"id": "custom", "prompt": "Write add(a, b).", "tests": ADD_TESTS}
    return {"task": task, **options}


def marked_lines(text: str, marker: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(marker)]


# --- scoring ----------------------------------------------------------------------------------


def test_a_correct_solution_scores_one_and_ends_the_episode(served: Served) -> None:
    with served.connect() as env:
        first = env.reset(task="fizzbuzz").observation
        assert (first.task, first.total, first.sandbox) == ("fizzbuzz", 5, served.sandbox)
        assert "fizzbuzz(n: int)" in first.prompt
        result = env.step(CodingAction(code=tasks()["fizzbuzz"].reference))
        obs = result.observation
        assert (result.reward, result.done, result.truncated) == (1.0, True, False)
        assert (obs.passed, obs.total, obs.exit_code, obs.timed_out) == (5, 5, 0, False)
        assert all(t.passed for t in obs.tests)
        state = env.state()
        assert (state.solved, state.best_score, state.attempts, state.sandbox) == (
            True,
            1.0,
            1,
            served.sandbox,
        )


def test_a_wrong_solution_gets_partial_credit_until_the_attempts_run_out(served: Served) -> None:
    almost = "def fizzbuzz(n):\n    return [str(i) for i in range(1, n + 1)]\n"
    with served.connect() as env:
        env.reset(task="fizzbuzz", max_attempts=2)
        first = env.step(CodingAction(code=almost))
        assert (first.reward, first.done, first.truncated) == (0.4, False, False)
        failed = {t.name: t.message for t in first.observation.tests if not t.passed}
        assert set(failed) == {"fifteen", "ninety_nine_and_hundred", "fizzbuzz_count"}
        assert failed["fizzbuzz_count"].startswith("fizzbuzz(100).count('FizzBuzz') returned 0")
        assert "Fizz" not in failed["fifteen"]  # the expected value stays hidden
        second = env.step(CodingAction(code="def fizzbuzz(n):\n    return []\n"))
        assert (second.reward, second.done, second.truncated) == (0.2, False, True)
        assert second.observation.attempts_left == 0
        assert env.state().best_score == 0.4


def test_every_shipped_task_passes_its_reference_and_fails_its_stub() -> None:
    assert len(tasks()) >= 8
    with inproc() as env:
        for name, task in tasks().items():
            env.reset(task=name)
            solved = env.step(CodingAction(code=task.reference))
            failures = [t for t in solved.observation.tests if not t.passed]
            assert solved.reward == 1.0 and solved.done, (name, failures)
            env.reset(task=name)
            stubbed = env.step(CodingAction(code=task.stub))
            assert stubbed.reward == 0.0 and stubbed.observation.exit_code == 0, name


def test_a_slow_solution_keeps_the_results_of_the_tests_that_finished_in_time() -> None:
    naive = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
    with inproc() as env:
        env.reset(task="fibonacci", timeout_s=1.5)
        result = env.step(CodingAction(code=naive))
    obs = result.observation
    assert obs.timed_out and obs.exit_code == 0  # the program ran; the tests ran out of time
    assert [t.passed for t in obs.tests] == [True, True, True, True, False, False]
    assert obs.tests[-1].message == "no result: the tests ran out of time (1.5 s)"
    assert result.reward == 4 / 6


def test_a_custom_task_comes_from_reset_options(served: Served) -> None:
    with served.connect() as env:
        first = env.reset(**custom(timeout_s=2, memory_mb=128)).observation
        assert (first.task, first.prompt, first.total) == ("custom", "Write add(a, b).", 2)
        state = env.state()
        assert (state.task, state.timeout_s, state.memory_mb) == ("custom", 2.0, 128)
        result = env.step(CodingAction(code="def add(a, b):\n    return abs(a + b)\n"))
        tests = {t.name: t for t in result.observation.tests}  # each assert is a case
        assert list(tests) == ["test_adds: add(2, 3)", "test_negatives: add(-1, -1)"]
        assert tests["test_adds: add(2, 3)"].passed
        negatives = tests["test_negatives: add(-1, -1)"]
        assert not negatives.passed and not negatives.weak
        assert negatives.message == "add(-1, -1) returned 2, which is not the expected value"
        assert result.reward == 0.5 and result.observation.weak == 0

        task = {"id": "p", "prompt": "p", "tests": "assert add(1, 1) > 1\n"}
        plain = env.reset(task=task).observation
        assert plain.total == 1
        result = env.step(CodingAction(code="def add(a, b):\n    return a + b\n"))
        named = [(t.name, t.passed, t.weak) for t in result.observation.tests]
        assert named == [("tests", True, True)]  # the module, run in the sandbox: weak
        assert result.done


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"task": "no_such_task"}, "tasks: fizzbuzz"),
        ({"task": "fizzbuzz", "timeout_s": 10_000}, "timeout_s must be a number"),
        ({"task": "fizzbuzz", "memory_mb": 1}, "memory_mb must be a number"),
        ({"task": "fizzbuzz", "max_attempts": 0}, "max_attempts"),
        ({"task": {"id": "x", "prompt": "only a prompt"}}, "no `tests` or `cases` to make"),
        ({"task": {"id": "x", "prompt": "", "tests": "def test_x(:\n    pass"}}, "not valid"),
    ],
)
def test_bad_reset_options_are_refused_with_a_reason(
    options: dict[str, Any], complaint: str
) -> None:
    with inproc() as env:
        with pytest.raises(ecotone.ServerError, match=complaint):
            env.reset(**options)
        assert env.reset(task="is_prime").observation.task == "is_prime"  # the session goes on


def test_the_seed_picks_the_task_deterministically() -> None:
    def picks() -> list[str]:
        with inproc() as env:
            return [env.reset(seed=seed).observation.task for seed in range(12)]

    first = picks()
    assert first == picks()
    assert len(set(first)) > 3
    assert set(first) <= set(tasks())


def test_program_output_and_exit_code_are_reported(served: Served) -> None:
    code = "import sys\nprint('hello')\nprint('careful', file=sys.stderr)\nsys.exit(3)\n"
    with served.connect() as env:
        env.reset(**custom())
        obs = env.step(CodingAction(code=code)).observation
        assert (obs.stdout, obs.stderr, obs.exit_code) == ("hello\n", "careful\n", 3)
        assert not (obs.stdout_truncated or obs.stderr_truncated or obs.timed_out)
        assert all(t.message == "the solution failed to import: SystemExit: 3" for t in obs.tests)
        broken = env.step(CodingAction(code="def add(a, b:\n    pass\n")).observation
        assert broken.exit_code == 1 and "SyntaxError" in broken.stderr
        assert "solution.py" in broken.stderr and "line 1" in broken.stderr
        assert all("failed to import: SyntaxError" in t.message for t in broken.tests)


def test_forged_test_reports_are_rejected(served: Served) -> None:
    forger = (
        "import os\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        '        os.write(fd, b\'{"i": 0, "ok": true}\\n{"i": 1, "ok": true}\\n\')\n'
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)  # before the harness can report anything itself\n"
        "def add(a, b):\n"
        "    return 0\n"
    )
    with served.connect() as env:
        env.reset(**custom())
        result = env.step(CodingAction(code=forger))
        assert result.reward == 0.0
        assert all(t.message.startswith("rejected:") for t in result.observation.tests)


def test_sample_action_is_a_valid_program_for_the_task() -> None:
    env = CodingEnv()
    try:
        env.reset(seed=3)
        actions = [env.sample_action(random.Random(7)) for _ in range(2)]
        assert actions[0] == actions[1]  # chosen with the rng only
        rng = random.Random(0)
        codes = {env.sample_action(rng).code for _ in range(20)}
        assert len(codes) == 2  # the task's stub and a trivial program
        for code in codes:
            obs = env.step(CodingAction(code=code))
            assert obs.exit_code == 0 and not obs.timed_out and obs.reward == 0.0
    finally:
        env.close()
        env.close()  # idempotent


def test_the_env_passes_the_conformance_suite() -> None:
    report = conformance.run("coding", reset_options={"max_attempts": 2}, steps=4)
    assert report.ok and report.count(conformance.Status.SKIP) == 0, report.text()


# --- limits -----------------------------------------------------------------------------------


def test_an_infinite_loop_is_killed_at_the_timeout_while_another_session_steps(
    served: Served,
) -> None:
    timeout = 1.5
    looping = threading.Event()
    finished = threading.Event()
    outcome: dict[str, Any] = {}

    def loop_forever() -> None:
        with served.connect() as env:
            env.reset(**custom(timeout_s=timeout))
            looping.set()
            started = time.monotonic()
            outcome["result"] = env.step(CodingAction(code="while True:\n    pass\n"))
            outcome["elapsed"] = time.monotonic() - started
        finished.set()

    worker = threading.Thread(target=loop_forever)
    worker.start()
    try:
        assert looping.wait(10)
        time.sleep(0.2)
        with served.connect() as other:
            other.reset(**custom())
            quick = other.step(CodingAction(code="def add(a, b):\n    return a + b\n"))
            assert quick.reward == 1.0
            assert not finished.is_set()  # answered while the loop was still running
    finally:
        worker.join(30)
    obs = outcome["result"].observation
    assert obs.timed_out and obs.exit_code == -signal.SIGKILL
    assert timeout <= outcome["elapsed"] < timeout + 3  # the tests were not run as well
    assert all(t.message.startswith("not run: the program ran out of time") for t in obs.tests)


def test_the_timeout_also_kills_processes_the_code_started(served: Served) -> None:
    marker = f"ecotone-test-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'],\n"
        "                 start_new_session=False)\n"
        "print('STARTED')\n"
        "while True:\n"
        "    pass\n"
    )

    def running() -> bool:
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes()
                status = (proc / "status").read_text()
            except OSError:
                continue
            if marker.encode() in cmdline and "State:\tZ" not in status:
                return True
        return False

    with served.connect() as env:
        env.reset(**custom(timeout_s=1.5))
        obs = env.step(CodingAction(code=code)).observation
    assert obs.timed_out and obs.stdout == "STARTED\n"
    assert wait_until(lambda: not running(), timeout=5)


def test_a_memory_bomb_is_stopped_by_the_memory_limit(served: Served) -> None:
    bomb = (  # 1 GB at most, so a missing limit fails the test rather than the machine
        "blocks = []\n"
        "for _ in range(100):\n"
        "    blocks.append(bytearray(10 * 1024 * 1024))\n"
        "print('allocated a gigabyte')\n"
    )
    with served.connect() as env:
        env.reset(**custom(memory_mb=128))
        obs = env.step(CodingAction(code=bomb)).observation
    assert "MemoryError" in obs.stderr and "allocated" not in obs.stdout
    assert obs.exit_code == 1 and not obs.timed_out


def test_huge_output_is_truncated_and_flagged(served: Served) -> None:
    code = "import sys\nsys.stdout.write('x' * 1_000_000)\nsys.stderr.write('e' * 100)\n"
    with served.connect() as env:
        env.reset(**custom())
        obs = env.step(CodingAction(code=code)).observation
    cap = Limits().output_bytes
    assert obs.stdout_truncated and not obs.stderr_truncated
    assert obs.stdout.startswith("x" * cap)
    assert obs.stdout[cap:] == (
        f"\n[output truncated: 1000000 bytes written, the first {cap} shown]"
    )
    assert obs.stderr == "e" * 100 and obs.exit_code == 0


def test_endless_output_is_stopped_by_the_file_size_limit_not_the_timeout(
    served: Served,
) -> None:
    with served.connect() as env:
        env.reset(**custom(timeout_s=20))
        started = time.monotonic()
        obs = env.step(CodingAction(code="while True:\n    print('y' * 1000)\n")).observation
    assert time.monotonic() - started < 10
    assert obs.stdout_truncated and not obs.timed_out
    assert obs.exit_code == 1 and "File too large" in obs.stderr


@pytest.mark.parametrize("kind", ["bwrap", "rlimits-only"])
def test_cpu_time_limit_stops_a_busy_loop_before_the_wall_clock(kind: str, tmp_path: Path) -> None:
    if kind == "bwrap" and BWRAP is None:
        pytest.skip(NO_BWRAP)
    sandbox = sandbox_for("bwrap" if kind == "bwrap" else "rlimits")
    run = sandbox.run(tmp_path, "while True:\n    pass\n", ["run"], Limits(timeout_s=20, cpu_s=1))
    assert not run.timed_out and run.duration_s < 10
    assert run.exit_code in (-signal.SIGXCPU, -signal.SIGKILL)
    assert list(tmp_path.iterdir()) == []  # the run's directories are gone


@pytest.mark.parametrize("kind", ["bwrap", "rlimits-only"])
def test_a_traceback_names_scratch_not_the_hosts_directory(kind: str, tmp_path: Path) -> None:
    """Under either sandbox the code's directory shows as /scratch: the same code gives the
    same output run after run, and the host's layout is not shown to the agent."""
    if kind == "bwrap" and BWRAP is None:
        pytest.skip(NO_BWRAP)
    sandbox = sandbox_for("bwrap" if kind == "bwrap" else "rlimits")
    code = "import os\nprint(os.getcwd())\nraise SystemExit(1 / 0)\n"
    runs = [sandbox.run(tmp_path, code, ["run"], Limits(timeout_s=20)) for _ in range(2)]
    assert runs[0].stderr.text == runs[1].stderr.text
    assert "ZeroDivisionError" in runs[0].stderr.text
    assert str(tmp_path) not in runs[0].stderr.text + runs[0].stdout.text
    assert runs[0].stdout.text.strip() == "/scratch"


# --- the sandbox's walls (bubblewrap) -----------------------------------------------------------


def test_bwrap_hides_the_servers_files(served: Served, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    paths = [
        str(secret),
        ecotone.__file__,  # the server's own source, in its working tree
        str(Path(ecotone.__file__).parent / "plugins" / "data" / "coding_tasks.toml"),
        str(Path(sys.prefix) / "pyvenv.cfg"),
        os.path.join(os.getcwd(), "pyproject.toml"),
    ]
    code = (
        f"for path in {paths!r} + ['solution.py']:\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print('READ', path)\n"
        "    except OSError as exc:\n"
        "        print('HIDDEN', path, type(exc).__name__)\n"
    )
    with served.connect() as env:
        env.reset(**custom())
        obs = env.step(CodingAction(code=code)).observation
    assert marked_lines(obs.stdout, "READ solution.py")  # reading works in the sandbox
    readable = [line.split()[1] for line in marked_lines(obs.stdout, "READ /")]
    existing = [p for p in paths if os.path.exists(p)]
    assert readable == ([] if served.bwrap or served.landlock else existing)


def test_bwrap_blocks_the_network_even_to_loopback(served: Served) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
            "    print('CONNECTED')\n"
            "except OSError as exc:\n"
            "    print('BLOCKED', type(exc).__name__)\n"
        )
        with served.connect() as env:
            env.reset(**custom())
            obs = env.step(CodingAction(code=code)).observation
        listener.setblocking(False)
        try:
            listener.accept()[0].close()
            reached = True
        except BlockingIOError:
            reached = False
    if served.bwrap or served.landlock >= 4:  # Landlock refuses every TCP connect
        assert obs.stdout.startswith("BLOCKED") and not reached
    else:
        assert obs.stdout == "CONNECTED\n" and reached


def test_bwrap_stops_writes_outside_the_scratch_dir(served: Served, tmp_path: Path) -> None:
    marker = f"planted-{uuid.uuid4().hex}"
    targets = [
        str(tmp_path / marker),
        os.path.join(sys.base_prefix, marker),
        os.path.join(tempfile.gettempdir(), marker),
        f"/{marker}",
    ]
    code = (
        f"for path in {targets!r} + ['in-scratch.txt']:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('planted')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', path, type(exc).__name__)\n"
    )
    try:
        with served.connect() as env:
            env.reset(**custom())
            obs = env.step(CodingAction(code=code)).observation
        assert marked_lines(obs.stdout, "WROTE in-scratch.txt")
        denied = [line.split()[1] for line in marked_lines(obs.stdout, "DENIED /")]
        if served.bwrap:  # /tmp inside is private (a small tmpfs): that write stays there
            assert denied == [t for t in targets if t != targets[2]]
            assert not any(os.path.exists(t) for t in targets)
        elif served.landlock:  # Landlock: only the scratch dir is writable
            assert denied == targets
            assert not any(os.path.exists(t) for t in targets)
        else:  # rlimits-only runs as this user: root may write anywhere, others some places
            assert os.path.exists(targets[0]) and os.path.exists(targets[2])
    finally:
        for target in targets:
            if os.path.exists(target):
                os.remove(target)


def test_bwrap_hides_the_server_process(served: Served) -> None:
    code = (
        "import os\n"
        "try:\n"
        f"    os.kill({os.getpid()}, 0)\n"
        "    print('SEEN')\n"
        "except ProcessLookupError:\n"
        "    print('GONE')\n"
        "except PermissionError:\n"
        "    print('REFUSED')\n"
        "try:\n"
        "    print(sum(name.isdigit() for name in os.listdir('/proc')))\n"
        "except PermissionError:\n"
        "    print('REFUSED')\n"
    )
    with served.connect() as env:
        env.reset(**custom())
        obs = env.step(CodingAction(code=code)).observation
    verdict, processes = obs.stdout.split()
    if served.bwrap:
        assert verdict == "GONE" and int(processes) <= 3  # its own pid namespace
    elif served.walled:  # Landlock: no signal leaves the run, and /proc is not readable
        assert (verdict, processes) == ("REFUSED", "REFUSED")
    else:
        assert verdict == "SEEN"


# --- housekeeping -------------------------------------------------------------------------------


def test_scratch_directories_are_removed_after_each_run_and_on_close(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the env makes its dirs
    awkward = (
        "import os\n"
        "os.makedirs('deep/er')\n"
        "open('deep/er/file.txt', 'w').write('x')\n"
        "os.chmod('deep/er', 0)\n"
        "os.chmod('deep', 0o500)\n"
        "print(sorted(os.listdir('.')))\n"
    )

    def session_dirs() -> list[Path]:
        return sorted(tmp_path.glob("ecotone-coding-*"))

    with inproc() as first, inproc() as second:
        first.reset(**custom())
        second.reset(**custom())
        dirs = session_dirs()
        assert len(dirs) == 2  # one per session
        obs = first.step(CodingAction(code=awkward)).observation
        assert obs.stdout == "['deep', 'solution.py']\n"  # a fresh directory: nothing else
        again = first.step(CodingAction(code=awkward)).observation
        assert again.stdout == obs.stdout  # the previous run left nothing behind
        assert [list(d.iterdir()) for d in dirs] == [[], []]
        first.close()
        assert wait_until(lambda: len(session_dirs()) == 1)
    assert wait_until(lambda: session_dirs() == [])


# --- graders outside the agent's reach: cases (issue 37) --------------------------------------

ALWAYS_EQUAL = """
class E(int):
    __eq__ = lambda s, o: True
    __ne__ = lambda s, o: False
    __hash__ = int.__hash__

def add(a, b):
    return E(0)
"""
ADD = "def add(a, b):\n    return a + b\n"
ASSERTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
CASES = [{"expr": "add(1, 2)", "expected": 3}, {"expr": "add(2, 2)", "expected": 4}]


@pytest.mark.parametrize("given", ["asserts", "cases"])
def test_an_always_equal_value_scores_zero_on_inline_asserts_and_cases(
    served: Served, given: str
) -> None:
    """The issue's hack: `add` returns an int whose `__eq__` is always true. Plain asserts of
    the form `assert CALL == LITERAL` become cases: the call's value crosses as JSON and the
    server compares it, so the hack scores 0 either way; a correct solution scores 1."""
    key, value = ("tests", ASSERTS) if given == "asserts" else ("cases", CASES)
    task = {"id": "add", "prompt": "Write add(a, b).", key: value}
    with served.connect() as env:
        first = env.reset(task=task).observation
        assert first.total == 2
        hacked = env.step(CodingAction(code=ALWAYS_EQUAL))
        obs = hacked.observation
        assert hacked.reward == 0.0 and not hacked.done
        assert [(t.name, t.passed, t.weak) for t in obs.tests] == [
            ("add(1, 2)", False, False),
            ("add(2, 2)", False, False),
        ]
        assert obs.tests[0].message == "add(1, 2) returned 0, which is not the expected value"
        assert "3" not in obs.tests[0].message  # the expected value is never shown
        solved = env.step(CodingAction(code=ADD))
        assert solved.reward == 1.0 and solved.done
        assert all(t.passed and not t.weak for t in solved.observation.tests)


def test_converted_asserts_keep_their_place_and_other_asserts_are_weak(served: Served) -> None:
    """Setup before an assert runs before its case, at the top level and in a test function
    (whose locals the case sees); an assert that is not a sound `CALL == LITERAL` (here `>`,
    one in a loop, one whose call compares) runs in the sandbox, marked weak, as does a given
    case whose expression compares; an error in the remaining code still names the author's
    line. A test function of setup and converted asserts only is no test of its own."""
    tests = (
        "OFFSET = 10\n"
        "assert add(OFFSET, 1) == 11\n"
        "assert add(2,\n"
        "           2) == 4, 'spread over lines'\n"
        "OFFSET = 20\n"
        "assert add(OFFSET, 1) == 21\n"
        "def test_weak():\n"
        "    assert add(1, 1) > 5, 'too small'\n"
        "def test_local_setup():\n"
        "    base = add(1, 1)\n"
        "    assert add(base, 1) == 3\n"
        "def test_in_a_loop():\n"
        "    for n in (1,):\n"
        "        assert add(n, 1) == 2\n"
        "def test_compares_inside():\n"
        "    assert bool(add(1, 2) == 3) == True\n"
    )
    given = [
        {"expr": "add(0, 0)", "expected": 0, "name": "zero"},
        {"expr": "add(1, 2) == 3", "expected": True, "name": "compared"},
    ]
    task = {"id": "mixed", "prompt": "p", "tests": tests, "cases": given}
    with served.connect() as env:
        assert env.reset(task=task).observation.weak == 4
        obs = env.step(CodingAction(code=ADD)).observation
        assert [(t.name, t.passed, t.weak) for t in obs.tests] == [
            ("zero", True, False),
            ("compared", True, True),
            ("add(OFFSET, 1)", True, False),
            ("add(2, 2)", True, False),
            ("add(OFFSET, 1) #2", True, False),
            ("test_local_setup: add(base, 1)", True, False),
            ("test_weak", False, True),
            ("test_in_a_loop", True, True),
            ("test_compares_inside", True, True),
        ]
        assert obs.weak == 4
        assert obs.tests[6].message == "AssertionError: too small (hidden tests, line 8)"
        hacked = env.step(CodingAction(code=ALWAYS_EQUAL)).observation
        # only the weak checks fall to the hack (and `zero`, whose answer 0 is right)
        assert [t.passed for t in hacked.tests] == [
            True, True, False, False, False, False, False, True, True
        ]  # fmt: skip
        assert all(t.weak for t in hacked.tests[1:] if t.passed)


@pytest.mark.parametrize(
    ("tests", "converted"),
    [
        ("def test_a():\n    x = 1\n    assert f(x) == 2\n", ["test_a: f(x)"]),
        ("def test_a():\n    assert f(1) == 2\n    if c:\n        return\n"
         "    assert f(2) == 3\n", ["test_a: f(1)"]),
        ("def test_a():\n    for x in (1,):\n        assert f(x) == 2\n", []),
        ("def test_a():\n    with c:\n        assert f(1) == 2\n", []),
        ("def test_a():\n    try:\n        assert f(1) == 2\n    except E:\n        pass\n", []),
        ("def test_a(x=1):\n    assert f(x) == 2\n", []),
        ("@d\ndef test_a():\n    assert f(1) == 2\n", []),
        ("def test_a():\n    assert f(1) == 2\n    yield\n", []),
        ("def test_a():\n    assert f(1) == 2\ndef test_b():\n    test_a()\n", []),
        ("def test_a():\n    assert f(1) == 2\ntest_a = g\n", []),
        ("def test_a():\n    assert f(1) == 2\ndef test_a():\n    pass\n", []),
        ("def test_a():\n    assert bool(f(1) == 2) == True\n", []),
        ("def test_a():\n    assert f(y := 1) == 2\n", []),
        ("assert f(1 in x) == 2\nassert 3 == f(2)\n", ["f(2)"]),
        ("def helper():\n    assert f(1) == 2\n", []),
    ],
)  # fmt: skip
def test_only_sound_asserts_become_cases(tests: str, converted: list[str]) -> None:
    """An assert becomes a case only where it runs once, when the harness calls its test
    function (no loop, branch, `with` or `try` around it; no `return` before it; a function
    with no parameters, decorators or `yield`, called by nothing else), and only when its
    call compares nothing and binds nothing: elsewhere it runs in the sandbox, weak."""
    split = split_asserts(tests)
    assert [name for name, _, _ in split.cases] == converted
    assert split.code.count("__ecotone_case__") == len(converted)
    assert split.code.count("\n") == tests.count("\n")  # every line keeps its number


def test_a_task_files_cases_stay_on_the_server(tmp_path: Path) -> None:
    """A task file's `cases` are hidden fields: clients never see them; the env gets them."""
    import json

    record = {"id": "add", "prompt": "Write add(a, b).", "cases": CASES}
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with run_server(
        "coding_rlimits", plugins=[CodingTestEnvs()], tasks={"eval": str(path)}
    ) as server:
        with ecotone.connect(server.url, observation_type=CodingObservation) as env:
            listed = env.list_tasks("eval")
            assert "cases" not in str(listed) and "add(1, 2)" not in str(listed)
            env.reset(task="add")
            assert env.step(CodingAction(code=ALWAYS_EQUAL)).reward == 0.0
            assert env.step(CodingAction(code=ADD)).reward == 1.0
