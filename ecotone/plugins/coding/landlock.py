"""Walls for runs outside bubblewrap: the Landlock rules of the rlimits-only sandbox.

Without bubblewrap a run shares the server's file system, process table and network. Where
the kernel offers Landlock (Linux 5.13 on; ABI 4 adds TCP, ABI 6 signals and abstract unix
sockets), the harness restricts itself before any submitted code runs (`harness.confine`):
no capabilities, then files only beneath

* the system directories and the interpreter's installation (read and execute), as under
  bubblewrap, *without* `hidden_paths()`: the server's own package (the shipped tasks and their
  expected values, the reference solutions), wherever it is installed;
* the run's scratch directory (read and write, no device nodes);
* /dev/null, /dev/zero, /dev/full (read and write), /dev/random, /dev/urandom (read);

and no TCP bind or connect, no signals to and no abstract unix sockets of processes outside
the run, no ptrace of them (so neither their memory, environment nor descriptors through
/proc, which is not readable at all). The sandbox probes once whether this works here
(`sandbox.sandbox_for`); its `isolation` then says `landlock`, else `no-landlock`.

Bubblewrap hides the same paths with an empty tmpfs over each (`bwrap_masks`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from ecotone.plugins.coding import harness

READ: Final = harness.FS_EXECUTE | harness.FS_READ_FILE | harness.FS_READ_DIR
DEVICES: Final = {
    "/dev/null": harness.FS_READ_FILE | harness.FS_WRITE_FILE | harness.FS_TRUNCATE,
    "/dev/zero": harness.FS_READ_FILE | harness.FS_WRITE_FILE | harness.FS_TRUNCATE,
    "/dev/full": harness.FS_READ_FILE | harness.FS_WRITE_FILE | harness.FS_TRUNCATE,
    "/dev/random": harness.FS_READ_FILE,
    "/dev/urandom": harness.FS_READ_FILE,
}


def hidden_paths() -> tuple[str, ...]:
    """What no run may read even where it lies beneath a directory runs read: the `ecotone`
    package (its shipped tasks hold the expected values and reference solutions)."""
    return (str(Path(__file__).resolve().parents[2]),)


def readable(roots: Sequence[str], hidden: Sequence[str]) -> list[str]:
    """`roots` (resolved, without repeats) as paths to allow, with each hidden path left out:
    a root with a hidden path beneath it is replaced by its entries, recursively."""
    out: list[str] = []
    for root in roots:
        _allow(os.path.realpath(root), [os.path.realpath(h) for h in hidden], out)
    return list(dict.fromkeys(out))


def _allow(path: str, hidden: list[str], out: list[str]) -> None:
    inside = [h for h in hidden if h == path or h.startswith(path.rstrip("/") + "/")]
    if not inside:
        out.append(path)
        return
    if path in hidden or not os.path.isdir(path):
        return
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        child = os.path.join(path, name)
        target = os.path.realpath(child)
        if any(target == h or target.startswith(h + "/") for h in hidden):
            continue  # a link into a hidden path
        _allow(child if not os.path.islink(child) else target, hidden, out)


def bwrap_masks(roots: Sequence[str]) -> list[str]:
    """bwrap arguments hiding each hidden path that lies beneath one of `roots` (the
    directories it binds): an empty, read-only tmpfs over it."""
    args: list[str] = []
    for path in hidden_paths():
        beneath = any(
            path == os.path.realpath(r) or path.startswith(os.path.realpath(r) + "/") for r in roots
        )
        if beneath and os.path.isdir(path):
            args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
    return args


@attrs.frozen
class Walls:
    """The Landlock rules of every rlimits-only run here (the scratch directory added per run)."""

    abi: int
    read: tuple[str, ...]

    def for_run(self, scratch: str) -> dict[str, Any]:
        """What the harness gets as LIMITS' `walls`."""
        devices = harness.FS_MAKE_CHAR | harness.FS_MAKE_BLOCK
        write = harness.landlock_fs_rights(self.abi) & ~devices
        rules: list[list[Any]] = [[path, READ] for path in self.read]
        rules += [[path, rights] for path, rights in DEVICES.items()]
        rules.append([scratch, write])
        return {"abi": self.abi, "rules": rules}
