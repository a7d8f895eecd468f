"""The package's shape, as the design card draws it and docs/architecture.md says: the card's
folders at the top, each transport a plugin with both of its ends, modules short enough to
read in one sitting, each saying what it is, and a module map that names every module."""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

import pytest

import ecotone
from ecotone.kernel import Registry

PACKAGE = Path(ecotone.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 800
SERVER_ONLY = {"mcp"}
"""Transports with no client end here: an MCP server's clients are MCP clients (agents)."""
MOUNTED = {"openenv"}
"""Transports whose server end is a profile others mount, not a listener of its own."""


def _modules() -> list[Path]:
    return sorted(
        path for path in PACKAGE.rglob("*.py") if "templates" not in path.relative_to(PACKAGE).parts
    )


def test_the_top_level_is_the_design_cards() -> None:
    for folder in ("specs", "kernel", "transports", "providers", "plugins"):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder
    assert (PACKAGE.parent / "tests").is_dir() and (PACKAGE.parent / "pyproject.toml").is_file()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_longer_than_a_sitting(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines (> {MAX_LINES})"


def _end(folder: Path, name: str) -> bool:
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def test_every_bundled_transport_is_a_plugin_with_both_ends() -> None:
    registry = Registry.discover()
    servers = {e.plugin for e in registry.transports().values() if e.distribution == "ecotone"}
    clients = {e.plugin for e in registry.channels().values() if e.distribution == "ecotone"}
    folders = {
        path.name for path in (PACKAGE / "transports").iterdir() if (path / "__init__.py").is_file()
    }
    plugins = {
        ep.value.removeprefix("ecotone.transports."): ep.name
        for ep in importlib.metadata.entry_points(group="ecotone")
        if ep.value.startswith("ecotone.transports.")
    }
    assert set(plugins) == folders  # each transport package is one plugin, by entry point
    for folder in folders:
        path = PACKAGE / "transports" / folder
        assert _end(path, "server"), folder
        assert _end(path, "client") or folder in SERVER_ONLY, folder
        assert plugins[folder] in servers or folder in MOUNTED, folder
        assert plugins[folder] in clients or folder in SERVER_ONLY, folder


def test_the_module_map_names_every_module_and_no_other() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Module map") :]
    listed = set(re.findall(r"^- `([^`]+\.py)`", section, re.M))
    actual = {str(path.relative_to(PACKAGE)) for path in _modules()}
    assert sorted(actual - listed) == [], "modules docs/architecture.md's map does not name"
    assert sorted(listed - actual) == [], "modules docs/architecture.md's map names, not here"


def test_every_module_says_what_it_is() -> None:
    missing = [
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if path.read_text().strip() and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert missing == []
