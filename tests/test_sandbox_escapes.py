"""The escape suite: what agent code tries against the coding sandbox, each failing with a
typed reason in the observation while the server keeps serving. Runs against both sandbox
kinds where they differ (bubblewrap, and rlimits-only, which is weaker and says so), with
the seccomp filter and the cgroup-wide limits where this machine offers them (CI does: root,
cgroup v1 controllers, bubblewrap 0.8).

Complements tests/test_env_coding.py (host files, network, the server's process, writes
outside the scratch dir, timeouts, output and memory bombs of one process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.plugins.coding import cgroups, seccomp
from ecotone.plugins.coding.env import CodingAction, CodingObservation, CodingState
from tests.conftest import run_server
from tests.test_env_coding import BWRAP, NO_BWRAP, CodingTestEnvs, Served, custom

CGROUPS = cgroups.support()
NO_CGROUPS = f"no usable cgroups here ({CGROUPS.why}); CI runs these as root"


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


def run(served: Served, code: str, **options: Any) -> CodingObservation:
    with served.connect() as env:
        env.reset(**custom(**options))
        observation = env.step(CodingAction(code=code)).observation
        env.reset(**custom())  # the server goes on serving this session
        assert env.step(CodingAction(code="print('still here')")).observation.stdout == (
            "still here\n"
        )
    return observation


SYSCALL = """
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    r = libc.syscall(*args)
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
"""


def syscall_numbers() -> dict[str, int]:
    _, table = seccomp.TABLES["x86_64" if os.uname().machine == "x86_64" else "aarch64"]
    return table


@pytest.mark.skipif(BWRAP is None, reason=NO_BWRAP)
@pytest.mark.skipif(seccomp.program() is None, reason="no seccomp filter for this architecture")
def test_seccomp_refuses_namespaces_io_uring_ptrace_keys_bpf_mounts_and_sysv_ipc(
    served: Served,
) -> None:
    if not served.bwrap:
        pytest.skip("rlimits-only has no seccomp filter (its observation says so)")
    nr = syscall_numbers()
    probes = {
        "unshare(NEWUSER)": f"call({nr['unshare']}, 0x10000000)",
        "unshare(NEWNET)": f"call({nr['unshare']}, 0x40000000)",
        "clone(NEWUSER)": f"call({nr['clone']}, 0x10000000 | 17, 0, 0, 0, 0)",
        "setns": f"call({nr['setns']}, 0, 0)",
        "io_uring_setup": f"call({nr['io_uring_setup']}, 1, 0)",
        "ptrace": f"call({nr['ptrace']}, 0, 0, 0, 0)",
        "keyctl": f"call({nr['keyctl']}, 0, 0)",
        "bpf": f"call({nr['bpf']}, 0, 0, 0)",
        "mount": f"call({nr['mount']}, 0, 0, 0, 0, 0)",
        "userfaultfd": f"call({nr['userfaultfd']}, 0)",
        "shmget": f"call({nr['shmget']}, 0, 4096, 0o1600)",  # IPC_PRIVATE, IPC_CREAT | 0600
        "semget": f"call({nr['semget']}, 0, 1, 0o1600)",
        "msgget": f"call({nr['msgget']}, 0, 0o1600)",
        "mq_open": f"call({nr['mq_open']}, b'leak', 0o100 | 2, 0o600, 0)",  # O_CREAT | O_RDWR
    }
    body = ", ".join(f"{name!r}: {expr}" for name, expr in probes.items())
    code = SYSCALL + f"print(json.dumps({{{body}}}))\n"
    obs = run(served, code)
    assert json.loads(obs.stdout) == dict.fromkeys(probes, "EPERM")
    assert obs.isolation[:3] == ["bwrap", "no-user-namespaces", "seccomp"]


@pytest.mark.skipif(BWRAP is None, reason=NO_BWRAP)
def test_ordinary_code_still_forks_threads_and_runs_subprocesses(served: Served) -> None:
    code = (
        "import subprocess, sys, threading\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True,"
        " text=True).stdout.strip())\n"
    )
    assert run(served, code).stdout == "thread\n42\n"


@pytest.mark.skipif(not CGROUPS.usable, reason=NO_CGROUPS)
def test_a_fork_bomb_meets_the_run_wide_process_limit(served: Served) -> None:
    code = (
        "import os, time\n"
        "for i in range(1000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno); break\n"
    )
    obs = run(served, code)
    assert obs.stdout.startswith("refused 11")  # EAGAIN: pids.max
    assert "pids" in obs.limits_hit and f"cgroup-{CGROUPS.kind}" in obs.isolation
    assert not obs.timed_out  # the sleepers did not hold the run open: they were killed


@pytest.mark.skipif(not CGROUPS.usable, reason=NO_CGROUPS)
def test_memory_spread_over_many_processes_meets_the_run_wide_limit(served: Served) -> None:
    # Each child holds its memory a while (allocating takes a fraction of that), so the six
    # compete at once: had one exited before the next allocated, both would fit.
    code = (
        "import os, time\n"
        "kids = []\n"
        "for i in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:  # a child, not the parent (/proc is closed to rlimits-only's Landlock)\n"
        "            open('/proc/self/oom_score_adj', 'w').write('1000')\n"
        "        except OSError:\n"
        "            pass\n"
        "        block = bytearray(120 * 2**20)  # under the 256 MiB each process may map\n"
        "        for j in range(0, len(block), 4096): block[j] = 1\n"
        "        time.sleep(1.5)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sorted(os.WEXITSTATUS(s) if os.WIFEXITED(s) else -os.WTERMSIG(s)"
        " for s in (os.waitpid(k, 0)[1] for k in kids)))\n"
    )
    obs = run(served, code, timeout_s=30)  # reclaim before the kills can be slow on a busy host
    assert obs.stdout, (obs.exit_code, obs.timed_out, obs.limits_hit, obs.stderr)
    statuses = json.loads(obs.stdout)
    assert statuses.count(-9) >= 4  # 6 x 120 MiB cannot all fit in 256 MiB for the run
    assert "memory" in obs.limits_hit


@pytest.mark.skipif(BWRAP is None, reason=NO_BWRAP)
def test_filling_the_scratch_disk_stops_at_its_size(served: Served) -> None:
    if not served.bwrap:
        pytest.skip("rlimits-only writes to a host directory, capped per file only")
    code = (
        "written = 0\n"
        "try:\n"
        "    for i in range(20):\n"
        "        with open(f'fill{i}', 'wb') as f:\n"
        "            f.write(b'x' * (4 * 2**20)); written += 4\n"
        "except OSError as exc:\n"
        "    print('stopped', exc.errno, written)\n"
    )
    obs = run(served, code)
    found = re.match(r"stopped (\d+) (\d+)", obs.stdout)
    assert found is not None, obs.stdout + obs.stderr
    assert int(found[1]) == 28 and int(found[2]) <= 32  # ENOSPC, at most the 32 MiB tmpfs


def leftovers(groups: list[Path]) -> list[str]:
    """Processes in `groups` other than a sandbox's bwrap and its PID 1 (a zygote)."""
    found = []
    for group in groups:
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if fields.get("Name") == "bwrap" or fields.get("NSpid", "").split()[-1:] == ["1"]:
                continue
            found.append(f"{pid} {fields.get('Name')} (NSpid {fields.get('NSpid')})")
    return found


@pytest.mark.skipif(not CGROUPS.usable, reason=NO_CGROUPS)
def test_nothing_outlives_a_run_not_even_a_setsid_double_fork(served: Served) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('left behind')\n"
    )

    def runs_left() -> list[Path]:
        return [p for base in CGROUPS.bases for p in base.iterdir() if p.is_dir()]

    before = len(runs_left())
    obs = run(served, code)
    assert obs.stdout == "left behind\n"
    if served.zygote:  # the zygotes' groups stay, holding only bwrap and the zygote
        assert leftovers(runs_left()) == []
    else:
        assert len(runs_left()) == before  # every run's group is gone, so nothing is in one
    with ecotone.connect(served.url, state_type=CodingState) as env:  # and the server serves
        env.reset(**custom())


def test_every_observation_says_what_guards_the_run(served: Served) -> None:
    with served.connect() as env:
        obs = env.reset(**custom()).observation
    assert obs.isolation[0] == served.sandbox
    tail = ["zygote"] if served.zygote else []
    assert obs.isolation[-1 - len(tail) :] == [
        f"cgroup-{CGROUPS.kind}" if CGROUPS.usable else "per-process-limits-only",
        *tail,
    ]
    if not served.bwrap:
        assert "seccomp" not in obs.isolation
        assert obs.isolation[1] == ("landlock" if served.landlock else "no-landlock")


CAPABILITIES = (
    "import errno, os, socket, stat\n"
    "def attempt(name, call):\n"
    "    try:\n"
    "        call()\n"
    "        print(name, 'ok')\n"
    "    except OSError as exc:\n"
    "        print(name, errno.errorcode[exc.errno])\n"
    "open('mine', 'w').close()\n"
    "attempt('chown', lambda: os.chown('mine', 12345, 12345))\n"
    "attempt('mknod', lambda: os.mknod('null', stat.S_IFCHR | 0o666, os.makedev(1, 3)))\n"
    "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1).close())\n"
)
"""Harmless uses of capabilities: chown, mknod, a raw socket."""


def test_a_run_holds_no_capabilities(served: Served) -> None:
    """Even when the server is root: bubblewrap drops them all in its user namespace, and
    rlimits-only's harness drops them (and the bounding set, and sets no_new_privs) before
    the submission starts."""
    obs = run(served, CAPABILITIES)
    said = obs.stdout.splitlines()
    assert said[0] in ("chown EPERM", "chown EINVAL"), obs.stdout + obs.stderr  # EINVAL: unmapped
    assert said[1] in ("mknod EPERM", "mknod EACCES")  # EACCES: Landlock refused it first
    assert said[2] == "raw EPERM"


def test_rlimits_only_drops_capabilities_even_without_landlock(tmp_path: Path) -> None:
    import attrs

    from ecotone.plugins.coding import Limits, sandbox_for

    sandbox = attrs.evolve(sandbox_for("rlimits"), walls=None)  # a kernel without Landlock
    done = sandbox.run(tmp_path, CAPABILITIES, ["run"], Limits(timeout_s=20))
    assert done.stdout.text.splitlines() == ["chown EPERM", "mknod EPERM", "raw EPERM"], (
        done.stdout.text + done.stderr.text
    )
    assert "no-landlock" in sandbox.isolation


def test_a_run_whose_walls_cannot_rise_never_starts(tmp_path: Path) -> None:
    """Fail closed: when the harness cannot drop its capabilities or raise its Landlock
    walls (here, rules it cannot read), it says why and exits before the submission runs."""
    from ecotone.plugins.coding.sandbox import Limits, _python_argv, base_python

    (tmp_path / "solution.py").write_text("print('the submission ran')\n")
    limits = {**Limits().for_child(), "walls": {"abi": 1, "rules": "not a list of rules"}}
    done = subprocess.run(
        _python_argv(base_python(), ["run", json.dumps(limits)]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 125 and done.stdout == ""
    assert done.stderr.startswith("the sandbox could not raise its walls: ")
