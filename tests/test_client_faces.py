"""The blocking and async clients are one implementation with two faces: the blocking one is
generated from the async source (scripts/unasync.py; `make test` runs `--check`). These tests
pin what generation cannot: the hand-written parts (`connect` / `aconnect`, the public
modules) and the naming rule (async resources close with `aclose()` and `async with`,
blocking ones with `close()` and `with`)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ecotone

REPO = Path(__file__).resolve().parent.parent
SYNC_NAME = {"aclose": "close", "aopen": "open", "__aenter__": "__enter__", "__aexit__": "__exit__"}
PAIRS = [
    (ecotone.Connection, ecotone.AsyncConnection),
    (ecotone.EnvClient, ecotone.AsyncEnvClient),
    (ecotone.VectorEnv, ecotone.AsyncVectorEnv),
]


def _unasync() -> ModuleType:
    """scripts/unasync.py, as a module."""
    spec = importlib.util.spec_from_file_location("unasync", REPO / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNASYNC = _unasync()
SOURCES: list[tuple[str, str]] = UNASYNC.sources()


def public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") or name in ("__init__", "__enter__", "__aenter__")
    }


def test_the_generated_blocking_face_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "unasync.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("blocking", "asynchronous"), PAIRS, ids=lambda c: c.__name__)
def test_both_faces_have_the_same_methods_and_signatures(
    blocking: type, asynchronous: type
) -> None:
    sync_members = public(blocking)
    async_members = public(asynchronous)
    expected = {SYNC_NAME.get(name, name) for name in async_members}
    assert set(sync_members) == expected
    for name, member in async_members.items():
        twin = sync_members[SYNC_NAME.get(name, name)]
        if not callable(member) or isinstance(member, type):
            continue
        assert not inspect.iscoroutinefunction(twin), name  # the blocking face never awaits
        assert inspect.signature(twin).parameters.keys() == (
            inspect.signature(member).parameters.keys()
        ), name


def test_async_resources_close_with_aclose_and_blocking_ones_with_close() -> None:
    for blocking, asynchronous in PAIRS:
        assert hasattr(blocking, "close") and not hasattr(blocking, "aclose"), blocking
        assert hasattr(asynchronous, "aclose") and not hasattr(asynchronous, "close"), asynchronous
        assert inspect.iscoroutinefunction(asynchronous.aclose)


def test_connect_and_aconnect_take_the_same_arguments() -> None:
    assert inspect.signature(ecotone.connect).parameters.keys() == (
        inspect.signature(ecotone.aconnect).parameters.keys()
    )
    for name, parameter in inspect.signature(ecotone.connect).parameters.items():
        assert inspect.signature(ecotone.aconnect).parameters[name].default == parameter.default


def test_connect_and_aconnect_refuse_an_option_they_do_not_take_at_once() -> None:
    with pytest.raises(TypeError, match="connect\\(\\) got an unexpected keyword argument 'bogus'"):
        ecotone.connect("ws://127.0.0.1:1", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="aconnect\\(\\) got an unexpected keyword argument 'tls'"):
        ecotone.aconnect("ws://127.0.0.1:1", tls=True)  # type: ignore[call-arg]


def test_a_rule_that_changes_nothing_fails_the_check() -> None:
    rules = [*UNASYNC.RULES, (r"\bAsyncIterator\b", "Iterator")]
    found = UNASYNC.run(write=False, rules=rules)
    assert found == ["the rule '\\\\bAsyncIterator\\\\b' -> 'Iterator' changed nothing: remove it"]


def test_the_check_names_what_generation_left_behind() -> None:
    text = "import anyio\n\n\nasync def f(x: AsyncThing) -> None:\n    print(\n        x\n    )\n"
    found = UNASYNC.problems("src.py", "ecotone/client/_sync/generated.py", text)
    assert found[0].startswith("ecotone/client/_sync/generated.py: ruff would reformat it")
    assert "-    print(\n-        x\n-    )\n+    print(x)" in found[0]
    assert found[1:] == [
        "ecotone/client/_sync/generated.py:1: imports an event loop's library",
        "ecotone/client/_sync/generated.py:4: still async (no rule turns this construct)",
        "ecotone/client/_sync/generated.py:4: `AsyncThing` has no rule",
    ]


@pytest.mark.parametrize(("source", "target"), SOURCES, ids=[s for s, _ in SOURCES])
def test_each_blocking_face_is_its_source_line_for_line(source: str, target: str) -> None:
    """Line N of the generated file is line N of its source with the rules applied (line 1,
    the mark, is the notice; a source without the mark yet has the notice above it)."""
    have = (REPO / source).read_text().splitlines()
    want = (REPO / target).read_text().splitlines()
    if have[0].startswith(UNASYNC.MARK):
        have = have[1:]
    assert want[0].startswith("# Generated from ")
    assert len(want) == len(have) + 1
    rules = [(UNASYNC.re.compile(pattern), new) for pattern, new in UNASYNC.RULES]
    for number, (line, generated) in enumerate(zip(have, want[1:], strict=True), start=2):
        for pattern, new in rules:
            line = pattern.sub(new, line)
        assert line == generated, (target, number)


def test_the_blocking_face_uses_no_event_loop() -> None:
    generated = [REPO / target for _, target in SOURCES]
    for path in {*generated, *(REPO / "ecotone" / "client" / "_sync").glob("*.py")}:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            assert not isinstance(node, ast.AsyncFunctionDef | ast.Await | ast.AsyncWith), path
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] in ("anyio", "trio", "asyncio") for n in names)


def test_the_async_source_uses_only_what_the_generator_knows_how_to_turn() -> None:
    """The generator's rules are textual: a construct it has no rule for would come out of
    it as broken blocking code. Only io.py and net.py (written by hand for each face) may use
    them, and they are no source."""
    unknown = {"__aiter__", "__anext__", "StopAsyncIteration", "AsyncGenerator", "anyio"}
    assert {"ecotone/client/_async/connection.py", "ecotone/client/_async/vector.py"} <= {
        source for source, _ in SOURCES
    }
    for source, _ in SOURCES:
        used: set[str] = set()
        for node in ast.walk(ast.parse((REPO / source).read_text())):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                used.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                used.update(a.name.split(".")[0] for a in node.names)
                used.add((getattr(node, "module", None) or "").split(".")[0])
        assert not used & unknown, (source, used & unknown)
