"""The `ecotone` command: `main` parses the command line and runs one command, each in a module
of this package (serve.py: serve, mcp; listing.py: list; play.py; collect.py; authoring.py:
validate, init; launch.py: launch, gc, build; export.py; keygen.py). The top layer: nothing
in ecotone imports it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

import ecotone
from ecotone.cli.authoring import init_arguments, run_init, run_validate, validate_arguments
from ecotone.cli.collect import collect_arguments, run_collect
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
from ecotone.kernel import RegistryError
from ecotone.kernel.config import ConfigError
from ecotone.kernel.envspec import EnvDefinitionError

# What `ecotone --help` says ecotone is (the module's docstring is for its readers).
DESCRIPTION = (
    "Serve reinforcement-learning environments over the network: play them, collect "
    "trajectories from them, check them with the conformance suite, and launch, build or "
    "export their servers."
)

# Each command's function: the parsed arguments in, the exit status out.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": run_serve,
    "mcp": run_mcp,
    "list": run_list,
    "play": run_play,
    "collect": run_collect,
    "validate": run_validate,
    "init": run_init,
    "launch": run_launch,
    "gc": run_gc,
    "build": run_build,
    "export": run_export,
    "keygen": run_keygen,
}


def _parser() -> argparse.ArgumentParser:
    """The whole command line: the global flags, and each command's parser (listed in
    `--help` in this order) with its flags from the command's module."""
    parser = argparse.ArgumentParser(prog="ecotone", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ecotone {ecotone.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_arguments(sub.add_parser("serve", help="serve an environment"))
    mcp_arguments(
        sub.add_parser(
            "mcp",
            help="serve an env as an MCP server on stdin/stdout (what an MCP client's config runs)",
        )
    )
    sub.add_parser("list", help="installed environments, transports and providers")
    collect_arguments(
        sub.add_parser(
            "collect",
            help="run a policy over an env's tasks and write the trajectories, with a summary",
        )
    )
    play_arguments(
        sub.add_parser("play", help="play a few steps against an env name or a server URL")
    )
    validate_arguments(
        sub.add_parser(
            "validate",
            help="run the conformance suite against an env (in process) or a running server",
        )
    )
    launch_arguments(
        sub.add_parser(
            "launch",
            help="start an env server through a provider (process, podman, docker), print its "
            "URL, stop it on Ctrl-C",
        )
    )
    gc_arguments(
        sub.add_parser(
            "gc", help="remove servers, containers and folders that crashed orchestrators left"
        )
    )
    build_arguments(
        sub.add_parser(
            "build", help="build a container image that serves an env (installed offline)"
        )
    )
    export_arguments(
        sub.add_parser(
            "export", help="write what serves an env elsewhere (Kubernetes, a Hugging Face Space)"
        )
    )
    init_arguments(
        sub.add_parser("init", help="scaffold a pip-installable env plugin distribution")
    )
    keygen_arguments(
        sub.add_parser("keygen", help="write a new snapshot key (servers that resume each other)")
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names (default: `sys.argv[1:]`) and return the exit status:
    the command's own (0 when it went well), 2 for a mistake in what was asked (a config,
    an env or provider name, a flag's value), 1 for what went wrong at run time (a server's,
    a connection's or a provider's error), 130 for Ctrl-C. Flags argparse cannot parse exit
    with 2 through SystemExit, with the usage on stderr."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except (ConfigError, RegistryError, EnvDefinitionError, ValueError) as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 2
    except (ecotone.EcotoneError, ecotone.ProviderError) as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
