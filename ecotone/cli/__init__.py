"""`ecotone ...`: serve, list, play, collect, validate, export. Nothing imports this module."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import Any

import trio

import ecotone
from ecotone.cli.collect import collect_arguments, run_collect
from ecotone.cli.listing import run_list
from ecotone.cli.play import play_arguments, run_play
from ecotone.cli.serve import mcp_arguments, run_mcp, run_serve, serve_arguments
from ecotone.kernel import Registry, RegistryError
from ecotone.kernel.config import ConfigError, load
from ecotone.kernel.envspec import EnvDefinitionError
from ecotone.providers.engines import ENGINES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ecotone", description=__doc__)
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

    p = sub.add_parser(
        "validate",
        help="run the conformance suite against an env (in process) or a running server",
    )
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

    p = sub.add_parser(
        "launch",
        help="start an env server through a provider (process, podman, docker), print its "
        "URL, stop it on Ctrl-C",
    )
    p.add_argument("env", nargs="?", help="environment name (or `env` in the config)")
    p.add_argument("--provider", help="provider name (default: [launch] provider, or process)")
    p.add_argument("--transport", help="websocket, http, tcp or unix (default: websocket)")
    p.add_argument(
        "--image",
        help="container image (default: localhost/ecotone-ENV:latest, as `ecotone build` names it)",
    )
    p.add_argument("--config", help="config file (default: ./ecotone.toml if present)")
    p.add_argument("--ready-timeout", type=float, help="seconds for the whole start (60)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="provider option, e.g. sandbox=true (repeatable)",
    )
    p.add_argument(
        "--address",
        help="the cluster to start on (the ray provider: ray://HOST:PORT, or HOST:PORT); "
        "the same as --option address=...",
    )

    p = sub.add_parser(
        "gc", help="remove servers, containers and folders that crashed orchestrators left"
    )
    p.add_argument(
        "--provider", action="append", default=[], help="only this provider (repeatable)"
    )

    p = sub.add_parser(
        "build", help="build a container image that serves an env (installed offline)"
    )
    p.add_argument("env", help="environment name (`counter`, `gymnasium:CartPole-v1`)")
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument(
        "--base", help="image to build on, already in the engine (localhost/ecotone-base:bookworm)"
    )
    p.add_argument("--tag", help="image name (default: localhost/ecotone-ENV:latest)")
    p.add_argument("--python", metavar="X.Y", help="the base's Python (default: from the base)")
    p.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        metavar="REQ",
        help="another package for the image, a pip requirement (repeatable)",
    )

    p = sub.add_parser(
        "export", help="write what serves an env elsewhere (Kubernetes, a Hugging Face Space)"
    )
    export = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    sp = export.add_parser(
        "space", help="a Hugging Face Space folder (Docker SDK) serving ENV with its web UI"
    )
    sp.add_argument("env", help="environment name")
    sp.add_argument("dir", help="the folder to write (new, or empty)")
    sp.add_argument("--base", help="the image to build on (python:3.11-slim)")
    sp.add_argument("--python", help="the base image's Python as X.Y (3.11)")
    sp.add_argument("--title", help="the Space's title (ecotone ENV)")
    k = export.add_parser(
        "k8s", help="a Secret (the token), a hardened Pod and a Service serving ENV, as YAML"
    )
    k.add_argument("env", help="environment name")
    k.add_argument("--image", required=True, help="the image `ecotone build` made")
    k.add_argument("--name", help="the objects' name (default: ecotone-ENV)")
    k.add_argument("--port", type=int, help="the server's port (8000)")
    k.add_argument("--token", help="the server's token (default: a new random one)")
    k.add_argument("--cpu", default="1", help="CPU request and limit (1)")
    k.add_argument("--memory", default="512Mi", help="memory request and limit (512Mi)")
    k.add_argument("--out", help="write to this file (default: stdout)")

    p = sub.add_parser("init", help="scaffold a pip-installable env plugin distribution")
    p.add_argument("name", help="env name: lower-case letters, digits, '-' or '_'")
    p.add_argument("--dir", help="where to write it (default: ./NAME)")
    return parser


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--option must be KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # a bare string: user=1000:1000


def _cmd_launch(args: argparse.Namespace) -> int:
    from ecotone.launcher.compose import make_spec, provider_for
    from ecotone.launcher.config import launch_config

    config = load(args.config, overrides={"env": args.env})
    if not config.env:
        raise ValueError("launch: name an environment (ecotone launch ENV) or set `env`")
    settings = launch_config(config.launch)
    provider = provider_for(args.provider or settings.provider)
    options = dict(settings.options)
    options.update(_option(text) for text in args.option)
    if args.address:
        options["address"] = args.address
    spec = make_spec(
        config.env,
        transport=args.transport or settings.transport,
        image=args.image or settings.image,
        resources=settings.resources,
        ready_timeout=args.ready_timeout or settings.ready_timeout,
        **options,
    )

    async def main() -> int:
        # Signals are watched from the start on: Ctrl-C (or SIGTERM, or SIGHUP when the
        # terminal goes) during a slow start cancels it, and the provider removes what it made.
        stopping = trio.Event()
        starting = trio.CancelScope()

        async def watch(signals: Any) -> None:
            async for signum in signals:
                print(
                    f"ecotone: {signal.Signals(signum).name}, stopping", file=sys.stderr, flush=True
                )
                starting.cancel()
                stopping.set()
                return

        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, signals)
                handle = None
                failed: Exception | None = None
                with starting:
                    try:
                        handle = await provider.start(spec)
                    except Exception as exc:  # raised below, outside the nursery's group
                        failed = exc
                if handle is None:  # failed, or interrupted
                    nursery.cancel_scope.cancel()
                    return_code = 130
                else:
                    return_code = 0
                    try:
                        print(handle.url, flush=True)
                        print(
                            f"ecotone: {config.env!r} running on {provider.name} ({handle.id}) "
                            f"at {handle.url}; Ctrl-C stops it",
                            file=sys.stderr,
                            flush=True,
                        )
                        await stopping.wait()
                    finally:
                        with trio.CancelScope(shield=True):
                            await handle.stop()
                        nursery.cancel_scope.cancel()
        if failed is not None:
            raise failed
        if return_code == 130:
            print("ecotone: start interrupted; nothing left running", file=sys.stderr)
        return return_code

    return trio.run(main)


def _cmd_gc(args: argparse.Namespace) -> int:
    from ecotone.providers.contract import EngineUnavailable

    providers = Registry.discover().providers()
    names = args.provider or sorted(providers)
    unknown = [name for name in names if name not in providers]
    if unknown:
        raise ValueError(f"unknown provider {unknown[0]!r}; installed: {', '.join(providers)}")

    async def main() -> int:
        removed = 0
        for name in names:
            try:
                found = await providers[name].value.gc()
            except EngineUnavailable as exc:
                print(f"{name}: skipped ({exc})")
                continue
            for thing in found:
                print(f"{name}: removed {thing}")
            removed += len(found)
        print(f"removed {removed} leftover{'s' if removed != 1 else ''}")
        return 0

    return trio.run(main)


def _cmd_export(args: argparse.Namespace) -> int:
    if args.what == "space":
        return _export_space(args)
    from ecotone.providers.contract import SERVE_PORT
    from ecotone.providers.k8s_manifests import manifests, render

    objects = manifests(
        args.env,
        image=args.image,
        name=args.name,
        port=args.port or SERVE_PORT,
        token=args.token,
        cpu=args.cpu,
        memory=args.memory,
    )
    text = render(objects)
    secret, _, service = objects
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(
            f"ecotone: wrote {args.out}: kubectl apply -f {shlex.quote(args.out)}", file=sys.stderr
        )
    else:
        sys.stdout.write(text)
    print(
        f"ecotone: the server's token is in the Secret {secret['metadata']['name']!r}; clients "
        f"reach the Service {service['metadata']['name']!r} on port "
        f"{service['spec']['ports'][0]['port']} with it",
        file=sys.stderr,
    )
    return 0


def _export_space(args: argparse.Namespace) -> int:
    from ecotone.launcher.space import DEFAULT_SPACE_BASE, SPACE_PORT, export_space

    folder = export_space(
        args.env,
        args.dir,
        base=args.base or DEFAULT_SPACE_BASE,
        python_version=args.python or "3.11",
        title=args.title,
        progress=lambda message: print(f"ecotone: {message}", file=sys.stderr),
    )
    print(
        f"ecotone: wrote the Space {folder}: push it to a Space of the Docker SDK (its page "
        f"serves the web UI on port {SPACE_PORT}); set the secret ECOTONE_AUTH_TOKEN there",
        file=sys.stderr,
    )
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from ecotone.launcher.images import DEFAULT_BASE, build_image

    tag = build_image(
        args.env,
        engine=args.engine,
        base=args.base or DEFAULT_BASE,
        tag=args.tag,
        python_version=args.python,
        extra_requirements=args.extra,
        progress=lambda line: print(f"ecotone: {line}", file=sys.stderr, flush=True),
    )
    print(tag)
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    from ecotone.scaffold import scaffold

    target = scaffold(args.name, args.dir)
    print(f"wrote {target}/: the `{args.name}` env as a distribution. Next:")
    print(f"  cd {target} && pip install -e '.[test]'")
    print(f"  ecotone validate {args.name}    # the conformance suite")
    print(f"  ecotone serve {args.name}       # ws://127.0.0.1:8000")
    print("  pytest                          # its own tests")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    commands = {
        "serve": run_serve,
        "mcp": run_mcp,
        "list": run_list,
        "play": run_play,
        "collect": run_collect,
        "validate": _cmd_validate,
        "init": _cmd_init,
        "launch": _cmd_launch,
        "gc": _cmd_gc,
        "build": _cmd_build,
        "export": _cmd_export,
    }
    try:
        return commands[args.command](args)
    except (ConfigError, RegistryError, EnvDefinitionError, ValueError) as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 2
    except (ecotone.EcotoneError, ecotone.ProviderError) as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
