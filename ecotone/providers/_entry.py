"""The container providers' entry point: load secrets into the environment, then exec
`python -m ecotone ARGS`.

    python3 -m ecotone.providers._entry /run/secrets -- serve ENV --transport websocket ...

Each regular file in the folder becomes one environment variable: its name is the file's
name, its value the file's content (bytes as written, decoded as UTF-8). So a secret travels
from the orchestrator to the server through a read-only bind mount, and never through the
engine's container configuration (`inspect`) or a command line.

This module is a program, not a library: nothing imports it, and it imports nothing of
ecotone. It replaces itself with `ecotone`'s CLI through `exec`, so the server process holds
the secrets in its own environment from its first instruction (and `/proc/PID/environ` shows
what the server really got), and no second interpreter stays behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

USAGE = "usage: python -m ecotone.providers._entry SECRETS_DIR -- ECOTONE_ARGS..."


def load_secrets(folder: str) -> dict[str, str]:
    """Name -> value for each regular file in `folder` (names starting with '.' skipped)."""
    values: dict[str, str] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            values[name] = f.read().decode("utf-8")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    folder, rest = args[0], args[2:]
    try:
        secrets = load_secrets(folder)
    except OSError as exc:
        print(f"ecotone: error: cannot read secrets from {folder}: {exc}", file=sys.stderr)
        return 2
    os.environ.update(secrets)
    command = [sys.executable, "-m", "ecotone", *rest]
    os.execv(command[0], command)  # the environment goes with it (execv passes os.environ)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
