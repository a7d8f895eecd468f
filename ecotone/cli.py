"""`ecotone ...`: serve, list, play. Nothing imports this module."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

import trio

import ecotone
from ecotone.kernel import Registry, RegistryError
from ecotone.kernel.config import ConfigError, ServerConfig, load
from ecotone.kernel.envspec import EnvDefinitionError
from ecotone.server import BackgroundServer, build_kernel, serve


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ecotone", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ecotone {ecotone.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="serve an environment")
    p.add_argument("env", nargs="?", help="environment name (or `env` in the config)")
    p.add_argument("--transport", help="transport name (default: websocket)")
    p.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--config", help="config file (default: ./ecotone.toml if present)")
    p.add_argument("--max-sessions", type=int, help="open sessions allowed")
    p.add_argument("--idle-timeout", type=float, help="seconds before an idle session closes")

    sub.add_parser("list", help="installed environments, transports and providers")

    p = sub.add_parser("play", help="play a few steps against an env name or a server URL")
    p.add_argument("target", help="env name (served here for the game) or ws:// URL")
    p.add_argument("--steps", type=int, default=5, help="steps to play (default 5)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--action",
        action="append",
        default=[],
        help="JSON action; repeat for several (default: a built-in one per env)",
    )
    return parser


DEMO_ACTIONS: dict[str, list[dict[str, Any]]] = {
    "echo": [{"message": m} for m in ("hello", "ecotone", "over the wire", "bye", "")],
    "counter": [{"delta": d} for d in (1, 2, 3, -1, 5)],
}


def _cmd_serve(args: argparse.Namespace) -> int:
    overrides = {
        "env": args.env,
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "limits": {"max_sessions": args.max_sessions, "idle_timeout": args.idle_timeout},
    }
    config = load(args.config, overrides=overrides)
    registry = Registry.discover()
    build_kernel(config, registry)  # an unknown env or transport fails here, before the loop
    transport = registry.transport(config.transport)
    if not getattr(transport, "listens", True):
        raise ValueError(f"transport {config.transport!r} cannot serve: {transport.description}")

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                await serve(config, registry=registry, task_status=task_status)
                nursery.cancel_scope.cancel()  # the transport is done (stdio: stdin closed)

            url = await nursery.start(run)
            print(
                f"ecotone: serving {config.env!r} over {config.transport} at {url}",
                file=sys.stderr,
                flush=True,
            )
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    print(
                        f"ecotone: {signal.Signals(signum).name}, shutting down",
                        file=sys.stderr,
                        flush=True,
                    )
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    registry = Registry.discover()
    for title, entries in (
        ("environments", registry.environments()),
        ("transports", registry.transports()),
        ("providers", registry.providers()),
    ):
        print(f"{title}:")
        if not entries:
            print("  (none installed)")
        for name, entry in sorted(entries.items()):
            doc = getattr(entry.value, "description", "") or (entry.value.__doc__ or "")
            doc = doc.strip().splitlines()[0] if doc.strip() else ""
            print(f"  {name:<12} from {entry.distribution:<16} {doc}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    target: str = args.target
    server: BackgroundServer | None = None
    if "://" not in target:
        server = BackgroundServer(ServerConfig(env=target, port=0)).start()
        url = server.url
        print(f"serving {target!r} at {url}")
    else:
        url = target
    try:
        with ecotone.connect(url) as env:
            actions = [json.loads(a) for a in args.action] or DEMO_ACTIONS.get(env.env, [])
            if not actions:
                print(f"no demo actions for env {env.env!r}: pass --action JSON", file=sys.stderr)
                return 2
            print(f"session {env.session_id} on env {env.env!r}")
            result = env.reset(seed=args.seed)
            print(f"reset  -> {json.dumps(result.observation)}")
            total = 0.0
            for i in range(args.steps):
                action = actions[i % len(actions)]
                result = env.step(action)
                total += result.reward or 0.0
                print(f"step {i + 1} {json.dumps(action)} -> {json.dumps(result.observation)}")
                if result.finished:
                    print("episode " + ("done" if result.done else "truncated"))
                    break
            print(f"state  -> {json.dumps(env.state())}")
            print(f"return {total:g}")
    finally:
        if server is not None:
            server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    commands = {"serve": _cmd_serve, "list": _cmd_list, "play": _cmd_play}
    try:
        return commands[args.command](args)
    except (ConfigError, RegistryError, EnvDefinitionError, ValueError) as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 2
    except ecotone.EcotoneError as exc:
        print(f"ecotone: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
