"""An env author's commands: `ecotone init NAME` scaffolds an env plugin distribution, and
`ecotone validate` runs the conformance suite against an env in process or a running server."""

from __future__ import annotations

import argparse
import json
import shlex
import sys


def init_arguments(p: argparse.ArgumentParser) -> None:
    """`init`'s flags: the env's name and the folder."""
    p.add_argument("name", help="env name: lower-case letters, digits, '-' or '_'")
    p.add_argument("--dir", help="where to write it (default: ./NAME)")


def run_init(args: argparse.Namespace) -> int:
    """Write the distribution, say what to run next; returns 0 (a bad name or a folder in the
    way raises, for `main` to answer)."""
    from ecotone.scaffold import scaffold

    target = scaffold(args.name, args.dir)
    print(f"wrote {target}/: the `{args.name}` env as a distribution. Next:")
    for line in next_steps(str(target), args.name):
        print(f"  {line}")
    return 0


def next_steps(target: str, name: str) -> list[str]:
    """What `init` says to run next, each command's comment in one column."""
    steps = [
        (f"cd {shlex.quote(target)} && pip install -e '.[test]'", "install it, with pytest"),
        (f"ecotone validate {name}", "the conformance suite"),
        (f"ecotone serve {name}", "ws://127.0.0.1:8000"),
        ("pytest", "its own tests"),
    ]
    width = max(len(command) for command, _ in steps)
    return [f"{command:<{width}}  # {comment}" for command, comment in steps]


def validate_arguments(p: argparse.ArgumentParser) -> None:
    """`validate`'s flags: the env or the server, the episodes, and which checks."""
    p.add_argument(
        "env", nargs="?", help="env name; with --url, which of the server's envs (optional)"
    )
    p.add_argument(
        "--url", help="check the server at this URL (ws://, http://, tcp://, openenv+http://...)"
    )
    p.add_argument(
        "--reset-options", default="{}", metavar="JSON", help="options for every reset (object)"
    )
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--steps", type=int, default=10, help="steps of the short episodes (10)")
    p.add_argument(
        "--max-episode-steps",
        type=int,
        default=500,
        help="step budget for playing an episode to its end (500)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per call (30)")
    p.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this check; repeat for several (a wrong name is answered with the list)",
    )
    p.add_argument(
        "--protocol",
        action="store_true",
        default=None,
        help="also run the protocol checks in process (always run with --url; "
        "serve the `probe` env to check what happens inside sessions)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run_validate(args: argparse.Namespace) -> int:
    """Print the report (text, or JSON with --json). Returns 0 when every check passed, 1 when
    one failed, 2 when the target cannot be checked at all; malformed flags raise ValueError."""
    if args.env is None and args.url is None:
        raise ValueError("validate: name an env, or give --url of a running server")
    try:
        options = json.loads(args.reset_options)
    except ValueError:
        raise ValueError(f"--reset-options is not JSON: {args.reset_options!r}") from None
    if not isinstance(options, dict):
        raise ValueError(f"--reset-options must be a JSON object, got {args.reset_options!r}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    from ecotone.conformance import CHECKS, PROTOCOL_CHECKS, TargetError
    from ecotone.conformance import run as run_conformance

    known = [*CHECKS, *PROTOCOL_CHECKS]
    unknown = [name for name in args.check if name not in known]
    if unknown:
        raise ValueError(f"no check named {unknown[0]!r} (checks: {', '.join(known)})")
    try:
        report = run_conformance(
            args.env,
            url=args.url,
            checks=args.check or None,
            seeds=seeds,
            steps=args.steps,
            max_episode_steps=args.max_episode_steps,
            reset_options=options,
            timeout=args.timeout,
            protocol=args.protocol,
        )
    except TargetError as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.text())
    return 0 if report.ok else 1
