"""`ecotone build`: images that serve an env, built without network, on the real engines.

The engine tests take the `engine` fixture of tests/engines.py: each runs on podman and on
docker, skips when an engine is not reachable, and fails instead when ECOTONE_REQUIRE_ENGINES
names it (CI). They need the base image `make base-image` makes.
"""

from __future__ import annotations

import contextlib
import io
import re
import secrets
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

import ecotone
from ecotone import cli
from ecotone.kernel.registry import Registry
from ecotone.launcher import images
from ecotone.launcher.images import (
    DEFAULT_BASE,
    BuildOptions,
    BuildSettings,
    EnvSource,
    build_image,
    containerfile,
    find_env_source,
    local_wheel,
    platform_tags,
)
from ecotone.providers import engines
from ecotone.providers.contract import EngineUnavailable, ImageNotFound, default_image
from tests.engines import BASE_IMAGE, EngineProxy, engine_client, unavailable

TEST_TAG = "localhost/ecotone-test-build-counter:latest"
CLI_TAG = "localhost/ecotone-test-build-cli:latest"


# --- without an engine ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "image"),
    [
        ("counter", "localhost/ecotone-counter:latest"),
        ("gymnasium:CartPole-v1", "localhost/ecotone-gymnasium-cartpole-v1:latest"),
        ("my_env", "localhost/ecotone-my-env:latest"),
        ("gymnasium:FrozenLake-v1?is_slippery=false", None),
    ],
)
def test_default_image_names_are_valid_for_both_engines(env: str, image: str | None) -> None:
    name = default_image(env)
    if image is not None:
        assert name == image
    repository, _, tag = name.rpartition(":")
    assert tag == "latest"
    assert repository.startswith("localhost/ecotone-")
    assert all((c.isalnum() and not c.isupper()) or c in "-/" for c in repository)
    assert "--" not in repository and not repository.endswith("-")
    assert len(default_image("gymnasium:" + "X" * 300)) < 128


def test_the_env_source_is_the_distribution_whose_plugin_provides_the_env() -> None:
    assert find_env_source("counter") == EnvSource("counter", "counter", "ecotone", ())
    # A bundled plugin with dependencies of its own gets ecotone's extra of the same name.
    assert find_env_source("chess").extras == ("chess",)
    gym = find_env_source("gymnasium:CartPole-v1")
    assert (gym.plugin, gym.distribution, gym.extras) == ("gymnasium", "ecotone", ("gymnasium",))


def test_an_unknown_env_is_a_value_error_naming_the_installed_ones() -> None:
    with pytest.raises(
        ValueError, match=r"no environment named 'backgammon' \(installed: .*counter"
    ):
        build_image("backgammon", engine="podman")
    with pytest.raises(ValueError, match="NoSuchEnv"):
        build_image("gymnasium:NoSuchEnv-v0", engine="podman")


def test_build_images_options_are_checked_before_any_work() -> None:
    keys = BuildOptions.__required_keys__ | BuildOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(BuildSettings)}
    with pytest.raises(
        TypeError, match=r"^build_image\(\) got unexpected keyword argument 'python';"
    ):
        build_image("counter", engine="podman", python="3.12")  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"^build_image\(\) missing required keyword argument\(s\) 'engine'"
    ):
        build_image("counter")  # type: ignore[call-arg]
    # `registry` is where the env is looked up, before any engine is asked.
    with pytest.raises(ValueError, match=r"no environment named 'counter' \(installed: none\)"):
        build_image("counter", engine="podman", registry=Registry())


def test_the_containerfile_installs_nothing_and_serves_the_env() -> None:
    text = containerfile("gymnasium:CartPole-v1", "python:3.11-slim")
    lines = text.splitlines()
    assert lines[0] == "FROM python:3.11-slim"
    assert not any(line.startswith("RUN") for line in lines)  # no step that could use network
    assert "USER 65534:65534" in lines
    assert lines[-1] == (
        'CMD ["python3", "-m", "ecotone", "serve", "gymnasium:CartPole-v1", "--host", '
        '"0.0.0.0", "--port", "8000"]'
    )


def test_platform_tags_cover_every_glibc_down_to_manylinux2014() -> None:
    tags = platform_tags((2, 36), "x86_64")
    assert tags[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_28_x86_64" in tags and "manylinux_2_17_x86_64" in tags
    assert tags[-1] == "manylinux2014_x86_64"


def test_an_installed_distribution_is_repacked_into_a_wheel(tmp_path: Path) -> None:
    wheel = local_wheel("pluggy", tmp_path)
    assert wheel.name.startswith(f"pluggy-{ecotone_dist_version('pluggy')}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    info = f"pluggy-{ecotone_dist_version('pluggy')}.dist-info"
    assert {"pluggy/__init__.py", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"} <= names
    assert not any("__pycache__" in n or n.endswith("direct_url.json") for n in names)
    assert local_wheel("pluggy", tmp_path) == wheel  # cached


def test_the_source_fingerprint_follows_sources_and_ignores_bytecode_and_dot_folders(
    tmp_path: Path,
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    before = images._tree_fingerprint(tmp_path)
    for junk in ("pkg/__pycache__/mod.cpython-311.pyc", ".git/index", "build/lib/mod.py"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("junk")
    assert images._tree_fingerprint(tmp_path) == before
    (tmp_path / "pkg" / "mod.py").write_text("x = 22\n")
    assert images._tree_fingerprint(tmp_path) != before


def ecotone_dist_version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def test_an_unreachable_engine_is_engine_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "_clients", {})
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailable, match="docker is not reachable"):
        build_image("counter", engine="docker")


def test_cli_build_of_an_unknown_env_is_one_line_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["build", "backgammon", "--engine", "podman"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("ecotone: error: no environment named 'backgammon'")
    assert len(err.strip().splitlines()) == 1


# --- on the real engines --------------------------------------------------------------------


@pytest.fixture(scope="module")
def xdg_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache of this module's own (XDG_CACHE_HOME), shared by both engines' builds.

    The source tree's fingerprint is taken once: files edited while the tests run (by
    someone working in the checkout) would otherwise rightly rebuild the wheel, and the
    cache test would see a miss it cannot tell from a bug."""
    seen: dict[Path, str] = {}
    real = images._tree_fingerprint

    def once(root: Path) -> str:
        if root not in seen:
            seen[root] = real(root)
        return seen[root]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(images, "_tree_fingerprint", once)
        yield tmp_path_factory.mktemp("xdg")


@pytest.fixture(scope="module")
def built(engine: str, xdg_cache: Path) -> Iterator[tuple[str, list[str]]]:
    """The `counter` image built in `engine`, and the progress lines of its build."""
    client = engine_client(engine)
    try:
        client.images.get(BASE_IMAGE)
    except Exception:
        unavailable(engine, f"it has no base image {BASE_IMAGE} (run `make base-image`)")
    lines: list[str] = []
    tag = build_image(
        "counter",
        engine=engine,
        base=BASE_IMAGE,
        tag=TEST_TAG,
        cache_dir=xdg_cache / "ecotone" / "build",
        progress=lines.append,
    )
    yield tag, lines
    for image in (TEST_TAG, CLI_TAG):
        with contextlib.suppress(Exception):
            client.images.remove(image, force=True)


@contextlib.contextmanager
def running(engine: str, image: str) -> Iterator[tuple[int, Any]]:
    """A container of `image` with its default command, port 8000 on a loopback port the
    engine picks, and the container; removed afterwards."""
    client = engine_client(engine)
    any_port: Any = 0 if engine == "podman" else None
    container = client.containers.run(
        image,
        detach=True,
        init=True,
        ports={"8000/tcp": ("127.0.0.1", any_port)},
        labels={"test.ecotone": "test_build"},
    )
    try:
        container.reload()
        binding = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]
        yield int(binding["HostPort"]), container
    finally:
        container.remove(force=True)


def connect_when_ready(url: str, timeout: float = 20.0) -> ecotone.EnvClient[Any, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ecotone.connect(url, connect_timeout=2.0)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_image_serves_the_env_with_its_default_command(
    engine: str, built: tuple[str, list[str]]
) -> None:
    tag, _ = built
    with running(engine, tag) as (port, container):
        # Bound to 0.0.0.0 inside, the server made a token and printed its URL with it.
        deadline = time.monotonic() + 20

        def logs() -> bytes:
            out = container.logs()  # bytes from docker, a generator of chunks from podman
            return out if isinstance(out, bytes) else b"".join(out)

        while (found := re.search(rb"\?token=(\S+)", logs())) is None:
            assert time.monotonic() < deadline, logs()
            time.sleep(0.1)
        token = found.group(1).decode()
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(f"ws://127.0.0.1:{port}", connect_timeout=5.0)
        with connect_when_ready(f"ws://127.0.0.1:{port}?token={token}") as env:
            assert env.env == "counter"
            env.reset(seed=0)
            counts = [env.step({"delta": d}).observation["count"] for d in (1, 2, 3)]
            assert counts == [1, 3, 6]


def test_the_image_is_labelled_and_runs_as_nobody(
    engine: str, built: tuple[str, list[str]]
) -> None:
    tag, _ = built
    config = engine_client(engine).images.get(tag).attrs["Config"]
    labels = config["Labels"]
    assert labels["ecotone.managed"] == "true"
    assert labels["ecotone.env"] == "counter"
    assert labels["ecotone.version"] == ecotone.__version__
    assert labels["ecotone.distribution"] == f"ecotone {ecotone.__version__}"
    assert config["User"] == "65534:65534"
    assert "PYTHONPATH=/opt/ecotone/site" in config["Env"]
    assert config["Cmd"][:5] == ["python3", "-m", "ecotone", "serve", "counter"]


def test_a_second_build_reuses_the_host_side_cache_and_prints_the_tag(
    engine: str,
    built: tuple[str, list[str]],
    xdg_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg_cache))
    argv = ["build", "counter", "--engine", engine, "--base", BASE_IMAGE, "--tag", CLI_TAG]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out.strip() == CLI_TAG
    assert "wheel of ecotone" in err and "cached" in err
    assert "dependencies for Python 3.11: cached" in err
    labels = engine_client(engine).images.get(CLI_TAG).attrs["Config"]["Labels"]
    assert labels["ecotone.env"] == "counter"


def test_a_missing_base_image_says_how_to_make_one(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "localhost/ecotone-no-such-base:never"
    with pytest.raises(ImageNotFound, match="make base-image") as info:
        build_image("counter", engine=engine, base=missing, tag=TEST_TAG)
    assert missing in str(info.value) and "--base" in str(info.value)
    assert cli.main(["build", "counter", "--engine", engine, "--base", missing]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ecotone: error: base image") and "make base-image" in err
    assert DEFAULT_BASE in err


def test_an_engine_that_stops_answering_during_a_build_is_engine_unavailable(
    engine: str, built: tuple[str, list[str]], xdg_cache: Path, engine_proxy: EngineProxy
) -> None:
    """Not BuildFailed: podman-py wraps a failed connection in its APIError."""

    def progress(line: str) -> None:
        if line.startswith("building "):  # host-side work done: the engine's part comes
            engine_proxy.cut()

    with pytest.raises(EngineUnavailable, match=f"{engine} stopped answering while building"):
        build_image(
            "counter",
            engine=engine,
            base=BASE_IMAGE,
            tag=TEST_TAG,
            cache_dir=xdg_cache / "ecotone" / "build",
            progress=progress,
        )


def test_concurrent_builds_of_one_tag_leave_no_untagged_image(
    engine: str, built: tuple[str, list[str]], xdg_cache: Path
) -> None:
    client = engine_client(engine)
    token = secrets.token_hex(4)
    label = {"test.ecotone": token}
    base = f"localhost/ecotone-test-base:{token}"
    tag = f"localhost/ecotone-test-concurrent:{token}"
    # A base of this test's own (the shared one plus a label), so that both builds miss the
    # engine's layer cache and each makes an image of its own, as first builds do.
    with tempfile.TemporaryFile() as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            text = f"FROM {BASE_IMAGE}\n".encode()
            info = tarfile.TarInfo("Containerfile")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
        context.seek(0)
        images._Engine(engine).build(context, base, label)
    try:
        with ThreadPoolExecutor(2) as pool:
            builds = [
                pool.submit(
                    build_image,
                    "counter",
                    engine=engine,
                    base=base,
                    tag=tag,
                    cache_dir=xdg_cache / "ecotone" / "build",
                )
                for _ in range(2)
            ]
            assert [build.result() for build in builds] == [tag, tag]
        ours = client.images.list(filters={"label": f"test.ecotone={token}"})
        assert sorted(tuple(image.tags) for image in ours) == [(base,), (tag,)]
        dangling = client.images.list(filters={"label": f"test.ecotone={token}", "dangling": True})
        assert dangling == []
    finally:
        for image in client.images.list(all=True, filters={"label": f"test.ecotone={token}"}):
            with contextlib.suppress(Exception):
                client.images.remove(image.id, force=True)
