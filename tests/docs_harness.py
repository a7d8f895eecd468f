"""Every code block of README.md and docs/*.md, found and run (tests/test_docs.py).

Sybil collects the blocks: its `Document` holds a file's examples, each with its line and
the namespace the document's Python blocks share; markdown-it-py (CommonMark) is the lexer,
so an indented block is found as surely as a fenced one. Each block is run by its language,
in the document's order, as a reader pasting them one after the other would:

- `python`: executed in the document's namespace, in the document's folder (a temporary
  one; the repository for README.md, whose commands start `.venv/bin/`). A block whose
  first line is a file name (`# my_agent.py`) is that file, written into the folder for the
  commands after it; a block that needs a Ray cluster runs in .venv-ray's Python, and one
  that imports `datasets` (which the dev venv does not have) in .venv-trl's.
- `sh`: each command through bash, in the folder (`cd` moves it); one that serves (`ecotone
  serve`, `ecotone launch`, `podman run`, or any command ending in `&`) is started in the
  background and waited for until it says it serves, and kept until the document ends (or
  another takes its port). `make test` is checked with `make -n test`: it is the command
  running this.
- `text`: the output of the command just before, compared as doctest compares (`...`
  matches anything); `tree`: a layout whose paths must exist; `frames`: a protocol
  transcript, replayed against the engine; `toml`: parsed, and a config loaded as
  `ecotone serve` and `ecotone launch` load it; `json`: parsed, and an MCP client's
  configuration started as an MCP client would start it, its tools listed.

A block is not run only when it says so on its first line, and only for what cannot run
here: `# not run here: needs a GPU`, `... needs the Hub`, `... needs a Kubernetes cluster`.
A block that needs Podman or Docker runs where the engine answers and skips, saying why,
where it does not (`tests/engines.py`: CI requires both); one that needs a Ray cluster runs
on one started here in network namespaces (tests/ray), with .venv-ray.

The ports the docs name (8000, 8765...) are mapped to free ones, the same in every block of
a document, since other test runs on this machine may hold them; the host `head` of a Ray
address is the cluster's head. Nothing else of a block is changed.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import site
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from markdown_it import MarkdownIt
from sybil import Document, Example, Region

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "sh", "text", "tree", "frames", "toml", "json")

MARK = re.compile(r"^(?:#|//)\s*not run here: needs (a GPU|the Hub|a Kubernetes cluster)\b")
FILE = re.compile(r"^# ([\w./-]+\.py)\b")
DOC_PORTS = (8000, 8001, 8002, 8080, 8765, 8766, 9000)
PORT_PLACES = re.compile(
    r"(?:(?<=127\.0\.0\.1:)|(?<=localhost:)|(?<=--port )|(?<=--port=)|(?<=PORT=))(\d{4,5})\b"
)
READY = re.compile(r"ecotone: serving |ecotone: '.*' running on |[Ll]istening on")
SERVES = re.compile(
    r"^(?:\S*/)?(?:ecotone (?:serve|launch)|podman run|docker run)\b(?!.*(?:\s-d\b|--help))"
)
ENGINE_WORDS = {
    "podman": re.compile(r"\bpodman\b"),
    "docker": re.compile(r"\bdocker\b(?!\.)"),
}
RAY = re.compile(r"provider[= ]\"?ray\b|ray://")
DATASETS = re.compile(r"^(?:import datasets|from datasets import)\b", re.MULTILINE)


@attrs.frozen
class Block:
    """A code block: its language (`""` when it has none), its text, and whether it was
    written indented (then it cannot say its language)."""

    language: str
    source: str
    indented: bool


class CodeBlocks:
    """A Sybil parser: a region for every code block markdown-it-py finds, fenced or
    indented, parsed as a `Block`. `DocRun.run` runs it, with what the document's run holds
    (its folder, servers, ports), which a Sybil evaluator is not given."""

    def __init__(self) -> None:
        self.markdown = MarkdownIt("commonmark")

    def __call__(self, document: Document) -> Iterable[Region]:
        text = document.text
        starts = [0]
        for line in text.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        for token in self.markdown.parse(text):
            if token.type not in ("fence", "code_block") or token.map is None:
                continue
            first, last = token.map
            fenced = token.type == "fence"
            block = Block(
                language=token.info.split()[0] if fenced and token.info.strip() else "",
                source=token.content,
                indented=not fenced,
            )
            end = starts[min(last, len(starts) - 1)]
            yield Region(starts[first], end, block, _run_by_docrun)


def examples() -> list[Example]:
    """Every code block of the docs, as Sybil examples in document order."""
    found: list[Example] = []
    for path in DOCS:
        document = Document.parse(str(path), CodeBlocks())
        found.extend(document.examples())
    return found


def _run_by_docrun(example: Example) -> None:
    raise AssertionError("a docs block is run by DocRun.run")


def example_id(example: Example) -> str:
    return f"{Path(example.path).relative_to(ROOT)}:{example.line}"


def marked(block: Block) -> str | None:
    """What a block says it needs, when it says it is not run here."""
    first = block.source.lstrip("\n").splitlines()[0] if block.source.strip() else ""
    found = MARK.match(first)
    return found.group(1) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _logical_lines(source: str) -> list[str]:
    """Shell lines with their `\\` continuations joined; blank and comment lines dropped."""
    lines: list[str] = []
    pending = ""
    for raw in source.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = re.sub(r"\s+#[^'\"]*$", "", (pending + raw)).strip()  # a trailing comment
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


@attrs.define
class Background:
    """A serving command started in the background, and the port it serves on (if known)."""

    process: subprocess.Popen[str]
    command: str
    output: Path
    port: int | None


class DocRun:
    """One document's run: its folder, its ports, its environment, the servers its commands
    started, the output of its last command, and what it must undo at the end."""

    def __init__(self, doc: Path, folder: Path) -> None:
        self.doc = doc
        self.cwd = ROOT if doc.name == "README.md" else folder
        self.folder = folder
        self.ports = {port: _free_port() for port in DOC_PORTS}
        self.background: list[Background] = []
        self.last_output = ""
        self.cleanups: list[Any] = []
        self.ray_head: str | None = None
        self.env = dict(os.environ)
        paths = [str(Path(sys.executable).parent)]
        for variable, bin_dir in (("MCP_VENV", "bin"), ("MCP_NODE", "node_modules/.bin")):
            if os.environ.get(variable):
                paths.append(str(Path(os.environ[variable]) / bin_dir))
        self.env["PATH"] = os.pathsep.join([*paths, os.environ.get("PATH", "")])
        self.env["ECOTONE_PORT"] = str(self.ports[8000])  # `ecotone serve` without --port
        # pip as a user with everything installed already would run it, with no build
        # isolation (which would fetch hatchling for `pip install -e`); `ecotone build`
        # installs an image's packages through this host's own pip configuration, as the
        # container tests' builds do (tests/engines.py).
        self.env["PIP_NO_BUILD_ISOLATION"] = "0"
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        self.env.pop("ECOTONE_CONFIG", None)
        self._ray_start: threading.Thread | None = None
        self._ray_cluster_made: Any = None
        self._ray_error: BaseException | None = None
        if RAY.search(doc.read_text()):
            self.start_ray_cluster()

    # --- what a block needs ----------------------------------------------------------------

    def localize(self, text: str) -> str:
        """`text` with the docs' ports made this run's, and the Ray head's host its address."""
        text = PORT_PLACES.sub(lambda m: str(self.ports.get(int(m.group(1)), m.group(1))), text)
        if self.ray_head is not None:
            text = text.replace("ray://head:", f"ray://{self.ray_head}:")
        return text

    def require(self, source: str) -> None:
        """Skip (or fail, where CI requires it) when what `source` needs is not here."""
        from tests.engines import engine_client, require_base_image

        for engine, word in ENGINE_WORDS.items():
            if word.search(source):
                engine_client(engine)
                require_base_image(engine)
        if "mcp-server-time" in source and not shutil.which(
            "mcp-server-time", path=self.env["PATH"]
        ):
            _missing("mcp-server-time is not installed (MCP_VENV: make pytest makes it)")
        if "mcp-server-everything" in source and not shutil.which(
            "mcp-server-everything", path=self.env["PATH"]
        ):
            _missing("mcp-server-everything is not installed (MCP_NODE: make pytest makes it)")
        if RAY.search(source):
            self._ray_cluster()
        if DATASETS.search(source) and not os.environ.get("TRL_PYTHON"):
            _missing("TRL_PYTHON is not set: the python of a venv with datasets (make test)")

    def _ray_cluster(self) -> None:
        if self.ray_head is not None:
            return
        python = os.environ.get("RAY_PYTHON", "")
        if not python:
            _missing("RAY_PYTHON is not set: the python of a venv with ray (make test)")
        if os.geteuid() != 0 or shutil.which("ip") is None:
            _missing("a Ray cluster here needs root and iproute2 (network namespaces)")
        if self._ray_start is None:
            self.start_ray_cluster()
        assert self._ray_start is not None
        self._ray_start.join()
        cluster = self._ray_cluster_made
        if cluster is None:
            raise AssertionError(f"the Ray cluster did not start: {self._ray_error!r}")
        self.env["HOME"] = cluster.home or self.env["HOME"]
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):  # its own token: see NetnsCluster
            self.env[name] = cluster.environ()[name]
        self.ray_head = cluster.head_addr
        self.env["PATH"] = os.pathsep.join([str(Path(python).parent), self.env["PATH"]])
        self.env["PYTHONPATH"] = str(ROOT)  # this checkout's ecotone, in .venv-ray too

    def start_ray_cluster(self) -> None:
        """Start a one-node Ray cluster in the background (half a minute and more, spent
        while the document's blocks before its Ray blocks run); `_ray_cluster` waits for it.
        Nothing when Ray or network namespaces are not to be had here."""
        python = os.environ.get("RAY_PYTHON", "")
        if self._ray_start is not None or not python:
            return
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return
        from tests.ray.netns_cluster import NetnsCluster

        home = self.folder / "ray-home"  # its own ~/.ray/auth_token: see NetnsCluster
        home.mkdir()
        cluster = NetnsCluster(
            str(Path(python).parent / "ray"),
            workers=0,
            cpus=2,
            subnet=_unused_subnet(),
            home=str(home),
        )
        self.cleanups.append(cluster.close)

        def start() -> None:
            try:
                cluster.__enter__()
                self._ray_cluster_made = cluster
            except BaseException as exc:
                self._ray_error = exc

        self._ray_start = threading.Thread(target=start, name="ray-cluster", daemon=True)
        self._ray_start.start()

    # --- running ----------------------------------------------------------------------------

    def run(self, example: Example) -> str:
        """Run one block; returns what it was for the tally: `ran`, or `marked: REASON`."""
        block: Block = example.parsed
        where = f"{Path(example.path).name}:{example.line}"
        assert not block.indented, (
            f"{where}: an indented code block cannot say its language: fence it (```python...)"
        )
        assert block.language in LANGUAGES, (
            f"{where}: a code block in {block.language or 'no language'}: say one of {LANGUAGES}"
        )
        reason = marked(block)
        if reason is not None:
            return f"marked: needs {reason}"
        run = getattr(self, f"_{block.language}")
        run(example, block)
        return "ran"

    def _python(self, example: Example, block: Block) -> None:
        name = FILE.match(block.source)
        if name is not None:
            target = self.cwd / name.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.localize(block.source))
            self.cleanups.append(lambda: target.unlink(missing_ok=True))
            return
        self.require(block.source)
        source = self.localize(block.source)
        pad = "\n" * example.line  # tracebacks name the document's own lines
        other = "RAY_PYTHON" if RAY.search(source) else None
        if DATASETS.search(source):
            other = "TRL_PYTHON"
        if other is not None:
            env = {**self.env, "PYTHONPATH": str(ROOT)}  # this checkout's ecotone there too
            done = subprocess.run(
                [os.environ[other], "-c", source],
                cwd=self.cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"{example.path}:{example.line}:\n{done.stderr[-4000:]}"
            self.last_output = done.stdout
            return
        code = compile(pad + source, example.path, "exec")
        saved_cwd, saved_path = os.getcwd(), os.environ.get("PATH", "")
        os.chdir(self.cwd)
        os.environ["PATH"] = self.env["PATH"]
        if str(self.cwd) not in sys.path:
            sys.path.insert(0, str(self.cwd))
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(code, example.namespace)
        finally:
            os.chdir(saved_cwd)
            os.environ["PATH"] = saved_path
            self.last_output = printed.getvalue()
            sys.stdout.write(self.last_output)  # for pytest's report of a failure

    def _sh(self, example: Example, block: Block) -> None:
        self.require(block.source)
        source = self.localize(block.source)
        for line in _logical_lines(source):
            if line.startswith("cd "):
                self.cwd = (self.cwd / os.path.expanduser(shlex.split(line)[1])).resolve()
                continue
            if line == "make test":
                line = "make -n test"  # the command that is running this test: not again
            if SERVES.match(line) or line.endswith("&"):
                self._start(line.removesuffix("&").strip(), example)
                continue
            done = subprocess.run(
                ["bash", "-c", line],
                cwd=ROOT if line.startswith("make ") else self.cwd,  # the repository's targets
                env=self.env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            where = f"{Path(example.path).name}:{example.line}: `{line}`"
            said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            assert done.returncode == 0, f"{where} exited {done.returncode}:\n{said}"
            self.last_output = done.stdout
            if re.match(r"pip install -e ", line):
                self._uninstall_later(self.cwd)
                # This process sees the new install as a fresh one would: its .pth files
                # (an editable install's import hook) are read now.
                importlib.invalidate_caches()
                site.addsitedir(sysconfig.get_paths()["purelib"])
            built = re.match(r"(?:\S*/)?ecotone build \S+ --engine (\w+)", line)
            if built is not None:
                self._remove_image_later(built.group(1), done.stdout.strip().splitlines()[-1])

    def _uninstall_later(self, project: Path) -> None:
        """A distribution the docs install into this venv (as tests/test_scaffold.py does)
        is uninstalled when the document ends."""
        name = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
        pip = [sys.executable, "-m", "pip", "uninstall", "-y", "-q", name]
        self.cleanups.append(lambda: subprocess.run(pip, capture_output=True, timeout=120))

    def _remove_image_later(self, engine: str, tag: str) -> None:
        def remove() -> None:
            from ecotone.providers.engines import client_for

            with contextlib.suppress(Exception):
                client_for(engine).images.remove(tag, force=True)

        self.cleanups.append(remove)

    def _port_of(self, line: str) -> int | None:
        for pattern in (r"--port[= ](\d+)", r"-p 127\.0\.0\.1:(\d+):", r"PORT=(\d+)"):
            found = re.search(pattern, line)
            if found:
                return int(found.group(1))
        if re.search(r"ecotone serve\b", line) and "--transport stdio" not in line:
            return self.ports[8000]
        return None

    def _start(self, line: str, example: Example) -> None:
        """Start a serving command in the background and wait until it says it serves; one
        of this document's servers on the same port is stopped first (Ctrl-C, in a
        terminal)."""
        port = self._port_of(line)
        for running in [b for b in self.background if port is not None and b.port == port]:
            self._stop(running)
            self.background.remove(running)
        log = self.folder / f"background-{len(self.background)}-{time.monotonic_ns()}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                ["bash", "-c", line],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        started = Background(process, line, log, port)
        self.background.append(started)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            said = log.read_text(errors="replace")
            if READY.search(said):
                self.last_output = said
                return
            if process.poll() is not None:
                break
            time.sleep(0.1)
        said = log.read_text(errors="replace")
        raise AssertionError(
            f"{Path(example.path).name}:{example.line}: `{line}` did not say it serves "
            f"(exit status {process.poll()}):\n{said[-3000:]}"
        )

    def _stop(self, running: Background) -> None:
        process = running.process
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def _text(self, example: Example, block: Block) -> None:
        checker = doctest.OutputChecker()
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        assert checker.check_output(block.source, self.last_output, flags), (
            f"{Path(example.path).name}:{example.line}: the output shown is not what the "
            f"command before it printed:\n--- shown\n{block.source}--- printed\n{self.last_output}"
        )

    def _tree(self, example: Example, block: Block) -> None:
        lines = block.source.splitlines()
        root_name = lines[0].split()[0].rstrip("/")
        for base in (self.cwd / root_name, ROOT / root_name, self.cwd):
            if base.name == root_name and base.is_dir():
                root = base
                break
        else:
            raise AssertionError(f"{example.path}:{example.line}: no folder {root_name}/ here")
        missing = []
        for line in lines[1:]:
            indent = len(line) - len(line.lstrip(" "))
            entry = line.strip().split("  ")[0].split(" ")[0]
            if indent != 2 or not re.fullmatch(r"[\w./-]+", entry):
                continue  # a description's continuation
            if not (root / entry).exists():
                missing.append(entry)
        assert not missing, f"{example.path}:{example.line}: not in {root}: {missing}"

    def _frames(self, example: Example, block: Block) -> None:
        import trio

        from ecotone.kernel import Engine
        from tests.conftest import make_registry
        from tests.engine_driver import Driver

        doc_session = re.search(r'"session":"(\w+)"', block.source)
        assert doc_session is not None
        expected = [line for line in block.source.splitlines() if line.startswith(("> ", "< "))]

        async def replay() -> None:
            engine = Engine(make_registry().env_spec("counter"))
            driver = Driver(engine)
            peer = driver.peer(frames=False)  # answers as the bytes a client reads
            session = ""
            for i, line in enumerate(expected):
                if not line.startswith("> "):
                    continue
                frame = line[2:].replace(doc_session.group(1), session or doc_session.group(1))
                answers = await driver.send(peer, frame.encode())
                shown = json.loads(expected[i + 1][2:])
                got = json.loads(answers[0])
                if not session and "session" in got:
                    session = got["session"]
                shown = json.loads(json.dumps(shown).replace(doc_session.group(1), session))
                assert got == shown, f"{example.line}: {line}\nshown: {shown}\ngot:   {got}"

        trio.run(replay)

    def _toml(self, example: Example, block: Block) -> None:
        data = tomllib.loads(block.source)
        if "project" in data:
            for name, module in data["project"]["entry-points"]["ecotone"].items():
                assert re.fullmatch(r"[\w.]+", module), (name, module)
            return
        from ecotone.kernel.config import load

        path = self.folder / f"config-{example.line}" / "ecotone.toml"  # not where commands run
        path.parent.mkdir()
        path.write_text(block.source)
        config = load(str(path))
        if "launch" in data:
            from ecotone.launcher.config import launch_config

            launch_config(config.launch)

    def _json(self, example: Example, block: Block) -> None:
        data = json.loads(block.source)
        for name, server in data.get("mcpServers", {}).items():
            tools = _mcp_tools(server["command"], server.get("args", []), self.env)
            assert tools, f"{example.path}:{example.line}: the MCP server {name!r} lists no tool"

    def close(self) -> None:
        if self._ray_start is not None:
            self._ray_start.join()  # then its cleanup stops it
        for running in reversed(self.background):
            self._stop(running)
        self.background.clear()
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        self.cleanups.clear()


def _mcp_tools(command: str, args: list[str], env: dict[str, str]) -> list[str]:
    """The tools of the MCP server `command args` names, started as an MCP client would."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def ask() -> list[str]:
        params = StdioServerParameters(command=command, args=args, env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]

    return anyio.run(ask)


def _unused_subnet() -> str:
    """A link-local /24 no interface of this machine is on (tests/test_ray.py's cluster,
    another run's, may be up meanwhile: theirs is 169.254.91)."""
    shown = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    taken = set(re.findall(r"inet 169\.254\.(\d+)\.", shown)) | {"91"}
    free = [n for n in range(100, 200) if str(n) not in taken]
    return f"169.254.{free[os.getpid() % len(free)]}"


def _missing(reason: str) -> None:
    """Skip; on CI (where `make pytest` installs everything) fail instead."""
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def runs(folder_of: Any) -> Iterator[Any]:
    """`run(example)`: each example run in its document's `DocRun`, the previous document's
    closed when the next one starts, and the last when the block ends."""
    current: list[DocRun] = []

    def run(example: Example) -> str:
        doc = Path(example.path)
        if not current or current[0].doc != doc:
            if current:
                current.pop().close()
            current.append(DocRun(doc, folder_of(doc)))
        return current[0].run(example)

    try:
        yield run
    finally:
        if current:
            current.pop().close()
