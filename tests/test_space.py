"""`ecotone export space`: a Hugging Face Space folder (Docker SDK). Its front matter and
Dockerfile are checked as a Space reads them, and `podman build` builds the folder here (no
network, as on a Space) and runs it as Spaces do (uid 1000, port 7860): an episode plays over
WebSocket with the Space secret's token, and the page is the web UI. Nothing is uploaded."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import attrs
import pytest

import ecotone
from ecotone.kernel.registry import Registry
from ecotone.launcher.space import (
    SPACE_PORT,
    SpaceOptions,
    SpaceSettings,
    dockerfile,
    export_space,
    readme,
)
from tests.engines import BASE_IMAGE, podman_engine, require_base_image  # noqa: F401
from tests.test_k8s import free_port, podman


def front_matter(text: str) -> dict[str, object]:
    head, sep, _ = text.removeprefix("---\n").partition("\n---\n")
    assert text.startswith("---\n") and sep, "no front matter"
    out: dict[str, object] = {}
    for line in head.splitlines():
        key, _, value = line.partition(": ")
        out[key] = json.loads(value)  # each value is written as JSON, which YAML reads too
    return out


def test_the_readme_is_a_docker_space_on_port_7860() -> None:
    meta = front_matter(readme("wordle", "Guess the five-letter word."))
    assert meta["sdk"] == "docker" and meta["app_port"] == SPACE_PORT == 7860
    assert meta["title"] == "ecotone wordle" and "ecotone" in meta["tags"]  # type: ignore[operator]
    text = dockerfile("wordle", "python:3.11-slim")
    assert text.startswith("FROM python:3.11-slim\n") and "RUN" not in text
    assert "USER 1000" in text and f"EXPOSE {SPACE_PORT}" in text
    assert '"--web"' in text and '"0.0.0.0"' in text


def test_export_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "export", "space", "counter", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "is not empty" in done.stderr


def test_export_spaces_options_are_checked_before_any_work(tmp_path: Path) -> None:
    keys = SpaceOptions.__required_keys__ | SpaceOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(SpaceSettings)}
    with pytest.raises(
        TypeError, match=r"^export_space\(\) got unexpected keyword argument 'python';"
    ):
        export_space("counter", tmp_path / "a", python="3.12")  # type: ignore[call-arg]
    # `registry` is where the env is looked up, before anything is installed or written.
    with pytest.raises(ValueError, match=r"no environment named 'counter' \(installed: none\)"):
        export_space("counter", tmp_path / "b", registry=Registry())
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_space_builds_without_network_and_serves_an_episode_and_its_web_ui(
    podman_engine: str,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    require_base_image("podman")
    folder = tmp_path / "space"
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "export", "space", "counter", str(folder),
         "--base", BASE_IMAGE],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [
        ".gitattributes",
        "Dockerfile",
        "README.md",
        "site",
    ]
    assert (folder / "site" / "ecotone" / "__init__.py").exists()
    tag = f"localhost/ecotone-space-test:{secrets.token_hex(4)}"
    name = f"ecotone-space-test-{secrets.token_hex(4)}"
    podman("build", "--network", "none", "-t", tag, str(folder))
    token = secrets.token_urlsafe(16)
    port = free_port()
    try:
        podman(
            "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:{SPACE_PORT}",
            "-e", f"ECOTONE_AUTH_TOKEN={token}", tag,
        )  # fmt: skip
        inspected = json.loads(podman("inspect", name))[0]
        assert inspected["Config"]["User"] == "1000"
        deadline = time.monotonic() + 60
        while True:
            try:
                with ecotone.connect(f"ws://127.0.0.1:{port}", token=token, timeout=10) as env:
                    env.reset(seed=0)
                    assert env.step({"delta": 2}).observation["count"] == 2
                break
            except (OSError, ecotone.EcotoneError):
                if time.monotonic() > deadline:
                    raise AssertionError(podman("logs", name, check=False)) from None
                time.sleep(0.5)
        # As a browser opens the Space: `/?token=` sets the cookie, then the redirect to /web.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with browser.open(f"http://127.0.0.1:{port}/?token={token}", timeout=10) as reply:
            page = reply.read().decode()
        assert reply.status == 200 and "<html" in page.lower()
        with pytest.raises(ecotone.EcotoneError):  # and without the token, nothing
            ecotone.connect(f"ws://127.0.0.1:{port}", timeout=10).reset()
    finally:
        podman("rm", "-f", name, check=False)
        podman("rmi", "-f", tag, check=False)
