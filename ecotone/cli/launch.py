"""Running envs through providers: `ecotone launch` starts an env server through one (process,
podman, docker, ray, kubernetes) and stops it on a signal, `ecotone gc` removes what crashed
orchestrators left, `ecotone build` builds the image the container providers run."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

import trio

from ecotone.kernel import Registry
from ecotone.kernel.config import load
from ecotone.providers.engines import ENGINES

if TYPE_CHECKING:
    from ecotone.kernel.registry import Entry
    from ecotone.providers.contract import LaunchSpec, Provider

# The exit status of a start that a signal interrupted (a shell's for SIGINT).
INTERRUPTED = 130


def launch_arguments(p: argparse.ArgumentParser) -> None:
    """`launch`'s flags: the env, the provider and what it is given (`[launch]` otherwise)."""
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


def gc_arguments(p: argparse.ArgumentParser) -> None:
    """`gc`'s flags: which providers (all installed ones by default)."""
    p.add_argument(
        "--provider", action="append", default=[], help="only this provider (repeatable)"
    )


def build_arguments(p: argparse.ArgumentParser) -> None:
    """`build`'s flags: the env, the engine (required), the base image, the tag, the extras."""
    p.add_argument("env", help="environment name (`counter`, `gymnasium:CartPole-v1`)")
    p.add_argument(
        "--engine", required=True, choices=ENGINES, help="the container engine to build in"
    )
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


def _option(text: str) -> tuple[str, Any]:
    """`--option KEY=JSON` as a provider option, VALUE the string if it is not JSON. Raises
    ValueError for an item without `=` or without a key."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--option must be KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # a bare string: user=1000:1000


def run_launch(args: argparse.Namespace) -> int:
    """Start the server, print its URL on stdout, wait for SIGINT, SIGTERM or SIGHUP, stop it.
    Returns 0, or 130 when a signal interrupted the start; a failed start raises the
    provider's error, for `main` to answer."""
    from ecotone.launcher.compose import make_spec, provider_for
    from ecotone.launcher.config import launch_config

    config = load(args.config, overrides={"env": args.env})
    if not config.env:
        raise ValueError("launch: name an environment (ecotone launch ENV) or set `env`")
    # The env must be one installed here, as for `ecotone build`: an unknown name is this
    # RegistryError naming it, not a server that fails to start somewhere.
    Registry.discover().env_spec(config.env)
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
    return trio.run(_run_until_stopped, provider, spec, config.env)


async def _run_until_stopped(provider: Provider, spec: LaunchSpec, env: str) -> int:
    """Start `spec` on `provider`, and stop what started at the first signal."""
    # Signals are watched from the start on: Ctrl-C (or SIGTERM, or SIGHUP when the
    # terminal goes) during a slow start cancels it, and the provider removes what it made.
    stopping = trio.Event()
    starting = trio.CancelScope()

    async def watch(signals: Any) -> None:
        async for signum in signals:
            print(f"ecotone: {signal.Signals(signum).name}, stopping", file=sys.stderr, flush=True)
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
                return_code = INTERRUPTED
            else:
                return_code = 0
                try:
                    print(handle.url, flush=True)
                    print(
                        f"ecotone: {env!r} running on {provider.name} ({handle.id}) "
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
    if return_code == INTERRUPTED:
        print("ecotone: start interrupted; nothing left running", file=sys.stderr)
    return return_code


def run_gc(args: argparse.Namespace) -> int:
    """Each provider's `gc`, one line per thing removed and a total; a provider whose engine
    is not reachable is skipped with the reason. Returns 0; an unknown provider raises
    ValueError before anything is removed."""
    providers = Registry.discover().providers()
    names: list[str] = args.provider or sorted(providers)
    unknown = [name for name in names if name not in providers]
    if unknown:
        raise ValueError(f"unknown provider {unknown[0]!r}; installed: {', '.join(providers)}")
    return trio.run(_collect_garbage, providers, names)


async def _collect_garbage(providers: dict[str, Entry], names: list[str]) -> int:
    """`gc` on each provider of `names`, said as it goes; returns 0."""
    from ecotone.providers.contract import EngineUnavailable

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


def run_build(args: argparse.Namespace) -> int:
    """Build the image, the engine's progress on stderr, its tag on stdout; returns 0."""
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
