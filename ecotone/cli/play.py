"""`ecotone play TARGET`: a few steps of an env, printed, against a server URL or against an
env name served in this process for the game (with its web UI)."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

import ecotone
from ecotone.kernel import Registry
from ecotone.kernel.config import ServerConfig
from ecotone.serving import BackgroundServer, web_url

# What `play` sends to the bundled envs when no --action is given, in turn.
DEMO_ACTIONS: dict[str, list[dict[str, Any]]] = {
    "echo": [{"message": m} for m in ("hello", "ecotone", "over the wire", "bye", "")],
    "counter": [{"delta": d} for d in (1, 2, 3, -1, 5)],
}


def play_arguments(p: argparse.ArgumentParser) -> None:
    """`play`'s flags: the target, how many steps, the reset's seed and the actions."""
    p.add_argument(
        "target", help="env name (served here for the game) or a server URL (ws://, http://...)"
    )
    p.add_argument("--steps", type=int, default=5, help="steps to play (default 5)")
    p.add_argument("--seed", type=int, default=None, help="the reset's seed (default: none)")
    p.add_argument(
        "--action",
        action="append",
        default=[],
        help="JSON action; repeat for several (default: a built-in one per env)",
    )


def run_play(args: argparse.Namespace) -> int:
    """One reset, then up to `--steps` steps (the actions in turn) until the episode ends,
    then the state and the return; returns 0. An unknown env, an `--action` that is not JSON
    or that the env refuses, or no action to send raise, for `main` to answer; the server
    started here is stopped on every way out."""
    target: str = args.target
    actions = [_action(text) for text in args.action]
    server: BackgroundServer | None = None
    if "://" not in target and not target.startswith("stdio:"):
        Registry.discover().env_spec(target)  # an unknown env: a RegistryError naming it
        # Over http, which also serves the web UI and ecotone's WebSocket at `/`.
        server = BackgroundServer(ServerConfig(env=target, port=0, web=True)).start()
        url = "ws://" + server.url.split("://", 1)[1]
        print(f"serving {target!r} at {url}")
        print(
            f"web UI: {web_url(server.url)} (open it while the server runs; "
            f"ecotone serve {shlex.quote(target)} --web keeps it up)",
            flush=True,
        )
    else:
        url = target
    try:
        with ecotone.connect(url) as env:
            actions = actions or DEMO_ACTIONS.get(env.env, [])
            if not actions:
                raise ValueError(f"no demo actions for env {env.env!r}: pass --action JSON")
            print(f"session {env.session_id} on env {env.env!r}")
            result = env.reset(seed=args.seed)
            print(f"reset  -> {json.dumps(result.observation)}")
            total = 0.0
            for i in range(args.steps):
                action = actions[i % len(actions)]
                try:
                    result = env.step(action)
                except ecotone.InvalidActionError as exc:
                    raise ValueError(f"--action {json.dumps(action)}: {exc.message}") from exc
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


def _action(text: str) -> Any:
    """`--action TEXT` as JSON; a ValueError naming the flag when it is not."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--action {text!r} is not JSON: {exc}") from None
