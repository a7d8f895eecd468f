"""Generate the blocking face of the client from its async source, line for line.

    python scripts/unasync.py          # write every blocking face from its async source
    python scripts/unasync.py --check  # exit 1 if one is stale or unformatted, or a rule unused

A source is a module of `ecotone/` whose first line is `# unasync: the source of TARGET`: the
client's connection and vector env and the channels the transports share in
`ecotone/client/_async/`, a transport's own channels in `ecotone/transports/*/client/_async.py`.
Each rule is a regular expression and its replacement, applied to one line at a time, so no
rule can join or split lines: line N of a generated file is line N of its source made blocking
(line 1, the mark, becomes the notice that the file is generated). `async def` and `async with`
lose `async`, `await` goes, and the async face's names become the blocking face's. What the
faces do differently is written by hand, once per face: `ecotone/client/_async/{io,net}.py` and
their `_sync` twins.

Nothing is reformatted after generation; the check fails instead when ruff would reformat a
generated file (a line the rules shortened may then fit where the source's did not: a magic
trailing comma in the source keeps its line breaks in both faces), when a generated file still
has `async`, `await`, an `Async...` name with no rule or an event loop's import, when it is not
what its source gives, and when a rule changed nothing in any source.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "# unasync: the source of "
UNMARKED: dict[str, str] = {}
"""Sources without the mark (each must leave this table once it carries one: the check says
so); a generated file's first line is then a notice, one line above its source's."""
RULES: list[tuple[str, str]] = [
    (r"\._async\b", "._sync"),  # ecotone.client._async.io, ...http.client._async
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),  # not `await\s+`, which could take a line's end with it
    (r"\bAsyncConnection\b", "Connection"),
    (r"\bAsyncExchange\b", "Exchange"),
    (r"\bAsyncEnvClient\b", "EnvClient"),
    (r"\becotone\.aconnect\b", "ecotone.connect"),  # docstrings' examples: the public faces
    (r"\bAsyncVectorEnv\b", "VectorEnv"),
    (r"\bAsyncWsChannel\b", "WsChannel"),
    (r"\bAsyncFramedChannel\b", "FramedChannel"),
    (r"\bAsyncHttpChannel\b", "HttpChannel"),
    (r"\bAsyncOpenEnvChannel\b", "OpenEnvChannel"),
    (r"\bAsyncSession\b", "Session"),
    (r"\bAsyncSeat\b", "Seat"),
    (r"\bAsyncStream\b", "Stream"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\baopen\b", "open"),
]
"""Every name has a rule of its own (no catch-all `Async(\\w+)`), so each rule's use is counted
and an `Async...` name left without one is caught in the output."""
Rules = list[tuple[re.Pattern[str], str]]
ASYNC_NAME = re.compile(r"Async[A-Z]\w*")
LOOPS = ("anyio", "trio", "asyncio", "sniffio")


def sources() -> list[tuple[str, str]]:
    """(source, target) for every source, in path order, as paths from the repository's root."""
    found = dict(UNMARKED)
    for path in sorted((ROOT / "ecotone").rglob("*.py")):
        with path.open() as file:
            first = file.readline()
        if first.startswith(MARK):
            found[str(path.relative_to(ROOT))] = first[len(MARK) :].strip()
    return sorted(found.items())


def generate(source: str, text: str, rules: Rules, used: list[int]) -> str:
    """`text` made blocking by `rules`, line by line; `used[i]` counts rule i's substitutions."""
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith(MARK):
        lines = lines[1:]
    out = [f"# Generated from {source} by scripts/unasync.py: do not edit.\n"]
    for line in lines:
        for index, (pattern, replacement) in enumerate(rules):
            line, count = pattern.subn(replacement, line)
            used[index] += count
        out.append(line)
    return "".join(out)


def problems(source: str, target: str, text: str) -> list[str]:
    """Why `text`, generated for `target`, would not do as it is."""
    found = []
    if source in UNMARKED and (ROOT / source).read_text().startswith(MARK):
        found.append(f"{source} carries the mark now: remove it from UNMARKED in {__file__}")
    ruff = str(Path(sys.executable).parent / "ruff")
    where = ["--stdin-filename", str(ROOT / target), "-"]
    done = subprocess.run(
        [ruff, "format", *where], input=text, capture_output=True, text=True, cwd=ROOT, check=True
    )
    if done.stdout != text:
        diff = difflib.unified_diff(
            text.splitlines(True), done.stdout.splitlines(True), target, "ruff format", n=0
        )
        found.append(
            f"{target}: ruff would reformat it (a magic trailing comma in {source} keeps the "
            "line breaks):\n" + "".join(diff)
        )
    for node in ast.walk(ast.parse(text)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.AsyncWith | ast.AsyncFor):
            found.append(f"{target}:{line}: still async (no rule turns this construct)")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(name.split(".")[0] in LOOPS for name in names):
                found.append(f"{target}:{line}: imports an event loop's library")
        elif isinstance(node, ast.Name | ast.Attribute | ast.ClassDef | ast.FunctionDef):
            if isinstance(node, ast.Name):
                name = node.id
            else:
                name = node.attr if isinstance(node, ast.Attribute) else node.name
            if ASYNC_NAME.fullmatch(name) or name in ("aclose", "aopen"):
                found.append(f"{target}:{line}: `{name}` has no rule")
    return found


def run(*, write: bool, rules: list[tuple[str, str]] = RULES) -> list[str]:
    """Generate every blocking face (writing the stale ones when `write`); what is wrong."""
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]
    used = [0] * len(rules)
    found: list[str] = []
    for source, target in sources():
        want = generate(source, (ROOT / source).read_text(), compiled, used)
        found += problems(source, target, want)
        path = ROOT / target
        have = path.read_text() if path.exists() else ""
        if have == want:
            continue
        if write:
            path.write_text(want)
            print(f"wrote {target}")
            continue
        diff = difflib.unified_diff(have.splitlines(True), want.splitlines(True), target, "new")
        found.append(
            "".join(list(diff)[:60])
            + f"{target}: stale: run `python scripts/unasync.py` (edit {source})"
        )
    found += [
        f"the rule {pattern!r} -> {replacement!r} changed nothing: remove it"
        for (pattern, replacement), count in zip(rules, used, strict=True)
        if not count
    ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    found = run(write=not args.check)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
