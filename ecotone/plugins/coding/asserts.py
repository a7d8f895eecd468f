"""Custom tests' `assert CALL == LITERAL` statements, turned into cases the server compares.

A top-level statement `assert add(1, 2) == 3` (or `assert 3 == add(1, 2)`), whose literal is
JSON data (None, booleans, numbers, strings, and lists, tuples and string-keyed dicts of
them), becomes a case: in the test code sent to the sandbox it is replaced, where it stood,
by `__ecotone_case__(i, lambda: (add(1, 2)))`, which reports the call's value as JSON; the
literal stays on the server, which compares. Line numbers are kept, so the remaining code's
errors still name the author's lines. Any other assert (in a `test*` function, against a
non-literal, with another operator) runs in the sandbox as before, and its result is marked
weak.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any, Final

import attrs

from ecotone.plugins.coding.harness import TESTS_FILE

CASE_HOOK: Final = "__ecotone_case__"
"""The harness's function the rewritten asserts call (harness.py binds it)."""
_SETUP: Final = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


@attrs.frozen
class SplitTests:
    """Test code with its plain asserts taken out as cases."""

    code: str
    """The code for the sandbox: each converted assert replaced by a call of `CASE_HOOK`."""
    cases: tuple[tuple[str, Any], ...]
    """`(expression, expected JSON value)` for each converted assert, in order."""
    names: tuple[str, ...]
    """The top-level `test*` functions."""
    whole: bool
    """No `test*` functions, and something besides the cases to check: the module run is one
    (weak) test."""


def split_asserts(tests: str, *, first: int = 0) -> SplitTests:
    """`tests` with its top-level `assert CALL == LITERAL` statements turned into cases
    numbered from `first` (ValueError: not valid Python, or an async test function)."""
    try:
        tree = ast.parse(tests, TESTS_FILE)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"`tests` is not valid Python: {exc}") from None
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name.startswith("test"):
            raise ValueError(f"test {node.name!r} is async; tests must be plain functions")
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            if node.name not in names:
                names.append(node.name)
    lines = tests.splitlines(keepends=True)
    cases: list[tuple[str, Any]] = []
    edits: list[tuple[ast.stmt, str]] = []
    checks_more = False
    for node in tree.body:
        found = _as_case(node)
        if found is None:
            checks_more = checks_more or not _is_setup(node)
            continue
        call, expected = found
        segment = _segment(lines, call)
        edits.append((node, f"{CASE_HOOK}({first + len(cases)}, lambda: ({segment}"))
        cases.append((ast.unparse(call), expected))
    code = _apply(lines, edits)
    whole = not names and (checks_more or not cases)
    return SplitTests(code=code, cases=tuple(cases), names=tuple(names), whole=whole)


def _as_case(node: ast.stmt) -> tuple[ast.Call, Any] | None:
    """`(call, expected)` for `assert CALL == LITERAL` with JSON data, else None."""
    if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
        return None
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return None
    left, right = test.left, test.comparators[0]
    for call, literal in ((left, right), (right, left)):
        if not isinstance(call, ast.Call):
            continue
        try:
            value = ast.literal_eval(literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if _plain(value):
            return call, json.loads(json.dumps(value))
    return None


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON data whose JSON form compares as the value does (no sets, bytes, NaN, int keys)."""
    if depth > 50:
        return False
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _is_setup(node: ast.stmt) -> bool:
    """Code that only prepares the tests (imports, definitions, assignments, a docstring)."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    return isinstance(node, _SETUP)


def _offset(lines: list[str], line: int, col: int) -> tuple[int, int]:
    """An AST position (1-based line, UTF-8 byte column) as (line index, character column)."""
    text = lines[line - 1]
    return line - 1, len(text.encode()[:col].decode(errors="replace"))


def _end(node: ast.stmt | ast.expr) -> tuple[int, int]:
    """Where `node` ends (parsed nodes always say)."""
    return node.end_lineno or node.lineno, node.end_col_offset or 0


def _segment(lines: list[str], node: ast.expr) -> str:
    """`node`'s source text, as written (its line breaks kept)."""
    start = _offset(lines, node.lineno, node.col_offset)
    stop, stop_col = _offset(lines, _end(node)[0], _end(node)[1])
    if start[0] == stop:
        return lines[stop][start[1] : stop_col]
    middle = "".join(lines[start[0] + 1 : stop])
    return lines[start[0]][start[1] :] + middle + lines[stop][:stop_col]


def _apply(lines: list[str], edits: list[tuple[ast.stmt, str]]) -> str:
    """`lines` with each edited statement replaced by its new text, closed with `))` after
    line breaks inside the parentheses, so that every later line keeps its number."""
    out = list(lines)
    for node, head in reversed(edits):
        end_line, end_offset = _end(node)
        first, col = _offset(out, node.lineno, node.col_offset)
        last, end_col = _offset(out, end_line, end_offset)
        breaks = end_line - node.lineno - head.count("\n")
        text = head + "\n" * max(breaks, 0) + "))"
        out[first : last + 1] = [out[first][:col] + text + out[last][end_col:]]
    return "".join(out)
