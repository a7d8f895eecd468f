"""`ecotone init NAME` writes a distribution that installs, serves, validates and tests green
out of the box. The scaffold is installed into this venv for the test and uninstalled after."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ecotone.scaffold import ScaffoldError, names, scaffold
from tests.engines import require_base_image

NAME = "scaffold-probe"
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")


def run(*args: object, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_names_are_checked_and_spelled_for_each_use() -> None:
    assert names("grid-maze") == {
        "env_name": "grid-maze",
        "dist_name": "ecotone-grid-maze",
        "package": "grid_maze",
        "Camel": "GridMaze",
    }
    for bad in ("Grid", "2fast", "my env", "class", ""):
        with pytest.raises(ScaffoldError):
            names(bad)


def test_init_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "taken.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="not empty"):
        scaffold("maze", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.txt"]


def test_the_scaffold_installs_serves_validates_and_passes_its_own_tests(tmp_path: Path) -> None:
    run(sys.executable, "-m", "ecotone", "init", NAME, "--dir", tmp_path / NAME, cwd=tmp_path)
    project = tmp_path / NAME
    for part in ("pyproject.toml", "README.md", "Containerfile", "tests/test_env.py",
                 "src/scaffold_probe/env.py", "src/scaffold_probe/plugin.py"):  # fmt: skip
        assert (project / part).is_file(), part
    lint = run(sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "E,F,W,I", ".",
               cwd=project)  # fmt: skip
    assert lint.returncode == 0
    try:
        run(*PIP, "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", project,
            cwd=tmp_path)  # fmt: skip
        listed = run(sys.executable, "-m", "ecotone", "list", cwd=tmp_path).stdout
        assert re.search(rf"^  {NAME}\s+from ecotone-{NAME}\s", listed, re.M), listed

        validated = subprocess.run(
            [sys.executable, "-m", "ecotone", "validate", NAME],
            cwd=tmp_path, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert validated.returncode == 0, validated.stdout + validated.stderr
        assert "FAIL" not in validated.stdout

        played = run(sys.executable, "-c", PLAY, cwd=tmp_path).stdout
        hint, done = json.loads(played)
        assert hint == "correct" and done is True

        tested = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
                     cwd=project)  # fmt: skip
        assert re.search(r"\b\d+ passed\b", tested.stdout)
        assert "failed" not in tested.stdout
    finally:
        subprocess.run([*PIP, "uninstall", "-y", "-q", f"ecotone-{NAME}"],
                       capture_output=True, timeout=120)  # fmt: skip


PLAY = f"""
import json, ecotone
from ecotone.serving import BackgroundServer
from ecotone.kernel.config import ServerConfig

with BackgroundServer(ServerConfig(env={NAME!r}, port=0)) as server:
    with ecotone.connect(server.url) as env:
        env.reset(seed=3, low=1, high=6)
        target = env.state()["target"]
        result = env.step({{"guess": target}})
        print(json.dumps([result.observation["hint"], result.done]))
"""


BOXED = "scaffold-boxed"


def test_a_scaffolded_env_builds_into_an_image_and_plays_in_a_container(
    tmp_path: Path, engine: str
) -> None:
    """The path a plugin author takes to containers: `ecotone init`, pip install, `ecotone
    build NAME --engine E`, then `ecotone.launch(NAME, provider=E)`. The image holds the
    plugin's own distribution (repacked from this venv), found by its entry point."""
    import ecotone
    from ecotone.providers.contract import default_image
    from ecotone.providers.engines import client_for

    require_base_image(engine)
    run(sys.executable, "-m", "ecotone", "init", BOXED, "--dir", tmp_path / BOXED, cwd=tmp_path)
    image = default_image(BOXED)
    try:
        run(*PIP, "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
            tmp_path / BOXED, cwd=tmp_path)  # fmt: skip
        built = run(sys.executable, "-m", "ecotone", "build", BOXED, "--engine", engine,
                    cwd=tmp_path)  # fmt: skip
        assert built.stdout.strip() == image
        with ecotone.launch(BOXED, provider=engine, transport="unix", timeout=30) as env:
            env.reset(seed=3, low=1, high=6)
            guess = {"guess": 1}
            result = env.step(guess)
            assert result.observation["hint"] in ("higher", "lower", "correct")
    finally:
        subprocess.run([*PIP, "uninstall", "-y", "-q", f"ecotone-{BOXED}"],
                       capture_output=True, timeout=120)  # fmt: skip
        try:
            client_for(engine).images.remove(image, force=True)
        except Exception:
            pass
