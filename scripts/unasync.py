"""Generate the blocking face of the client from its async source, as httpcore does.

    python scripts/unasync.py          # write ecotone/client/_sync/{connection,vector}.py
    python scripts/unasync.py --check  # fail (exit 1) if they are not what the source gives

The rules are few and textual, so the generated code reads like the source: `async def`,
`async with` and `async for` lose `async`, `await` goes, and the async face's names become
the blocking face's (`AsyncConnection` -> `Connection`, `aclose` -> `close`, `__aenter__` ->
`__enter__`, `ecotone.client._async` -> `ecotone.client._sync`...). What the two faces do
differently lives in `_async/io.py` and `_sync/io.py`, written by hand. The result is
formatted with ruff (imports sorted), as the rest of the code is. `make test` runs `--check`.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "ecotone" / "client" / "_async"
TARGET = ROOT / "ecotone" / "client" / "_sync"
FILES = ("connection.py", "vector.py")

NAMES = {
    "AsyncConnection": "Connection",
    "AsyncEnvClient": "EnvClient",
    "AsyncVectorEnv": "VectorEnv",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "aopen": "open",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
}
MODULES = {"ecotone.client._async": "ecotone.client._sync"}
KEYWORDS = [
    (re.compile(r"\basync (def|with|for)\b"), r"\1"),
    (re.compile(r"\bawait\s+"), ""),
]


def unasync(text: str, source: str) -> str:
    for old, new in MODULES.items():
        text = text.replace(old, new)
    for pattern, replacement in KEYWORDS:
        text = pattern.sub(replacement, text)
    for old, new in NAMES.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    header = (
        f"# Generated from ecotone/client/_async/{source} by scripts/unasync.py: do not edit.\n"
    )
    return header + text


def formatted(text: str, name: str) -> str:
    """`text` with its imports sorted and formatted by ruff, as the rest of the code is."""
    ruff = str(Path(sys.executable).parent / "ruff")
    where = ["--stdin-filename", str(TARGET / name), "-"]
    for command in (
        [ruff, "check", "--select", "I", "--fix", "--quiet", *where],
        [ruff, "format", *where],
    ):
        done = subprocess.run(
            command, input=text, capture_output=True, text=True, cwd=ROOT, check=True
        )
        text = done.stdout
    return text


def generated(name: str) -> str:
    return formatted(unasync((SOURCE / name).read_text(), name), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name in FILES:
        want = generated(name)
        path = TARGET / name
        have = path.read_text() if path.exists() else ""
        if args.check:
            if have != want:
                stale.append(name)
                diff = difflib.unified_diff(
                    have.splitlines(True), want.splitlines(True), str(path), "generated"
                )
                sys.stdout.writelines(list(diff)[:60])
        elif have != want:
            path.write_text(want)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(
            f"\n{', '.join(stale)}: the blocking face is out of date with its async source; "
            "run `python scripts/unasync.py` (edit ecotone/client/_async/, not _sync/)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
