"""A transport from a distribution outside ecotone (tests/transport_dist: WebSocket over a
unix socket), registered by its entry point as any third party's: `ecotone serve --transport
ws-unix` serves with its server end, `ecotone.connect("ws+unix://...")` and `aconnect` reach
it through its client end, and the conformance suite passes through it."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ecotone.kernel import Registry
from tests.conftest import ecotone_serving

TRANSPORT_DIST = Path(__file__).resolve().parent / "transport_dist"

CLIENT = textwrap.dedent(
    """
    import sys

    import trio

    import ecotone
    from ecotone.conformance import Status, run

    url = sys.argv[1]
    with ecotone.connect(url) as env:
        env.reset()
        print("sync", env.step({"delta": 2}).observation["count"])

    async def main() -> None:
        async with await ecotone.aconnect(url, codec="msgpack") as env:
            await env.reset()
            print("async", (await env.step({"delta": 3})).observation["count"])

    trio.run(main)
    report = run(url=url)
    print("conformance", report.ok, report.count(Status.PASS), report.count(Status.FAIL))
    print(report.text(), file=sys.stderr)
    """
)


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_a_third_party_transport_serves_and_is_reached_by_its_url_scheme(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(TRANSPORT_DIST, source, ignore=shutil.ignore_patterns("__pycache__", "build"))
    wheels = tmp_path / "wheels"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, source)
    (wheel,) = wheels.glob("ecotone_wsunix-*.whl")
    sock = tmp_path / "counter.sock"
    try:
        _run(*pip, "install", "--no-deps", "--no-index", "--force-reinstall", "-q", wheel)
        listed = _run(sys.executable, "-m", "ecotone", "list", cwd=tmp_path).stdout
        assert re.search(r"^  ws-unix\s+from ecotone-wsunix\s", listed, re.M), listed
        with ecotone_serving("counter", "--transport", "ws-unix", "--host", sock) as server:
            assert server.stderr is not None
            line = server.stderr.readline()
            assert f"over ws-unix at ws+unix://{sock}" in line, line
            played = _run(sys.executable, "-c", CLIENT, f"ws+unix://{sock}", cwd=tmp_path)
        lines = played.stdout.split("\n")
        assert lines[:2] == ["sync 2", "async 3"], played.stdout
        ok, passed, failed = lines[2].split()[1:]
        assert (ok, failed) == ("True", "0") and int(passed) > 10, played.stderr
    finally:
        subprocess.run(
            [*pip, "uninstall", "-y", "-q", "ecotone-wsunix"], capture_output=True, timeout=120
        )
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("ecotone-wsunix")
    assert "ws-unix" not in Registry.discover().transports()
    assert "ws+unix" not in Registry.discover().channels()
