"""The `ecotone` command: `main` parses the command line and runs one command, each in a module
of this package (serve.py: serve, mcp; listing.py: list; play.py; collect.py; authoring.py:
validate, init; launch.py: launch, gc, build; export.py; keygen.py). The top layer: nothing
in ecotone imports it.

Every mistake ends the same way: one line on stderr, `ecotone: error: ...`, naming the flag,
file, env or field at fault (errors.py says which exit status each kind gets), and a traceback
only with `-v`. Output piped into a reader that stops early (`ecotone list | head -1`) ends
quietly, as a program killed by SIGPIPE would (status 141).
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple, NoReturn, TextIO

import ecotone
from ecotone.cli.authoring import init_arguments, run_init, run_validate, validate_arguments
from ecotone.cli.collect import collect_arguments, run_collect
from ecotone.cli.errors import BROKEN_PIPE, UsageError, report, silence_stdout
from ecotone.cli.export import export_arguments, run_export
from ecotone.cli.keygen import keygen_arguments, run_keygen
from ecotone.cli.launch import (
    build_arguments,
    gc_arguments,
    launch_arguments,
    run_build,
    run_gc,
    run_launch,
)
from ecotone.cli.listing import run_list
from ecotone.cli.play import play_arguments, run_play
from ecotone.cli.serve import mcp_arguments, run_mcp, run_serve, serve_arguments

# What `ecotone --help` says ecotone is (the module's docstring is for its readers).
DESCRIPTION = (
    "Serve reinforcement-learning environments over the network: play them, collect "
    "trajectories from them, check them with the conformance suite, and launch, build or "
    "export their servers."
)

EPILOG = "`ecotone COMMAND --help` for a command's flags; -v anywhere for tracebacks and logs."


class Parser(argparse.ArgumentParser):
    """argparse, whose mistakes are a `UsageError` for `main` to report in one line (argparse
    itself prints the usage and the message on two or more)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("ecotone").strip()
        where = f"{command}: " if command else ""
        raise UsageError(f"{where}{message} (see `{self.prog} --help`)")


class Command(NamedTuple):
    """A command: its one-line help (what `ecotone --help` lists), the function that adds its
    flags to its parser (None: it has none), and the one that runs it (the parsed arguments
    in, the exit status out)."""

    summary: str
    flags: Callable[[argparse.ArgumentParser], None] | None
    run: Callable[[argparse.Namespace], int]


# Every command, in `--help`'s order.
COMMANDS: dict[str, Command] = {
    "serve": Command("serve an environment over a transport", serve_arguments, run_serve),
    "mcp": Command("serve an env as an MCP server on stdin/stdout", mcp_arguments, run_mcp),
    "list": Command("the installed envs, transports and providers", None, run_list),
    "play": Command("play a few steps of an env name or a server URL", play_arguments, run_play),
    "collect": Command(
        "run a policy over an env's tasks, keep trajectories", collect_arguments, run_collect
    ),
    "validate": Command(
        "the conformance suite, on an env or a server URL", validate_arguments, run_validate
    ),
    "init": Command("scaffold a pip-installable env plugin", init_arguments, run_init),
    "launch": Command(
        "start an env server through a provider, until Ctrl-C", launch_arguments, run_launch
    ),
    "gc": Command("remove what crashed orchestrators left behind", gc_arguments, run_gc),
    "build": Command("build a container image that serves an env", build_arguments, run_build),
    "export": Command(
        "write what serves an env elsewhere (k8s, a Space)", export_arguments, run_export
    ),
    "keygen": Command(
        "write a new snapshot key (servers that resume each other)", keygen_arguments, run_keygen
    ),
}


def parser() -> Parser:
    """The whole command line: the global flags, and each command's parser with its flags
    from the command's module. `-v` is taken before the command and after it alike."""
    verbosity = Parser(add_help=False)
    verbosity.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log more to stderr, and show the traceback of an error",
    )
    top = Parser(prog="ecotone", description=DESCRIPTION, epilog=EPILOG, parents=[verbosity])
    top.add_argument("--version", action="version", version=f"ecotone {ecotone.__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(
            name, help=command.summary, description=command.summary, parents=[verbosity]
        )
        if command.flags is not None:
            command.flags(p)
    return top


def _one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as the command shows it: one line, `ecotone: warning: ...` (a deprecated
    setting's, say), not Python's two with a source line."""
    print(f"ecotone: warning: {message}", file=file or sys.stderr)


def _wants_traceback(argv: Sequence[str]) -> bool:
    """Whether `-v` was given, looked for before parsing (which may be what fails)."""
    return any(a in ("-v", "--verbose") for a in argv if a != "--")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names (default: `sys.argv[1:]`) and return the exit status: the
    command's own (0 when it went well), 2 for a mistake in what was asked (a flag, a file,
    an env or provider name, a config), 1 for what went wrong at run time (a server's, a
    connection's or a provider's error), 130 for Ctrl-C, 141 when stdout was closed early.
    Every error is one line on stderr (with the traceback too under `-v`)."""
    args_given = list(sys.argv[1:] if argv is None else argv)
    verbose = _wants_traceback(args_given)
    try:
        args = parser().parse_args(args_given)
        logging.basicConfig(
            level=logging.INFO if verbose else logging.WARNING,
            stream=sys.stderr,
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )
        args.verbose = verbose
        warnings.showwarning = _one_line
        status = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # a reader gone is noticed here, not at exit
        return status
    except SystemExit as exc:  # --help and --version, or a command's own
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            silence_stdout()
            return BROKEN_PIPE
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except BaseException as exc:
        return report(exc, verbose)
