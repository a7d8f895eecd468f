"""The docs run as written: every code block of README.md and docs/*.md is run, in order, by
the harness in tests/docs_harness.py (Sybil, markdown-it-py), or says on its first line that
it cannot run here (a GPU, the Hub, a Kubernetes cluster). The count of what ran and what is
marked is printed at the end of the run (`pytest_terminal_summary` in conftest.py)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sybil import Example

from tests.docs_harness import DOCS, LANGUAGES, ROOT, Block, example_id, examples, marked, runs

EXAMPLES = examples()
TALLY: collections.Counter[str] = collections.Counter()
"""What the blocks were: `ran`, `marked: needs ...`, `skipped` (read by conftest.py)."""


@pytest.fixture(scope="module")
def run_block(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Example], str]]:
    with runs(lambda doc: tmp_path_factory.mktemp(Path(doc).stem)) as run:
        yield run


@pytest.mark.parametrize("example", EXAMPLES, ids=[example_id(e) for e in EXAMPLES])
def test_code_block(example: Example, run_block: Callable[[Example], str]) -> None:
    try:
        outcome = run_block(example)
    except pytest.skip.Exception:
        TALLY["skipped"] += 1
        raise
    TALLY[outcome] += 1
    if outcome.startswith("marked"):
        pytest.skip(f"{example_id(example)}: not run here, it {outcome.removeprefix('marked: ')}")


def test_every_code_block_is_fenced_with_a_language_and_marks_are_few() -> None:
    """What the harness must be able to run: every block says its language; the few marked
    not runnable are marked for what cannot be here."""
    assert len(EXAMPLES) >= 40, "fewer code blocks than the docs hold: is the lexer blind?"
    seen = {Path(e.path) for e in EXAMPLES}
    assert seen <= set(DOCS) and Path(ROOT / "README.md") in seen
    bad = [
        example_id(e) for e in EXAMPLES if e.parsed.indented or e.parsed.language not in LANGUAGES
    ]
    assert not bad, f"blocks the harness cannot run (indented, or no known language): {bad}"
    marks = [example_id(e) for e in EXAMPLES if marked(e.parsed)]
    assert len(marks) <= 3, marks


def test_the_readme_env_makes_a_new_episode_id_and_passes_validate() -> None:
    """README's example env (`Walk`) passes the conformance suite: in particular, it makes a
    new episode id when the caller gives none (issue 40: it set None)."""
    from ecotone.conformance import run

    walk = next(e for e in EXAMPLES if "class Walk(" in e.parsed.source)
    block: Block = walk.parsed
    namespace: dict[str, object] = {}
    exec(compile(block.source, "README.md", "exec"), namespace)
    walk_cls = namespace["Walk"]
    env = walk_cls()  # type: ignore[operator]
    ids = set()
    for _ in range(3):
        env.reset()
        ids.add(env.state().episode_id)
    assert None not in ids and len(ids) == 3, ids
    env.reset(episode_id="mine")
    assert env.state().episode_id == "mine"
    report = run(walk_cls)  # type: ignore[arg-type]
    assert report.ok, report.text()
