"""The public API's docstrings: their examples run, and they document what the names take.

* Every `Example:` in the modules that define `ecotone.__all__`'s names runs as a doctest
  (`>>>`), or is listed in `NOT_RUN` with the reason: none is skipped silently. The async
  faces' examples (top-level `await`) run under trio, each docstring's in one event loop;
  their generated blocking faces' run as plain doctests, so both faces' stay true. Most run
  in process (`inproc://counter`); the launcher's start real servers (process provider).
* Every public function and class of `ecotone.__all__`, and every public method of such a
  class, has a docstring that names each parameter under `Args:` and, when it returns
  something, says what under `Returns:` (or `Yields:`). Ruff checks the sections it sees
  (pydocstyle, pydoclint), but holds the modules of private packages (`client/_async`...)
  to none of its missing-docstring rules, and asks for no Args section that is absent.
* Those modules are the ones ruff's docstring rules hold for (pyproject.toml).
"""

from __future__ import annotations

import ast
import doctest
import enum
import importlib
import inspect
import re
import tomllib
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import ecotone

ROOT = Path(__file__).resolve().parent.parent

NOT_RUN = {
    "ecotone.kernel.contract.InvalidAction": "a fragment of an env's `step`: it needs the env",
}
"""Docstrings whose `Example:` is not a doctest, and why (each must still have one)."""


def _expand(pattern: str) -> list[str]:
    """A glob's `{a,b}` alternatives spelt out (nested ones too)."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, choices, begin = 0, [], start + 1
    for i in range(start, len(pattern)):
        if pattern[i] == "{":
            depth += 1
        elif pattern[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
        elif pattern[i] == "," and depth == 1:
            choices.append(pattern[begin:i])
            begin = i + 1
    choices.append(pattern[begin:end])
    head, tail = pattern[:start], pattern[end + 1 :]
    return [path for choice in choices for path in _expand(head + choice + tail)]


def _ruled_modules() -> list[str]:
    """The modules ruff's docstring rules hold for: those the negated glob of pyproject.toml's
    per-file-ignores leaves them on for."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    (pattern,) = [key for key, codes in ignores.items() if key.startswith("!") and "D" in codes]
    paths = _expand(pattern[1:])
    assert all((ROOT / path).is_file() for path in paths), paths
    names = [path.removesuffix(".py").replace("/", ".") for path in paths]
    return sorted(name.removesuffix(".__init__") for name in names)


MODULES = _ruled_modules()


def _public_objects() -> Iterator[tuple[str, Any]]:
    for name in ecotone.__all__:
        value = getattr(ecotone, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            yield name, value


def test_the_docstring_rules_hold_where_the_public_names_are_defined() -> None:
    defined = {inspect.getmodule(value).__name__ for _, value in _public_objects()}  # type: ignore[union-attr]
    assert defined - set(MODULES) == set(), "extend the negated glob in pyproject.toml"
    assert "hookimpl" in (ecotone.__doc__ or "")  # pluggy's marker: documented there


# --- the examples -------------------------------------------------------------------------------


def _doctests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=False)
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, globs={**vars(module), "ecotone": ecotone}):
            if test.docstring and "Example:" in test.docstring:
                found.append(test)
    return sorted(found, key=lambda test: test.name)


DOCTESTS = _doctests()


def _needs_await(test: doctest.DocTest) -> bool:
    for example in test.examples:
        try:
            compile(example.source, test.name, "single")
        except SyntaxError:
            return True
    return False


RUN = [test for test in DOCTESTS if test.examples]
BLOCKING = [test for test in RUN if not _needs_await(test)]
AWAITING = [test for test in RUN if _needs_await(test)]


def test_every_example_runs_or_says_why_not() -> None:
    without = {test.name for test in DOCTESTS if not test.examples}
    assert without == set(NOT_RUN), "an Example: without >>> belongs in NOT_RUN, with why"
    assert len(RUN) >= 20, [test.name for test in RUN]  # the finder still finds them
    # both faces of the client: the blocking face's examples are generated from the async's
    names = {test.name for test in RUN}
    for module, name in [
        ("connection", "connect"),
        ("connection", "Connection"),
        ("connection", "EnvClient"),
        ("vector", "VectorEnv"),
    ]:
        assert f"ecotone.client._sync.{module}.{name}" in names
        async_name = name if name == "connect" else "Async" + name
        assert f"ecotone.client._async.{module}.{async_name}" in names


def _run(test: doctest.DocTest, compileflags: int = 0) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, compileflags=compileflags or None, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


@pytest.mark.parametrize("test", BLOCKING, ids=lambda test: test.name)
def test_example(test: doctest.DocTest) -> None:
    _run(test)


def _awaiting_exec(code: types.CodeType, globs: dict[str, Any]) -> None:
    """`exec` for doctest's examples, in a worker thread of a trio run: an example with
    top-level `await` (compiled with PyCF_ALLOW_TOP_LEVEL_AWAIT: a coroutine's code) is
    awaited in the run's event loop, as the asyncio REPL does."""
    if code.co_flags & inspect.CO_COROUTINE:
        coroutine = types.FunctionType(code, globs)()

        async def awaited() -> None:
            await coroutine

        trio.from_thread.run(awaited)
    else:
        exec(code, globs)


@pytest.mark.parametrize("test", AWAITING, ids=lambda test: test.name)
async def test_async_example(test: doctest.DocTest, monkeypatch: pytest.MonkeyPatch) -> None:
    # doctest runs each example with `exec`, looked up in its module first
    monkeypatch.setattr(doctest, "exec", _awaiting_exec, raising=False)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    await trio.to_thread.run_sync(lambda: _run(test, flags))


# --- Args, Returns ------------------------------------------------------------------------------


def _sections(doc: str) -> dict[str, list[str]]:
    """A Google-style docstring's sections: each header's entry names (the first word before
    a colon of each line indented one level under it, `*`s dropped)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        if re.fullmatch(r"[A-Z][a-z]+( [a-z]+)?:", line):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and re.match(r"    \S", line):
            current.append(line.strip().split(":")[0].lstrip("*"))
        elif line and not line.startswith(" "):
            current = None
    return sections


def _parameters(fn: Callable[..., Any], skip_first: bool) -> list[str]:
    names = list(inspect.signature(fn).parameters)
    return names[1:] if skip_first else names


def _check(where: str, fn: Callable[..., Any], doc: str | None, *, method: bool) -> list[str]:
    """What the docstring of `fn` lacks."""
    if not doc:
        return [f"{where}: no docstring"]
    problems = []
    sections = _sections(doc)
    params = _parameters(fn, skip_first=method)
    missing = [name for name in params if name not in sections.get("Args", [])]
    if missing:
        problems.append(f"{where}: Args lacks {missing}")
    returns = inspect.signature(fn).return_annotation
    if returns not in ("None", None, inspect.Signature.empty):
        wanted = "Yields" if re.match(r"(Async)?(Iterator|Generator)\[", returns) else "Returns"
        if wanted not in sections:
            problems.append(f"{where}: no {wanted} section")
    return problems


def _record_like(cls: type) -> bool:
    """Whether `cls`'s constructor takes its own fields (a msgspec Struct, an attrs class, a
    named tuple), or it defines `__init__` itself."""
    return (
        "__init__" in vars(cls)
        or "__struct_fields__" in vars(cls)
        or "__attrs_attrs__" in vars(cls)
        or "_fields" in vars(cls)
    )


def _class_problems(name: str, cls: type) -> list[str]:
    doc = vars(cls).get("__doc__")
    problems = []
    if not doc:
        return [f"{name}: no docstring"]
    if _record_like(cls) and not issubclass(cls, enum.Enum):
        params = list(inspect.signature(cls).parameters)
        documented = _sections(doc).get("Args", [])
        missing = [param for param in params if param not in documented]
        if missing:
            problems.append(f"{name}: Args lacks {missing}")
    for attr, value in vars(cls).items():
        if attr.startswith("_"):
            continue
        where = f"{name}.{attr}"
        if isinstance(value, property):
            if not value.__doc__:
                problems.append(f"{where}: no docstring")
        elif isinstance(value, classmethod | staticmethod):
            fn = value.__func__
            problems += _check(where, fn, fn.__doc__, method=isinstance(value, classmethod))
        elif inspect.isfunction(value):
            problems += _check(where, value, value.__doc__, method=True)
    return problems


def test_public_names_document_their_arguments_and_results() -> None:
    problems = []
    for name, value in _public_objects():
        if inspect.isclass(value):
            problems += _class_problems(name, value)
        else:
            problems += _check(name, value, value.__doc__, method=False)
    assert problems == []
