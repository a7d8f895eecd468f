"""Limits for a whole run, not per process: a cgroup per run of the coding sandbox.

A run (the submitted program, or its tests, and everything they start) is put in a fresh
cgroup before its first instruction, with `memory` (all its processes together, page cache
included), `pids` (processes and threads at once) and `cpu` (a share of the machine) capped.
When the run ends, everything still in the group is killed and the group removed, so nothing
outlives it (a `setsid` grandchild, a double fork).

Where: cgroup v2 (the unified hierarchy, with the memory, pids and cpu controllers enabled
for a group of ours), else cgroup v1 (its memory, pids and cpu hierarchies; what a
hybrid-mode machine without systemd delegation offers), else none: the sandbox then has only
per-process rlimits, and says so (`support().why`) in every observation.
"""

from __future__ import annotations

import functools
import os
import secrets
import shlex
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

ROOT: Final = Path("/sys/fs/cgroup")
GROUP: Final = "ecotone-coding"
"""Our parent group's name (under the root, or under each v1 hierarchy)."""
CONTROLLERS: Final = ("memory", "pids", "cpu")
CPU_PERIOD_US: Final = 100_000


@attrs.frozen
class RunLimits:
    """What one run may use, all its processes together."""

    memory_bytes: int
    pids: int
    cpus: float
    """CPU time per wall second (1.0: one core)."""


@attrs.frozen
class Support:
    """Which cgroups this machine lets us use: `kind` "v2", "v1" or "none", and why not."""

    kind: str
    bases: tuple[Path, ...] = ()
    """Our parent group per hierarchy (one for v2; memory, pids, cpu for v1)."""
    why: str = ""

    @property
    def usable(self) -> bool:
        return self.kind != "none"


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _probe_v2() -> Support | str:
    controllers = (ROOT / "cgroup.controllers").read_text().split()
    missing = [c for c in CONTROLLERS if c not in controllers]
    if missing:
        return f"cgroup v2 has no {', '.join(missing)} controller here"
    base = ROOT / GROUP
    base.mkdir(exist_ok=True)
    enable = " ".join(f"+{c}" for c in CONTROLLERS)
    for parent in (ROOT, base):
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not all(c in enabled for c in CONTROLLERS):
            _write(parent / "cgroup.subtree_control", enable)
    return Support("v2", (base,))


def _probe_v1() -> Support | str:
    bases = []
    for controller in CONTROLLERS:
        hierarchy = ROOT / controller
        if not (hierarchy / "cgroup.procs").exists():
            return f"no cgroup v1 {controller} hierarchy at {hierarchy}"
        base = hierarchy / GROUP
        base.mkdir(exist_ok=True)
        bases.append(base)
    return Support("v1", tuple(bases))


@functools.cache
def support() -> Support:
    """What this process may use (probed once): v2, else v1, else none with the reasons."""
    reasons = []
    for probe in (_probe_v2, _probe_v1):
        try:
            found = probe()
        except OSError as exc:
            found = f"{probe.__name__[7:]}: {exc.strerror or exc}"
        if isinstance(found, Support):
            try:
                with RunGroup.make(found, RunLimits(64 * 2**20, 8, 1.0)) as trial:
                    del trial  # a group can be made, limited and removed
            except OSError as exc:
                reasons.append(f"{found.kind}: cannot make a limited group ({exc})")
                continue
            return found
        reasons.append(found)
    return Support("none", why="; ".join(reasons) or "no cgroups")


@attrs.define
class RunGroup:
    """One run's cgroup (a group in each hierarchy for v1)."""

    support: Support
    paths: tuple[Path, ...]

    @classmethod
    def make(cls, support: Support, limits: RunLimits) -> RunGroup:
        name = f"run-{os.getpid()}-{secrets.token_hex(6)}"
        paths: list[Path] = []
        try:
            for base in support.bases:
                path = base / name
                path.mkdir()
                paths.append(path)
            group = cls(support, tuple(paths))
            group.limit(limits)
        except BaseException:
            for path in reversed(paths):
                _rmdir(path)
            raise
        return group

    def limit(self, limits: RunLimits) -> None:
        """Set (or change) the group's limits."""
        quota = max(1000, int(limits.cpus * CPU_PERIOD_US))
        if self.support.kind == "v2":
            (path,) = self.paths
            _write(path / "memory.max", str(limits.memory_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
            _write(path / "pids.max", str(limits.pids))
            _write(path / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            return
        memory, pids, cpu = self.paths
        files = ["memory.limit_in_bytes"]
        if (memory / "memory.memsw.limit_in_bytes").exists():
            # memory + swap may never be below memory alone: raise it first, lower it last
            current = int((memory / "memory.limit_in_bytes").read_text())
            swap = "memory.memsw.limit_in_bytes"
            files = [swap, *files] if limits.memory_bytes > current else [*files, swap]
        for name in files:
            _write(memory / name, str(limits.memory_bytes))
        _write(pids / "pids.max", str(limits.pids))
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(quota))

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` started inside the group: a shell writes its own pid into each group's
        `cgroup.procs`, then becomes `argv` (exec), so the run's first instruction, and
        every process it starts, is already in the group."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(p / 'cgroup.procs'))}" for p in self.paths)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths:
            try:
                found.update(int(x) for x in (path / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(found)

    def counts(self) -> dict[str, int]:
        """How often the group has met each limit so far: `memory` (the kernel killed for it
        or refused pages), `pids` (a fork or thread refused)."""
        if self.support.kind == "v2":
            (path,) = self.paths
            events = _events(path / "memory.events")
            return {
                "memory": events.get("oom_kill", 0) + events.get("max", 0),
                "pids": _events(path / "pids.events").get("max", 0),
            }
        memory, pids, _ = self.paths
        failed = _events(memory / "memory.oom_control").get("oom_kill", 0)
        for name in ("memory.failcnt", "memory.memsw.failcnt"):
            try:
                failed += int((memory / name).read_text())
            except (OSError, ValueError):
                pass
        return {"memory": failed, "pids": _events(pids / "pids.events").get("max", 0)}

    def limits_hit(self, since: dict[str, int] | None = None) -> list[str]:
        """Which limits the group ran into (since the `counts()` snapshot `since`)."""
        before = since or {}
        return [name for name, n in self.counts().items() if n > before.get(name, 0)]

    def kill(self, timeout: float = 5.0) -> None:
        """Kill everything in the group, until it is empty (or `timeout` passes)."""
        if self.support.kind == "v2" and (self.paths[0] / "cgroup.kill").exists():
            try:
                _write(self.paths[0] / "cgroup.kill", "1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.005)

    def remove(self) -> None:
        self.kill()
        for path in self.paths:
            _rmdir(path)

    def __enter__(self) -> RunGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _events(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            pass
    return out


def _rmdir(path: Path) -> None:
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while the last process is being reaped
            time.sleep(0.01)


__all__ = ["RunGroup", "RunLimits", "Support", "support"]
