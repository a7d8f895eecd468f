"""Every mistake a user makes on the command line is one line on stderr, `ecotone: error:
...`, naming what is at fault, with exit status 2 for a usage error and 1 for a failure, and
no traceback; output into a pipe whose reader has gone ends quietly. Each command is run, as
a program, with a wrong env name, a wrong flag value, a missing file and a closed stdout.

Where a command has no such input there is no row: `list` and `gc` name no env and read no
file, and `play` reads no file (a URL to a socket that is missing is a failed connection,
status 1: that row is there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from ecotone import cli

MISSING = "/nonexistent-ecotone-test"
Done = subprocess.CompletedProcess[str]


@attrs.frozen
class Case:
    name: str
    argv: tuple[str, ...]
    status: int
    says: str = ""
    """What the line must contain (the flag, the file, the env at fault)."""
    closed_stdout: bool = False
    stdin: bytes = b""
    env: tuple[tuple[str, str], ...] = ()


def case(name: str, argv: str, status: int, says: str = "", **kw: object) -> Case:
    return Case(name, tuple(argv.split()), status, says, **kw)  # type: ignore[arg-type]


def _stdio_frame(frame: dict[str, object]) -> bytes:
    data = json.dumps(frame).encode()
    return struct.pack(">I", len(data)) + data


MCP_INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
    ).encode()
    + b"\n"
)

NOSUCH = "no environment named 'nosuch'"

CASES = [
    # serve
    case("serve-env", "serve nosuch", 2, NOSUCH),
    case("serve-flag", "serve counter --port x", 2, "argument --port: invalid int value: 'x'"),
    case("serve-file", f"serve counter --config {MISSING}.toml", 2, f"{MISSING}.toml"),
    case("serve-reward", "serve mcp+stdio:true#reward=nope:fn", 2, "reward='nope:fn'"),
    case("serve-tasks-file", f"serve wordle --tasks {MISSING}.jsonl", 2, f"{MISSING}.jsonl"),
    case("serve-isolate", "serve chess-duel --isolate", 2, "cannot run in a process of its own"),
    case("serve-lease", "serve counter --lease 0", 2, "lease must be > 0"),
    case(
        "serve-lease-alias",
        "serve counter --lease 5 --idle-timeout 7",
        2,
        "both limits.lease (5.0) and its deprecated alias limits.idle_timeout (7.0)",
    ),
    case(
        "serve-closed",
        "serve counter --transport stdio",
        0,
        closed_stdout=True,
        stdin=_stdio_frame({"op": "hello", "id": 1}),
    ),
    # mcp
    case("mcp-env", "mcp nosuch", 2, NOSUCH),
    case("mcp-flag", "mcp counter --actions=yes", 2, "--actions"),
    case("mcp-file", f"mcp counter --config {MISSING}.toml", 2, f"{MISSING}.toml"),
    case("mcp-closed", "mcp counter", 141, closed_stdout=True, stdin=MCP_INITIALIZE),
    # list
    case("list-env", "list nosuch", 2, "unrecognized arguments: nosuch"),
    case("list-flag", "list --all=x", 2, "unrecognized arguments: --all=x"),
    case("list-closed", "list", 141, closed_stdout=True),
    # play
    case("play-env", "play nosuch", 2, NOSUCH),
    case("play-flag", "play echo --action nojson", 2, "--action 'nojson' is not JSON"),
    case("play-action", 'play echo --action {"mesage":"hi"}', 2, "--action"),
    case("play-socket", f"play unix://{MISSING}.sock", 1, f"{MISSING}.sock"),
    case("play-closed", "play echo", 141, closed_stdout=True),
    # collect
    case("collect-env", "collect nosuch --policy agent:act", 2, NOSUCH),
    case(
        "collect-flag",
        "collect counter --policy agent:act --concurrency x",
        2,
        "argument --concurrency: invalid int value: 'x'",
    ),
    case("collect-file", "collect counter --policy missing_agent:act", 2, "missing_agent"),
    case(
        "collect-seats",
        "collect counter --policy a=agent:act --policy b=agent:act",
        2,
        "a policy per seat, but env 'counter' has no seats",
    ),
    case(
        "collect-seat-twice",
        "collect chess-duel --policy white=agent:act --policy white=agent:act",
        2,
        "seat 'white' is given twice",
    ),
    case(
        "collect-datasets",  # the dev venv has no `datasets`
        "collect counter --policy agent:act --format parquet --out runs",
        2,
        "need the `datasets` package: pip install 'ecotone[datasets]'",
    ),
    case(
        "collect-closed",
        "collect counter --policy agent:act --episodes 2 --out runs",
        141,
        closed_stdout=True,
    ),
    # validate
    case("validate-env", "validate nosuch", 2, NOSUCH),
    case("validate-flag", "validate counter --seeds x", 2, "--seeds"),
    case("validate-file", f"validate --url unix://{MISSING}.sock", 2, f"{MISSING}.sock"),
    case("validate-closed", "validate counter --check describe", 141, closed_stdout=True),
    # init
    case("init-env", "init No-Such", 2, "'No-Such' is not a usable env name"),
    case("init-flag", "init maze --dir", 2, "argument --dir: expected one argument"),
    case("init-file", "init maze --dir /etc/hostname/maze", 2, "/etc/hostname/maze"),
    case("init-closed", "init maze --dir fresh", 141, closed_stdout=True),
    # launch
    case("launch-env", "launch nosuch", 2, NOSUCH),
    case("launch-flag", "launch counter --ready-timeout x", 2, "--ready-timeout"),
    case("launch-file", f"launch counter --config {MISSING}.toml", 2, f"{MISSING}.toml"),
    case("launch-closed", "launch counter", 141, closed_stdout=True),
    # gc
    case("gc-env", "gc --provider nosuch", 2, "unknown provider 'nosuch'"),
    case("gc-flag", "gc --provider", 2, "argument --provider: expected one argument"),
    case("gc-closed", "gc --provider process", 141, closed_stdout=True),
    # build
    case("build-env", "build nosuch --engine docker", 2, NOSUCH),
    case("build-flag", "build counter --engine nope", 2, "argument --engine: invalid choice"),
    case(
        "build-file",
        "build counter --engine docker",
        1,
        f"unix://{MISSING}.sock",
        env=(("DOCKER_HOST", f"unix://{MISSING}.sock"),),
    ),
    case("build-closed", "build --help", 0, closed_stdout=True),
    # export
    case("export-k8s-env", "export k8s nosuch --image x", 2, NOSUCH),
    case("export-k8s-flag", "export k8s counter --image x --cpu zz", 2, "--cpu 'zz'"),
    case(
        "export-k8s-file",
        f"export k8s counter --image x --out {MISSING}/k8s.yaml",
        2,
        f"--out {MISSING}/k8s.yaml",
    ),
    case("export-k8s-closed", "export k8s counter --image x", 141, closed_stdout=True),
    case("export-space-env", "export space nosuch space", 2, NOSUCH),
    case("export-space-flag", "export space counter", 2, "the following arguments are required"),
    case("export-space-file", "export space counter /etc/hostname", 2, "/etc/hostname"),
    case("export-space-closed", "export space --help", 0, closed_stdout=True),
    # keygen
    case("keygen-flag", "keygen", 2, "the following arguments are required: file"),
    case("keygen-file", f"keygen {MISSING}/snapshot.key", 1, f"{MISSING}/snapshot.key"),
    case("keygen-exists", "keygen agent.py", 1, "agent.py exists"),
    case("keygen-closed", "keygen snapshot.key", 0, closed_stdout=True),
    # anything, verbose: the traceback too (and still the line, last)
    case("verbose", "-v play unix:///nonexistent.sock", 1, "Traceback"),
]


def run(c: Case, cwd: Path) -> subprocess.CompletedProcess[str]:
    stdout: int = subprocess.PIPE
    read = write = -1
    if c.closed_stdout:
        read, write = os.pipe()
        os.close(read)
        stdout = write
    try:
        return subprocess.run(
            [sys.executable, "-m", "ecotone", *c.argv],
            cwd=cwd,
            input=c.stdin.decode(),
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, **dict(c.env)},
        )
    finally:
        if write != -1:
            os.close(write)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    """Every case run once, four at a time, each in a folder of its own that holds the
    policy `agent:act`."""
    root = tmp_path_factory.mktemp("cli-errors")

    def one(c: Case) -> tuple[str, Done]:
        cwd = root / c.name
        cwd.mkdir()
        (cwd / "agent.py").write_text("def act(observation):\n    return {'delta': 1}\n")
        return c.name, run(c, cwd)

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_a_mistake_is_one_line_on_stderr_with_its_exit_status(
    c: Case, outcomes: dict[str, Done]
) -> None:
    done = outcomes[c.name]
    said = f"status {done.returncode}, stderr:\n{done.stderr}"
    assert done.returncode == c.status, said
    if c.name == "verbose":
        assert c.says in done.stderr, said
        assert done.stderr.splitlines()[-1].startswith("ecotone: error: "), said
        return
    assert "Traceback" not in done.stderr, said
    if c.closed_stdout:  # quiet: nothing but what the command says as it starts
        assert "error" not in done.stderr.lower(), said
        assert "Exception ignored" not in done.stderr, said
        return
    lines = done.stderr.splitlines()
    assert len(lines) == 1, said
    assert lines[0].startswith("ecotone: error: "), said
    assert c.says in lines[0], said


def test_every_command_has_its_rows() -> None:
    """No command is left out of the table above: each has a wrong flag and a closed pipe,
    and a wrong env name or a missing file wherever it takes one."""
    names = {c.name for c in CASES}
    for command in cli.COMMANDS:
        keys = ["export-k8s", "export-space"] if command == "export" else [command]
        for key in keys:
            for kind in ("flag", "closed"):
                assert f"{key}-{kind}" in names, f"{key}-{kind}"
            if command not in ("list", "gc", "keygen"):
                assert f"{key}-env" in names, key
            if command not in ("list", "gc", "play"):
                assert f"{key}-file" in names, key


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found: list[tuple[str, argparse.Action]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {where}".strip(), a) for where, a in _actions(sub)]
        else:
            found.append(("", action))
    return found


def test_every_command_and_flag_has_help_and_internal_flags_are_hidden() -> None:
    actions = _actions(cli.parser())
    missing = [f"{w} {a.option_strings or a.dest}" for w, a in actions if not (a.help or "")]
    assert not missing, missing
    lifeline = [a for where, a in actions if "--lifeline-fd" in a.option_strings]
    assert lifeline and all(a.help == argparse.SUPPRESS for a in lifeline)
    shown = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    assert "lifeline" not in shown


def test_top_help_lists_every_command_on_one_line_and_not_the_module_docstring() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "ecotone", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    assert "Nothing imports" not in shown and "nothing in ecotone" not in shown
    for name, command in cli.COMMANDS.items():
        line = re.search(rf"^    {name} +(.*)$", shown, re.M)
        assert line is not None, f"{name} not listed:\n{shown}"
        assert line.group(1) == command.summary, f"{name}'s help is not one line:\n{shown}"


def test_the_readme_command_table_names_every_command_and_only_real_flags() -> None:
    """Help and the README's table say the same: every command is in the table, and every
    flag the table shows exists."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = readme.split("### Commands", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `ecotone ([a-z]+)( [a-z0-9]+)?([^`]*)`", table, re.M)
    listed = {command for command, _, _ in rows}
    assert listed == set(cli.COMMANDS), listed ^ set(cli.COMMANDS)
    top = cli.parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub, rest in rows:
        parser = commands.choices[command]
        if sub.strip():
            nested = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = nested.choices[sub.strip()]
        flags = {s for a in parser._actions for s in a.option_strings}
        for flag in re.findall(r"(--[a-z][a-z-]*)", rest):
            assert flag in flags, f"README: `ecotone {command}{sub}` has no {flag}"


def test_inits_next_hints_have_their_comments_in_one_column(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "init", "maze", "--dir", str(tmp_path / "a-long-name")],
        capture_output=True,
        text=True,
        check=True,
    )
    hints = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert len(hints) == 4, done.stdout
    assert len({line.index("  # ") for line in hints}) == 1, done.stdout
