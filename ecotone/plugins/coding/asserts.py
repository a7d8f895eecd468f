"""Custom tests' `assert CALL == LITERAL` statements, turned into cases the server compares.

An assert `assert add(1, 2) == 3` (or `assert 3 == add(1, 2)`), whose literal is JSON data
(None, booleans, numbers, strings, and lists, tuples and string-keyed dicts of them), becomes
a case: in the test code sent to the sandbox it is replaced, where it stood, by
`__ecotone_case__(i, lambda: (add(1, 2)))`, which reports the call's value as JSON; the
literal stays on the server, which compares. Line numbers are kept, so the remaining code's
errors still name the author's lines.

Where that is sound, and only there:

* at the top level of the module (run once, in order);
* in the body of a top-level `test*` function that the harness alone calls, once: no
  parameters, no decorators, not a generator, its name bound once and used nowhere else in the
  tests; directly in its body (not under an `if`, a loop, a `with` or a `try`, where it might
  run twice or not at all), and before any statement that may `return`. Its local setup runs
  as written; the call sees the function's locals (a closure).

And only when the CALL itself compares nothing (no `==`, `<`, `in`, `is`... inside it: such a
comparison would run in the sandbox, where an always-equal value wins it, and the server
would only see its verdict), binds no name (`:=`, which would bind in the lambda instead) and
does not `yield` or `await`. Every other assert runs in the sandbox as written, and its test
is weak.

A test function whose body is only setup (imports, definitions, assignments) and converted
asserts is no test of its own: its cases are its checks. Any other keeps its weak test.
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
_IN_SANDBOX: Final = (ast.Compare, ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)
"""What a converted call may not contain (see the module docstring)."""
_SCOPES: Final = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@attrs.frozen
class SplitTests:
    """Test code with its plain asserts taken out as cases."""

    code: str
    """The code for the sandbox: each converted assert replaced by a call of `CASE_HOOK`."""
    cases: tuple[tuple[str, str, Any], ...]
    """`(name, expression, expected JSON value)` for each converted assert, in source order:
    named by its expression, prefixed with its function's name inside one."""
    names: tuple[str, ...]
    """The top-level `test*` functions that remain tests of their own (weak)."""
    calls: tuple[str, ...]
    """Every top-level `test*` function, in order: the harness calls each once."""
    within: tuple[tuple[str, int, int], ...]
    """`(function, first, stop)`: the case numbers `[first, stop)` inside each function."""
    whole: bool
    """No `test*` functions, and something besides the cases to check: the module run is one
    (weak) test."""


def compares(expr: ast.AST) -> bool:
    """Whether evaluating `expr` compares (or binds, or suspends) in the sandbox."""
    return any(isinstance(node, _IN_SANDBOX) for node in ast.walk(expr))


def split_asserts(tests: str, *, first: int = 0) -> SplitTests:
    """`tests` with its sound `assert CALL == LITERAL` statements turned into cases numbered
    from `first` (ValueError: not valid Python, or an async test function)."""
    try:
        tree = ast.parse(tests, TESTS_FILE)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"`tests` is not valid Python: {exc}") from None
    calls: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name.startswith("test"):
            raise ValueError(f"test {node.name!r} is async; tests must be plain functions")
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            if node.name not in calls:
                calls.append(node.name)
    lines = tests.splitlines(keepends=True)
    split = _Splitter(first, lines)
    checks_more = False
    for node in tree.body:
        if split.convert(node):
            continue
        checks_more = checks_more or not _is_setup(node)
    names: list[str] = []
    within: list[tuple[str, int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in calls:
            start = first + len(split.cases)
            pure = _sole_call(tree, node) and split.convert_body(node)
            if len(split.cases) > start - first:
                within.append((node.name, start, first + len(split.cases)))
            if not pure and node.name not in names:
                names.append(node.name)
    code = _apply(lines, split.edits)
    whole = not calls and (checks_more or not split.cases)
    return SplitTests(
        code=code,
        cases=tuple(split.cases),
        names=tuple(n for n in calls if n in names),
        calls=tuple(calls),
        within=tuple(within),
        whole=whole,
    )


@attrs.define
class _Splitter:
    """The cases found so far, and the edits that put the hook in their place."""

    first: int
    lines: list[str]
    cases: list[tuple[str, str, Any]] = attrs.field(factory=list)
    edits: list[tuple[ast.stmt, str]] = attrs.field(factory=list)

    def convert(self, node: ast.stmt, where: str = "") -> bool:
        """Turn `node` into a case if it is a sound `assert CALL == LITERAL`."""
        found = _as_case(node)
        if found is None:
            return False
        call, expected = found
        number = self.first + len(self.cases)
        self.edits.append((node, f"{CASE_HOOK}({number}, lambda: ({_segment(self.lines, call)}"))
        expr = ast.unparse(call)
        self.cases.append((f"{where}: {expr}" if where else expr, expr, expected))
        return True

    def convert_body(self, function: ast.FunctionDef) -> bool:
        """Convert the asserts of a test function's body up to its first statement that may
        return; True if it then holds nothing but setup and converted asserts (and at least
        one of them)."""
        only_setup, converted = True, 0
        for statement in function.body:
            if _returns(statement):
                return False
            if self.convert(statement, function.name):
                converted += 1
            elif not _is_setup(statement):
                only_setup = False
        return only_setup and converted > 0


def _as_case(node: ast.stmt) -> tuple[ast.Call, Any] | None:
    """`(call, expected)` for `assert CALL == LITERAL` with JSON data, else None."""
    if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
        return None
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return None
    left, right = test.left, test.comparators[0]
    for call, literal in ((left, right), (right, left)):
        if not isinstance(call, ast.Call) or compares(call):
            continue
        try:
            value = ast.literal_eval(literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if _plain(value):
            return call, json.loads(json.dumps(value))
    return None


def _sole_call(tree: ast.Module, function: ast.FunctionDef) -> bool:
    """Whether only the harness calls `function`, once: no parameters, decorators or
    `yield`, and its name bound once and not used anywhere else in the tests."""
    args = function.args
    if function.decorator_list or args.posonlyargs or args.args or args.kwonlyargs:
        return False
    if args.vararg is not None or args.kwarg is not None or _yields(function):
        return False
    bound = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound += node.name == function.name
        elif isinstance(node, ast.Name) and node.id == function.name:
            return False  # read, assigned or deleted somewhere
        elif isinstance(node, ast.alias) and (node.asname or node.name) == function.name:
            return False
        elif isinstance(node, ast.Global | ast.Nonlocal) and function.name in node.names:
            return False
    return bound == 1


def _inside(node: ast.AST) -> list[ast.AST]:
    """The nodes of `node` outside any nested function, lambda or class."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        out.append(child)
        if not isinstance(child, _SCOPES):
            todo.extend(ast.iter_child_nodes(child))
    return out


def _yields(function: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _inside(function))


def _returns(statement: ast.stmt) -> bool:
    """Whether `statement` may end its function early (a `return` not in a nested scope)."""
    if isinstance(statement, ast.Return):
        return True
    if isinstance(statement, _SCOPES):
        return False
    return any(isinstance(n, ast.Return) for n in _inside(statement))


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
    return isinstance(node, _SETUP) or isinstance(node, ast.Pass)


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
    for node, head in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        end_line, end_offset = _end(node)
        first, col = _offset(out, node.lineno, node.col_offset)
        last, end_col = _offset(out, end_line, end_offset)
        breaks = end_line - node.lineno - head.count("\n")
        text = head + "\n" * max(breaks, 0) + "))"
        out[first : last + 1] = [out[first][:col] + text + out[last][end_col:]]
    return "".join(out)
