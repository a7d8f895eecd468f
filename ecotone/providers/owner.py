"""Who started a thing: the `ecotone.owner` label, and whether that owner still lives.

A label is `BOOT_ID/PID/START_TIME`: the pid alone is not enough, since pids are reused, and
a pid from an earlier boot means nothing. `gc` removes what carries a label whose owner is
gone, and never touches what a living process still uses.
"""

from __future__ import annotations

import functools
import os

LABEL_OWNER = "ecotone.owner"
LABEL_ENV = "ecotone.env"
LABEL_MANAGED = "ecotone.managed"


@functools.cache
def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown-boot"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]


def owner_label(pid: int | None = None) -> str:
    """The label for `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return f"{boot_id()}/{pid}/{start_time(pid) or '0'}"


def owner_alive(label: str) -> bool:
    """Whether the process a label names is still running. A malformed label counts as
    alive: gc leaves alone what it does not understand."""
    try:
        boot, pid, started = label.split("/")
        pid_number = int(pid)
    except ValueError:
        return True
    if boot != boot_id():
        return False
    return start_time(pid_number) == started


def labels_for(env: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels a provider puts on what it creates for `env`."""
    labels = {LABEL_MANAGED: "true", LABEL_OWNER: owner_label(), LABEL_ENV: env}
    labels.update(extra or {})
    return labels
