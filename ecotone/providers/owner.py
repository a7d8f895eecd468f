"""Who started a thing: the `ecotone.owner` label, and whether that owner still lives.

A label is `MACHINE_ID/BOOT_ID/PID_NAMESPACE/PID/START_TIME`. The pid alone is not enough:
pids are reused (the start time, in clock ticks since boot, tells a reused pid apart), and a
pid means something only in its pid namespace, on its boot, on its machine. `gc` may run
elsewhere than the owner did: in a container or under `unshare --pid` (another pid
namespace, where the owner's pid names nothing or someone else), or on another host that
shares the engine (`DOCKER_HOST=tcp://...`).

`owner_alive(label)` judges from where it runs:

- another machine id (or one side's unknown): it cannot judge, so *alive*;
- the same machine, another boot id: the machine rebooted since, so *dead*;
- the same boot, another pid namespace: it cannot see the pid, so *alive*;
- the same namespace: alive if that pid runs with that start time.

Whatever cannot be judged counts as alive: gc leaves alone what it does not understand, and
never touches what a living process may still use. Labels of the older form
`BOOT_ID/PID/START_TIME` are still read, and judged as they were (boot, then pid and start
time). Machine ids must differ between machines that share an engine, as systemd makes them
(`/etc/machine-id`); a cloned VM that kept its clone's id would be taken for the same machine.
"""

from __future__ import annotations

import functools
import os

LABEL_OWNER = "ecotone.owner"
LABEL_ENV = "ecotone.env"
LABEL_MANAGED = "ecotone.managed"
UNKNOWN = "unknown"
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def _first_line(*paths: str) -> str:
    for path in paths:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text and "/" not in text:
            return text
    return UNKNOWN


@functools.cache
def machine_id() -> str:
    """This machine's id (`/etc/machine-id`), or `unknown`."""
    return _first_line(*MACHINE_ID_FILES)


@functools.cache
def boot_id() -> str:
    """This boot's id (changes at every boot), or `unknown`."""
    return _first_line("/proc/sys/kernel/random/boot_id")


@functools.cache
def pid_namespace() -> str:
    """The inode number of this process's pid namespace, or `unknown`. A process cannot
    leave its pid namespace, so this is fixed for its life."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return UNKNOWN
    number = link.partition("[")[2].rstrip("]")
    return number if number.isdigit() else UNKNOWN


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
    """The label for `pid` as this process sees it (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return f"{machine_id()}/{boot_id()}/{pid_namespace()}/{pid}/{start_time(pid) or '0'}"


def label_pid(label: str) -> int | None:
    """The pid a label names, or None for a label that is not understood."""
    parts = label.split("/")
    if len(parts) not in (3, 5):
        return None
    try:
        return int(parts[-2])
    except ValueError:
        return None


def owner_alive(label: str) -> bool:
    """Whether the process a label names may still be running: False only when it is
    certainly gone (see the module docstring). A malformed label counts as alive."""
    parts = label.split("/")
    pid = label_pid(label)
    if pid is None:
        return True
    started = parts[-1]
    if len(parts) == 3:  # the older BOOT_ID/PID/START_TIME
        return parts[0] == boot_id() and start_time(pid) == started
    machine, boot, namespace = parts[:3]
    if UNKNOWN in (machine, machine_id()) or machine != machine_id():
        return True  # another machine (or cannot tell): its processes are not ours to see
    if boot != boot_id():
        return boot == UNKNOWN or boot_id() == UNKNOWN  # rebooted since: dead
    if UNKNOWN in (namespace, pid_namespace()) or namespace != pid_namespace():
        return True  # another pid namespace: that pid is not ours to see
    return start_time(pid) == started


def running_here(label: str) -> bool:
    """Whether `label` names a process that runs now (a zombie does not) and that this
    process can signal by its pid: the same machine, boot and pid namespace, and that pid
    with that start time. The positive check to make before sending a signal (`owner_alive`
    errs the other way)."""
    parts = label.split("/")
    pid = label_pid(label)
    if pid is None or pid <= 0:
        return False
    if len(parts) == 3:
        here = parts[0] == boot_id() != UNKNOWN
    else:
        here = parts[:3] == [machine_id(), boot_id(), pid_namespace()] and UNKNOWN not in parts
    if not here or start_time(pid) != parts[-1]:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def labels_for(env: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels a provider puts on what it creates for `env`: `extra` (the spec's labels),
    then ecotone's own, which `extra` cannot override."""
    return {**(extra or {}), LABEL_MANAGED: "true", LABEL_OWNER: owner_label(), LABEL_ENV: env}
