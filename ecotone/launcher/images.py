"""`ecotone build`: a container image that serves one env, built without network.

    tag = build_image("counter", engine="podman")     # localhost/ecotone-counter:latest
    ecotone build gymnasium:CartPole-v1 --engine docker --base python:3.11-slim

The contract:

- The image is the base image plus one layer: `/opt/ecotone/site`, a folder on `PYTHONPATH`
  holding ecotone, the distribution that provides the env, and their dependencies. Its default
  command is `python3 -m ecotone serve ENV --host 0.0.0.0 --port 8000`; it runs as nobody
  (65534:65534) unless the caller says otherwise, and is labelled `ecotone.managed=true`,
  `ecotone.env`, `ecotone.version` and `ecotone.distribution`.
- Everything is installed on the host, never inside the build: the build has no network (the
  engine is told `network_mode=none`) and the Containerfile has no RUN step. ecotone and the
  env's distribution are the copies installed here, made into wheels (`pip wheel` of the source
  tree for an editable install, the installed files repacked otherwise); their dependencies
  come from this host's pip configuration as binary wheels for the image's Python
  (`pip install --target --only-binary=:all: --platform manylinux... --python-version X.Y`).
- The env's distribution is the one whose entry point contributes the name (a `gymnasium:ID`
  name: the plugin whose `ecotone_resolve_environment` resolves it). If that distribution has
  an extra named like the plugin (ecotone's `chess` and `gymnasium`), it is installed with it.
- The base image must already be in the engine (nothing is pulled): a glibc Linux with
  `python3` on PATH. Its Python version is read from the image's `PYTHON_VERSION` variable
  (the official python images and `make base-image` set it), else 3.11.
- Host-side work is cached under `$XDG_CACHE_HOME/ecotone/build` (wheels by source fingerprint,
  the installed folder by everything that goes into it), so a second build of the same thing
  skips pip and only sends the context to the engine, whose own layer cache does the rest.
- Builds of one tag in one engine take turns (a lock file in the cache's `locks/`), so each
  sees the image the one before it made and removes it once it is replaced: concurrent
  builds would each tag their own image, and leave the others behind untagged.

Errors: an unknown env is a ValueError naming the installed ones; a missing base image is
`ImageNotFound` saying how to make one; an engine that cannot be reached is
`EngineUnavailable`; a failed pip run or engine build is `BuildFailed` quoting its output.

Composition, like `ecotone.server`: it uses the registry and the engine clients, and nothing
below it imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final, Required, TypedDict, Unpack

import attrs

import ecotone
from ecotone.kernel.registry import Registry
from ecotone.providers.contract import (
    SERVE_PORT,
    EngineUnavailable,
    ImageNotFound,
    ProviderError,
    default_image,
)
from ecotone.providers.engines import check_engine, client_for, find_image, is_unreachable
from ecotone.providers.owner import LABEL_ENV, LABEL_MANAGED
from ecotone.specs.keywords import from_keywords

DEFAULT_BASE: Final = "localhost/ecotone-base:bookworm"
"""What `make base-image` makes: Debian bookworm (minbase) with its python3, from nothing."""
DEFAULT_PYTHON: Final = "3.11"
SITE: Final = "/opt/ecotone/site"
USER: Final = "65534:65534"
MIN_GLIBC: Final = (2, 17)
TARGET_GLIBC: Final = (2, 36)
"""Binary wheels up to this glibc are taken: bookworm's (python:3.11-slim has the same or
newer). Bases with an older glibc, or musl (Alpine), are not supported."""
KEEP_CACHED: Final = 8
"""Cache entries kept per kind (wheels, sites); the least recently used go first."""
LABEL_VERSION: Final = "ecotone.version"
LABEL_DISTRIBUTION: Final = "ecotone.distribution"

Progress = Callable[[str], None]


class BuildFailed(ProviderError):
    """pip or the engine's build failed; the message quotes the end of its output."""


@attrs.frozen(slots=True)
class EnvSource:
    """Where an env comes from: what has to be installed in an image to serve it."""

    env: str
    plugin: str
    distribution: str
    extras: tuple[str, ...]


def find_env_source(env: str, registry: Registry | None = None) -> EnvSource:
    """The plugin and distribution that provide `env`; a ValueError naming the installed envs
    if none does."""
    registry = registry or Registry.discover()
    entries = registry.environments()
    origins = {id(plugin): dist.project_name for plugin, dist in registry.pm.list_plugin_distinfo()}
    plugin_name = distribution = None
    if env in entries:
        plugin_name, distribution = entries[env].plugin, entries[env].distribution
    else:
        for impl in registry.pm.hook.ecotone_resolve_environment.get_hookimpls():
            try:
                resolved = impl.function(name=env)
            except Exception as exc:  # the plugin recognised the name but cannot make it
                raise ValueError(f"environment {env!r}: {exc}") from exc
            if resolved is not None:
                plugin_name = impl.plugin_name
                distribution = origins.get(id(impl.plugin))
                break
        else:
            known = ", ".join(sorted(entries)) or "none"
            raise ValueError(f"no environment named {env!r} (installed: {known})")
    if distribution is None or distribution == "(not installed)":
        raise ValueError(
            f"environment {env!r} comes from plugin {plugin_name!r}, which no installed "
            "distribution provides (registered by hand?): only installed plugins can be built"
        )
    meta = importlib.metadata.metadata(distribution)
    extras = tuple(
        extra
        for extra in meta.get_all("Provides-Extra") or []
        if _normalise(extra) == _normalise(plugin_name or "")
    )
    return EnvSource(env, plugin_name or "?", distribution, extras)


def _normalise(name: str) -> str:
    """A project or extra name as PEP 503 / 685 compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the host side: wheels and the installed folder --------------------------------------


def cache_root(cache_dir: Path | str | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ecotone" / "build"


def _note(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def _pip(args: Sequence[str], what: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise BuildFailed(f"{what}: cannot run pip ({exc})") from None
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        if "No module named pip" in output:
            raise BuildFailed(f"{what}: this Python ({sys.executable}) has no pip")
        tail = "\n".join(output.splitlines()[-25:])
        raise BuildFailed(f"{what} failed (pip exit {result.returncode}):\n{tail}")


def _source_dir(dist: importlib.metadata.Distribution) -> Path | None:
    """The source tree of an editable install (PEP 610 direct_url.json), else None."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    url = info.get("url", "")
    if not info.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    return path if path.is_dir() else None


SKIP_DIRS: Final = {"__pycache__", "build", "dist", "node_modules"}


def _tree_fingerprint(root: Path) -> str:
    """Paths, sizes and modification times of a source tree (dot folders, build output and
    bytecode left out): changes when a wheel built from it could."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = os.stat(path)
                digest.update(
                    f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
    return digest.hexdigest()


def _installed_fingerprint(dist: importlib.metadata.Distribution) -> str:
    record = dist.read_text("RECORD") or ""
    return hashlib.sha256(record.encode()).hexdigest()


def _repack(dist: importlib.metadata.Distribution, out: Path) -> Path:
    """A wheel made of an installed (non-editable) distribution's files, as its RECORD lists
    them: what pip would install again. Scripts and bytecode are left out."""
    wheel_meta = dist.read_text("WHEEL")
    files = dist.files
    if not wheel_meta or files is None:
        raise BuildFailed(
            f"cannot package {dist.metadata['Name']}: it was not installed from a wheel "
            "(no WHEEL or RECORD file); reinstall it with pip"
        )
    tags = [
        line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")
    ]
    name = dist.metadata["Name"].replace("-", "_").replace(".", "_")
    version = dist.version
    info_dir = f"{name}-{version}.dist-info"
    wheel = out / f"{name}-{version}-{tags[0] if tags else 'py3-none-any'}.whl"
    records: list[str] = []
    dropped = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for item in files:
            rel = item.as_posix()
            if rel.startswith("..") or "__pycache__" in item.parts or rel.endswith(".pyc"):
                continue
            if item.parts[0].endswith(".dist-info"):
                if item.name in dropped:
                    continue
                rel = f"{info_dir}/{'/'.join(item.parts[1:])}"
            source = Path(str(dist.locate_file(item)))
            if not source.is_file():
                continue
            data = source.read_bytes()
            zf.writestr(rel, data)
            records.append(f"{rel},,{len(data)}")
        records.append(f"{info_dir}/RECORD,,")
        zf.writestr(f"{info_dir}/RECORD", "\n".join(records) + "\n")
    return wheel


def _fresh(path: Path) -> None:
    """Mark a cache entry used now (the pruning keeps the most recently used)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _publish(tmp: Path, final: Path) -> Path:
    """Move a finished cache entry into place; if another build got there first, keep theirs."""
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not final.is_dir():
            raise
    return final


def _prune(folder: Path, keep: int = KEEP_CACHED) -> None:
    with contextlib.suppress(OSError):
        entries = sorted(
            (p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in entries[keep:]:
            shutil.rmtree(old, ignore_errors=True)


def local_wheel(distribution: str, cache: Path, progress: Progress | None = None) -> Path:
    """A wheel of the installed distribution `distribution`, cached: built from the source tree
    of an editable install, repacked from the installed files otherwise."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"distribution {distribution!r} is not installed") from None
    source = _source_dir(dist)
    fingerprint = _tree_fingerprint(source) if source else _installed_fingerprint(dist)
    key = f"{dist.metadata['Name']}-{dist.version}-{fingerprint[:16]}"
    folder = cache / "wheels" / key
    found = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if found:
        _fresh(folder)
        _note(progress, f"wheel of {distribution} {dist.version}: cached")
        return found[0]
    (cache / "wheels").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache / "wheels"))
    try:
        if source is not None:
            _note(progress, f"wheel of {distribution} {dist.version}: pip wheel {source}")
            _pip(
                ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp), str(source)],
                f"building a wheel of {distribution} from {source}",
            )
        else:
            _note(progress, f"wheel of {distribution} {dist.version}: from the installed files")
            _repack(dist, tmp)
        _publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(cache / "wheels")
    return sorted(folder.glob("*.whl"))[0]


def platform_tags(glibc: tuple[int, int] = TARGET_GLIBC, machine: str | None = None) -> list[str]:
    """pip `--platform` values for a glibc Linux: manylinux_2_N for every N from `glibc` down
    to 2.17, and the manylinux2014/2010/1 aliases (pip expands only the legacy names itself)."""
    arch = machine or platform.machine()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch.lower(), arch)
    major, minor = glibc
    tags = [f"manylinux_{major}_{n}_{arch}" for n in range(minor, MIN_GLIBC[1] - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


def install_site(
    wheels: Sequence[tuple[str, Path, Sequence[str]]],
    requirements: Sequence[str],
    *,
    python_version: str,
    cache: Path,
    platforms: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> Path:
    """A folder holding `wheels` (name, wheel file, extras) and `requirements`, with all their
    dependencies, installed for `python_version` on glibc Linux: what goes on the image's
    PYTHONPATH. Cached by everything that goes into it."""
    platforms = list(platforms or platform_tags())
    digest = hashlib.sha256()
    for name, wheel, extras in wheels:
        # By content: a rebuilt wheel with the same bytes (hatchling builds reproducibly)
        # reuses the site.
        content = hashlib.sha256(wheel.read_bytes()).hexdigest()
        digest.update(f"{name}|{wheel.name}|{content}|{sorted(extras)}\n".encode())
    digest.update(json.dumps([list(requirements), python_version, platforms]).encode())
    folder = cache / "sites" / f"py{python_version}-{digest.hexdigest()[:20]}"
    if (folder / "site").is_dir():
        _fresh(folder)
        _note(progress, f"dependencies for Python {python_version}: cached")
        return folder / "site"
    (cache / "sites").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache / "sites"))
    try:
        specs = [
            f"{name}{'[' + ','.join(extras) + ']' if extras else ''} @ {wheel.as_uri()}"
            for name, wheel, extras in wheels
        ]
        shown = [spec.split(" @ ")[0] for spec in specs] + list(requirements)
        _note(progress, f"dependencies for Python {python_version}: pip install {' '.join(shown)}")
        args = ["install", "--quiet", "--target", str(tmp / "site"), "--only-binary=:all:"]
        args += ["--python-version", python_version, "--implementation", "cp"]
        for tag in platforms:
            args += ["--platform", tag]
        if python_version != f"{sys.version_info[0]}.{sys.version_info[1]}":
            args.append("--no-compile")  # bytecode of this Python would not be read there
        _pip([*args, *specs, *requirements], "installing the image's Python packages")
        shutil.rmtree(tmp / "site" / "bin", ignore_errors=True)  # scripts with this host's paths
        _publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(cache / "sites")
    return folder / "site"


def env_site(
    source: EnvSource,
    *,
    python_version: str,
    cache: Path,
    extra_requirements: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """The installed folder serving the env of `source`: ecotone and the env's distribution
    (with its extras) as local wheels, their dependencies, `extra_requirements`."""
    wheels: list[tuple[str, Path, Sequence[str]]] = []
    names = ["ecotone"] if source.distribution == "ecotone" else ["ecotone", source.distribution]
    for name in names:
        extras = source.extras if name == source.distribution else ()
        wheels.append((name, local_wheel(name, cache, progress), extras))
    return install_site(
        wheels,
        list(extra_requirements),
        python_version=python_version,
        cache=cache,
        progress=progress,
    )


# --- the image ------------------------------------------------------------------------------


def containerfile(
    env: str,
    base: str,
    *,
    port: int = SERVE_PORT,
    user: str = USER,
    serve_args: Sequence[str] = (),
    environment: str = "",
) -> str:
    """The Containerfile: the base, one COPY, settings, the default command. No RUN step.
    `serve_args`: more `ecotone serve` arguments; `environment`: more `ENV` settings."""
    command = ["python3", "-m", "ecotone", "serve", env, "--host", "0.0.0.0"]
    command += ["--port", str(port), *serve_args]
    settings = f"PYTHONPATH={SITE} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1"
    return (
        f"FROM {base}\n"
        f"COPY site {SITE}\n"
        f"ENV {settings}{' ' + environment if environment else ''}\n"
        f"USER {user}\n"
        f"EXPOSE {port}\n"
        f"CMD {json.dumps(command)}\n"
    )


def _context(site: Path, containerfile_text: str, out: IO[bytes]) -> None:
    """Write the build context (Containerfile and site/) as a tar to `out`: files owned by
    root and readable by all, times kept (the bytecode pip compiled stays valid)."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode |= 0o555 if info.isdir() else 0o444
        return info

    with tarfile.open(fileobj=out, mode="w") as tar:
        data = containerfile_text.encode()
        info = tarfile.TarInfo("Containerfile")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, fileobj=io.BytesIO(data))
        tar.add(site, arcname="site", filter=normalise)


def _python_of(attrs_: dict[str, Any]) -> str | None:
    for item in (attrs_.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        if key == "PYTHON_VERSION" and value.count(".") >= 1:
            major, minor = value.split(".")[:2]
            if major.isdigit() and minor.isdigit():
                return f"{major}.{minor}"
    return None


class _Engine:
    """The few image calls a build needs, over podman-py or the Docker SDK."""

    def __init__(self, name: str) -> None:
        self.name = check_engine(name)
        self.client = client_for(name)
        if name == "podman":
            import podman.errors as errors
        else:
            import docker.errors as errors  # type: ignore[no-redef]
        self.errors = errors

    @contextlib.contextmanager
    def calls(self, what: str) -> Iterator[None]:
        """Engine errors as ecotone's: unreachable -> EngineUnavailable (podman-py wraps a
        failed connection in its APIError: `is_unreachable` looks through), else
        BuildFailed."""
        try:
            yield
        except ProviderError:
            raise
        except Exception as exc:
            if is_unreachable(exc):
                raise EngineUnavailable(
                    f"{self.name} stopped answering while {what}: {exc}"
                ) from None
            if isinstance(exc, self.errors.BuildError):
                log = "".join(
                    str(line.get("stream") or line.get("error") or "")
                    if isinstance(line, dict)
                    else (line.decode(errors="replace") if isinstance(line, bytes) else str(line))
                    for line in (getattr(exc, "build_log", None) or [])
                )
                tail = "\n".join(log.strip().splitlines()[-20:])
                raise BuildFailed(
                    f"{self.name} could not build the image: {exc}\n{tail}".rstrip()
                ) from None
            if isinstance(exc, self.errors.APIError):
                raise BuildFailed(f"{self.name} failed while {what}: {exc}") from None
            raise

    def image(self, name: str) -> Any | None:
        return find_image(self.name, self.client, name)

    def build(self, context: IO[bytes], tag: str, labels: dict[str, str]) -> Any:
        kwargs: dict[str, Any] = dict(
            fileobj=context,
            custom_context=True,
            dockerfile="Containerfile",
            tag=tag,
            labels=labels,
            rm=True,
            forcerm=True,
            network_mode="none",
        )
        if self.name == "docker":
            kwargs["pull"] = False
        image, _log = self.client.images.build(**kwargs)
        return image

    def remove_if_dangling(self, image_id: str) -> None:
        """Remove an image a rebuild replaced, if no tag names it any more (best effort: a
        container still using it keeps it)."""
        with contextlib.suppress(Exception):
            old = self.client.images.get(image_id)
            if not old.tags:
                self.client.images.remove(image_id)


@contextlib.contextmanager
def _tag_lock(cache: Path, engine: str, tag: str) -> Iterator[None]:
    """Hold the lock of `tag` in `engine` (a lock file in `cache/locks`, across processes of
    the users of this cache): builds of one tag take turns (see the module docstring)."""
    folder = cache / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{engine}\0{tag}".encode()).hexdigest()[:24]
    with open(folder / f"{key}.lock", "ab") as f:  # "a": created if missing, never truncated
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed
        yield


class BuildOptions(TypedDict, total=False):
    """`build_image`'s keyword options, as its callers pass them (see `build_image`)."""

    engine: Required[str]
    base: str
    tag: str | None
    python_version: str | None
    extra_requirements: Sequence[str]
    progress: Progress | None
    cache_dir: Path | str | None
    registry: Registry | None


@attrs.frozen(kw_only=True, slots=True)
class BuildSettings:
    """A build's settings: `build_image`'s options once checked, with their defaults."""

    engine: str
    base: str = DEFAULT_BASE
    tag: str | None = None
    python_version: str | None = None
    extra_requirements: Sequence[str] = ()
    progress: Progress | None = None
    cache_dir: Path | str | None = None
    registry: Registry | None = None


def build_image(env: str, **options: Unpack[BuildOptions]) -> str:
    """Build the image serving `env`; return its tag. See the module docstring for what
    happens and what is raised.

    Keyword options (`BuildOptions`; any other keyword is a TypeError that names it):

    - `engine` (required): `podman` or `docker`;
    - `base` (`DEFAULT_BASE`): the image to build on, already in the engine;
    - `tag` (None: `default_image(env)`): the image's tag;
    - `python_version` (None: read from the base's PYTHON_VERSION, else 3.11): the base's
      Python as X.Y;
    - `extra_requirements` (()): more packages for the image (pip requirement strings);
    - `progress` (None): called with a line for each stage of the build;
    - `cache_dir` (None: `$XDG_CACHE_HOME/ecotone/build`): the host-side cache;
    - `registry` (None: the installed plugins): where `env` is looked up.
    """
    build = from_keywords(BuildSettings, options, "build_image")
    engine, base, progress = build.engine, build.base, build.progress
    source = find_env_source(env, build.registry)
    tag = build.tag or default_image(env)
    eng = _Engine(engine)  # EngineUnavailable before any host-side work
    with eng.calls("looking up the base image"):
        base_image = eng.image(base)
    if base_image is None:
        raise ImageNotFound(
            f"base image {base!r} is not in {engine}: run `make base-image` (makes "
            f"{DEFAULT_BASE} with debootstrap, no registry needed), or pass --base IMAGE with "
            f"an image you have (e.g. python:3.11-slim after `{engine} pull python:3.11-slim`)"
        )
    python_version = build.python_version or _python_of(base_image.attrs) or DEFAULT_PYTHON

    cache = cache_root(build.cache_dir)
    site = env_site(
        source,
        python_version=python_version,
        cache=cache,
        extra_requirements=build.extra_requirements,
        progress=progress,
    )

    labels = {
        LABEL_MANAGED: "true",
        LABEL_ENV: env,
        LABEL_VERSION: ecotone.__version__,
        LABEL_DISTRIBUTION: (
            f"{source.distribution} {importlib.metadata.version(source.distribution)}"
        ),
    }
    _note(progress, f"building {tag} on {base} with {engine} (no network)")
    with tempfile.TemporaryFile(prefix="ecotone-context-") as context:
        _context(site, containerfile(env, base), context)
        context.seek(0)
        with _tag_lock(cache, engine, tag):
            with eng.calls("building the image"):
                previous = eng.image(tag)
                image = eng.build(context, tag, labels)
            if previous is not None and previous.id != image.id:
                eng.remove_if_dangling(previous.id)
    _note(progress, f"built {tag} ({image.id.removeprefix('sha256:')[:12]})")
    return tag
