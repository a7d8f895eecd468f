"""`ecotone keygen FILE`: a new snapshot key (32 random bytes, as hex, mode 600) for servers
that restore each other's snapshots and checkpoints (`serve --snapshot-key-file FILE`)."""

from __future__ import annotations

import argparse
import os
import sys

from ecotone.kernel.sealing import Seal


def keygen_arguments(p: argparse.ArgumentParser) -> None:
    """`keygen`'s one argument."""
    p.add_argument("file", help="where to write the key (an existing file is never overwritten)")


def run_keygen(args: argparse.Namespace) -> int:
    """Write the key; 1 when FILE exists already (it is kept as it is)."""
    if os.path.lexists(args.file):
        print(f"ecotone: error: {args.file} exists: it is kept as it is", file=sys.stderr)
        return 1
    try:
        Seal.write_key(args.file)
    except OSError as exc:
        print(f"ecotone: error: cannot write {args.file}: {exc.strerror}", file=sys.stderr)
        return 1
    print(
        f"wrote a snapshot key to {args.file} (mode 600): give it to every server that "
        "restores the others' snapshots (--snapshot-key-file)",
        file=sys.stderr,
    )
    return 0
