"""A seccomp filter for the coding sandbox: the system calls a code run never needs, refused.

`program()` is a classic BPF program (what `bwrap --seccomp FD` loads, the kernel's `struct
sock_filter` array) for this machine's architecture (x86_64 or aarch64; None elsewhere).
It refuses with EPERM:

* new namespaces: `unshare`, `setns`, and `clone` with any `CLONE_NEW*` flag (`clone3` gets
  ENOSYS, so the C library falls back to `clone`, whose flags the filter can read);
* mounts and the root: `mount`, `umount2`, `pivot_root`, `chroot`, the new mount API
  (`open_tree`, `move_mount`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `mount_setattr`);
* `io_uring_*`, `bpf`, `perf_event_open`, `userfaultfd` (the kernel's most exploited
  surfaces), `ptrace` and `process_vm_readv`/`writev`;
* the kernel keyring (`add_key`, `request_key`, `keyctl`), kernel modules and `kexec`,
  `reboot`, `swapon`/`swapoff`, `acct`, `quotactl`, `syslog`, `vhangup`,
  `name_to_handle_at`/`open_by_handle_at`, `lookup_dcookie`;
* System V IPC and POSIX message queues (`shmget`, `semget`, `msgget`, `mq_open`): their
  objects outlive the processes that made them, in the sandbox's IPC namespace, which a
  zygote's runs share (POSIX semaphores and shared memory live in /dev/shm, emptied after
  each run, and stay allowed);
* on x86_64, every x32-ABI call; a call of another architecture (i386's `int 0x80`) kills the
  process.

Everything else is allowed. The numbers are the kernel's (`asm/unistd_64.h`,
`asm-generic/unistd.h`); `tests/test_env_coding.py` checks them against the headers it finds.
"""

from __future__ import annotations

import errno
import platform
import struct
from typing import Final

# struct seccomp_data: nr (u32) at 0, arch (u32) at 4, instruction pointer at 8, args at 16.
_NR, _ARCH, _ARG0 = 0, 4, 16

_LD_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET: Final = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET: Final = 0x06  # BPF_RET | BPF_K

ALLOW: Final = 0x7FFF0000
ERRNO: Final = 0x00050000
KILL_PROCESS: Final = 0x80000000

X32_BIT: Final = 0x40000000
NAMESPACE_FLAGS: Final = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

DENIED: Final = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd", "ptrace",
    "process_vm_readv", "process_vm_writev", "add_key", "request_key", "keyctl",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup", "name_to_handle_at",
    "open_by_handle_at", "lookup_dcookie", "shmget", "semget", "msgget", "mq_open",
)  # fmt: skip
"""Refused with EPERM (where the architecture has them)."""

# The system call numbers, per architecture (audit arch, table).
TABLES: Final[dict[str, tuple[int, dict[str, int]]]] = {
    "x86_64": (
        0xC000003E,  # AUDIT_ARCH_X86_64
        {
            "clone": 56, "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155,
            "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
            "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176,
            "quotactl": 179, "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248,
            "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
            "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
            "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
            "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
            "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "clone3": 435, "mount_setattr": 442, "shmget": 29, "semget": 64, "msgget": 68,
            "mq_open": 240,
        },
    ),
    "aarch64": (
        0xC00000B7,  # AUDIT_ARCH_AARCH64
        {
            "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51, "vhangup": 58,
            "quotactl": 60, "acct": 89, "unshare": 97, "kexec_load": 104, "init_module": 105,
            "delete_module": 106, "syslog": 116, "ptrace": 117, "reboot": 142, "add_key": 217,
            "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224, "swapoff": 225,
            "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265,
            "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271,
            "finit_module": 273, "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
            "fspick": 433, "clone3": 435, "mount_setattr": 442, "mq_open": 180, "msgget": 186,
            "semget": 190, "shmget": 194,
        },
    ),
}  # fmt: skip


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one), or None for an architecture it does not
    know (then the sandbox runs without one, and says so)."""
    machine = machine or platform.machine()
    table = TABLES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))
    if table is None:
        return None
    arch, numbers = table
    denied = [numbers[name] for name in DENIED if name in numbers]
    # Laid out as: arch check, x32 check, one JEQ per denied call, clone, clone3, allow,
    # then the shared returns. Jump offsets count instructions after the jump itself.
    body: list[tuple[str, int, str | None, str | None]] = []  # (op, k, jt label, jf label)
    body.append(("ld", _ARCH, None, None))
    body.append(("jeq", arch, None, "kill"))
    body.append(("ld", _NR, None, None))
    if machine in ("x86_64", "amd64"):
        body.append(("jge", X32_BIT, "eperm", None))
    for nr in denied:
        body.append(("jeq", nr, "eperm", None))
    body.append(("jeq", numbers["clone3"], "enosys", None))
    body.append(("jeq", numbers["clone"], None, "allow"))
    body.append(("ld", _ARG0, None, None))  # clone's flags (the low 32 bits of args[0])
    body.append(("jset", NAMESPACE_FLAGS, "eperm", None))
    labels = {"allow": len(body)}
    body.append(("ret", ALLOW, None, None))
    labels["eperm"] = len(body)
    body.append(("ret", ERRNO | errno.EPERM, None, None))
    labels["enosys"] = len(body)
    body.append(("ret", ERRNO | errno.ENOSYS, None, None))
    labels["kill"] = len(body)
    body.append(("ret", KILL_PROCESS, None, None))
    codes = {"ld": _LD_ABS, "jeq": _JEQ, "jge": _JGE, "jset": _JSET, "ret": _RET}
    out = bytearray()
    for index, (op, k, jt, jf) in enumerate(body):
        t = labels[jt] - index - 1 if jt else 0
        f = labels[jf] - index - 1 if jf else 0
        if not (0 <= t <= 255 and 0 <= f <= 255):
            raise AssertionError("a seccomp jump out of range")
        out += _insn(codes[op], k, t, f)
    return bytes(out)


__all__ = ["DENIED", "TABLES", "program"]
