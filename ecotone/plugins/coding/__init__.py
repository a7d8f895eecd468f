"""`coding`: the agent submits Python; hidden unit tests score it; the code runs sandboxed.

Action `{"code": str}`. Observation: the task and prompt, the program's stdout/stderr (cut at
16 KiB each, flagged and marked), exit code, `timed_out`, per-test results
`[{name, passed, message}]` and `passed`/`total`; reward = passed / total; done when all pass,
truncated after `max_attempts` (reset option, default 5). The shipped tasks are
`data/coding_tasks.toml`, published as splits `train` and `test` without their hidden tests;
a reset may also bring a custom task inline. Details: `CodingEnv`.

Each step is two runs, each a fresh interpreter (`python -I`, the base installation rather
than the server's venv, a clean environment) in a fresh scratch directory holding only
`solution.py`, removed after the run (a session's directories go on close); under bubblewrap,
by default, each run is instead a fork of a zygote in a pre-started sandbox, which starts every
run from the same state (`zygote.py`; docs/sandbox.md says how and what it shares):

1. the submission as a script (`__main__`), for its output and exit code;
2. the trusted harness (`harness.py`), which reads the test spec from stdin, imports the
   submission as the module `solution` (so `if __name__ == "__main__":` blocks do not run)
   and reports each test as a JSON line on a file descriptor whose file lies outside the
   sandbox, tagged with a per-run random nonce.

Limits, set by the harness before any submitted code runs and inherited by its children: a
wall-clock timeout (then SIGKILL to the whole process group; under bwrap, the pid namespace
goes with it), RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE (every file, stdout and stderr
included: a flood of output fails with EFBIG), RLIMIT_NOFILE, no core dumps.

With bubblewrap (`bwrap` on PATH and working; probed once per process): new user, pid, net,
ipc, uts, mount and cgroup namespaces; uid `nobody` (root, still with no capabilities, where
the kernel refuses user namespaces); `--die-with-parent`, `--new-session`; read-only binds of
/usr, /lib*, /bin and the python install only; minimal /dev and /proc; a read-only root. It
can write only to its scratch directory (the cwd), a private 64 MiB /tmp and a 16 MiB
/dev/shm. So the code cannot see the server's files (its working directory, home, venv, the
task file with the expected values), processes or network (only a fresh loopback), cannot
write anywhere else, and cannot raise its limits. Its scratch directory is a tmpfs of 32 MiB
holding `solution.py` (`--file`), so a disk fill stops there. A seccomp filter
(`ecotone.plugins.coding.seccomp`, loaded with `--seccomp`) refuses new namespaces, mounts,
io_uring, bpf, perf events, userfaultfd, ptrace, the kernel keyring, modules and kexec, and
`--disable-userns` forbids nested user namespaces.

Run-wide limits (`ecotone.plugins.coding.cgroups`), for either kind: each run is started
inside a fresh cgroup (v2 where its controllers are delegated, else the v1 memory, pids and
cpu hierarchies) capping its memory (all its processes together: `memory_mb`), its
processes and threads (`Limits.pids`, 64) and its CPU (`Limits.cpus`, one core); when the
run ends, everything left in the group is killed (a `setsid` grandchild, a double fork) and
the group removed. The limits a run ran into are the observation's `limits_hit`, and what
guards runs is its `isolation` (`["bwrap", "no-user-namespaces", "seccomp", "cgroup-v1"]`);
without cgroups it ends with `per-process-limits-only`.

Without bubblewrap ("rlimits-only", reported in observation and state, with a warning logged
once): still a separate process with the same limits, a scratch cwd, a minimal environment and
its own session (`setsid`), killed with its process group; and, before any submitted code
runs, the harness drops every capability (bounding and ambient sets too, no_new_privs) and,
where the kernel offers Landlock (`isolation` says `landlock`; `ecotone.plugins.coding.landlock`),
walls itself in: files only beneath the system directories and the interpreter (read) and its
scratch directory (read and write), never the server's own package; no /proc, no TCP bind or
connect, no signals, abstract sockets or ptrace beyond the run. It still shares the host's
kernel namespaces (UDP, the host's view of the machine) and writes a host directory capped per
file only; without Landlock (`no-landlock`) it can read and write what the server's user can
(the task files included), use the network and signal the server. Prefer bubblewrap.
`ECOTONE_CODING_SANDBOX=bwrap` makes bubblewrap required instead, and `=rlimits` opts in to
the weaker sandbox; in the default `auto` mode, a server listening beyond loopback refuses to
fall back to it (fail closed: see docs/sandbox.md).

What the tests can trust: for cases (every shipped task's tests, a custom task's `cases`, and
its sound `assert CALL == LITERAL` statements, at the top level or in a test function, which
become cases: `asserts.py` says where that is sound) the harness sends back values, and the
server compares them with expected values that never enter the sandbox, so a pass needs the
right values. A custom task's other asserts run inside the sandbox, next to the submission,
and report pass or fail themselves: they are the weaker kind, marked `weak` in the
observation's `tests` (and counted in its `weak`), as is a given case whose expression
compares in the sandbox. Tampering with the results channel (stray lines, a wrong nonce, a
second record for a test) rejects the whole run; but code that deliberately inspects the
harness's memory (frames, `gc`) can find the nonce and forge a weak test's pass. The reward
hacks tried against both kinds, and the threat model, are in docs/sandbox.md.

Steps block (two process runs each), so the env keeps `inline = False`: the kernel runs each
call in a worker thread, which keeps other sessions responsive, and the thread limiter of the
server's event loop also bounds how many sandboxes run at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ecotone

if TYPE_CHECKING:
    from ecotone.plugins.coding.env import (
        CaseResult,
        CodingAction,
        CodingEnv,
        CodingObservation,
        CodingState,
        Task,
        tasks,
    )
    from ecotone.plugins.coding.sandbox import Limits, Sandbox, SandboxUnavailable, sandbox_for

# Imported on first use: the plugin's entry point is loaded by every process that looks up a
# plugin (a client finding its URL's channel included), and the sandbox is heavy.
_LAZY = {
    **dict.fromkeys(
        (
            "CaseResult",
            "CodingAction",
            "CodingEnv",
            "CodingObservation",
            "CodingState",
            "Task",
            "tasks",
        ),
        "ecotone.plugins.coding.env",
    ),
    **dict.fromkeys(
        ("Limits", "Sandbox", "SandboxUnavailable", "sandbox_for"),
        "ecotone.plugins.coding.sandbox",
    ),
}

__all__ = [
    "CaseResult",
    "CodingAction",
    "CodingEnv",
    "CodingObservation",
    "CodingState",
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "Task",
    "ecotone_environments",
    "sandbox_for",
    "tasks",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ecotone.plugins.coding' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    from ecotone.plugins.coding.env import CodingEnv

    return {"coding": CodingEnv}
