"""Connect four over the network: PettingZoo's `connect_four_v3` served by ecotone and played
by remote seats over WebSocket, against the same env played in process through PettingZoo.

    .venv/bin/python bench/multiagent.py --reps 5 --turns 2000 [--out docs/benchmarks.md]

Each rep, in this order (one process each side, on loopback):

* **in process**: `pettingzoo.classic.connect_four_v3.env()` played through PettingZoo's AEC
  loop (`agent_iter`, `last`, `step`; dead steps included), a random legal move per turn
  drawn from the action mask (seeded), a new game (`reset`) when one ends;
* **two seats**: `ecotone serve pettingzoo:classic/connect_four_v3`; the owner's connection
  resets games, and each seat is joined on a connection of its own (the blocking client):
  per turn the seat to move reads its view (`observe`, its action mask) and plays
  (`play`): two round trips;
* **AEC form**: `ecotone.pettingzoo.env(url)` on the same server, played through the same
  PettingZoo loop as in process: per turn one round trip (the move, and the other seat's
  view after it, pipelined).

A turn is a move (dead steps are not counted, but their time is). Reported: turns per
second, the median over reps (min-max), and each remote form's figure as a fraction of the
in-process one measured in the same rep. With --out, the table replaces the section
"## Multi-agent: connect four, remote seats against in process" of that file (or is
appended).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sections import replace_section
from servers import start

import ecotone
import ecotone.pettingzoo

HEADING = "## Multi-agent: connect four, remote seats against in process"
ENV = "pettingzoo:classic/connect_four_v3"


def serve(env: str) -> tuple[subprocess.Popen[bytes], str]:
    return start([sys.executable, "-m", "ecotone", "serve", env])


def aec_loop(env: Any, turns: int, seed: int) -> float:
    """Turns per second of PettingZoo's AEC loop on `env`, random legal moves."""
    rng = np.random.default_rng(seed)
    played = 0
    game = 0
    start = time.perf_counter()
    while played < turns:
        env.reset(seed=seed + game)
        game += 1
        for _ in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            played += 1
    return played / (time.perf_counter() - start)


def in_process(turns: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pettingzoo.classic import connect_four_v3

    env = connect_four_v3.env()
    try:
        return aec_loop(env, turns, seed=1)
    finally:
        env.close()


def two_seats(url: str, turns: int) -> float:
    """Turns per second of two seats, each on its own connection: observe, then play."""
    rng = np.random.default_rng(1)
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open()
        keys = owner.seat_keys()
        seats = {
            "player_0": second.join(keys.keys["player_0"]),
            "player_1": third.join(keys.keys["player_1"]),
        }
        played = 0
        game = 0
        start = time.perf_counter()
        while played < turns:
            owner.reset(seed=1 + game)
            game += 1
            turn: str | None = "player_0"
            while turn is not None:
                mask = seats[turn].observe().result.observation["obs"]["action_mask"]
                move = int(rng.choice(np.flatnonzero(mask)))
                turn = seats[turn].play({"action": move}).turn
                played += 1
        return played / (time.perf_counter() - start)


def aec_form(url: str, turns: int) -> float:
    env = ecotone.pettingzoo.env(url)
    try:
        return aec_loop(env, turns, seed=1)
    finally:
        env.close()


def measure(turns: int) -> dict[str, float]:
    out = {"local": in_process(turns)}
    proc, url = serve(ENV)
    try:
        out["seats"] = two_seats(url, turns)
        out["aec"] = aec_form(url, turns)
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def rate(x: float) -> str:
    return f"{x:,.0f}"


def share(x: float) -> str:
    return f"{x:.3f}"


def render(runs: list[dict[str, float]], reps: int, turns: int) -> str:
    lines = [
        HEADING,
        "",
        f"`bench/multiagent.py --reps {reps} --turns {turns}`, {time.strftime('%Y-%m-%d')}: "
        "PettingZoo's connect four (`connect_four_v3`), random legal moves. In process: "
        "PettingZoo's AEC loop on the env itself. Two seats: `ecotone serve "
        "pettingzoo:classic/connect_four_v3`, each seat joined on its own WebSocket "
        "connection (the blocking client, one process), `observe` then `play` per turn. AEC "
        "form: `ecotone.pettingzoo.env(url)` on that server in the same PettingZoo loop (a "
        "move and the other seat's view in one round trip). Turns per second, median over "
        "reps (min-max); the fraction is of the in-process figure of the same rep.",
        "",
        "| played | turns/s | fraction of in process |",
        "|---|--:|--:|",
        f"| in process (PettingZoo) | {spread([r['local'] for r in runs], rate)} | 1 |",
    ]
    for key, label in (("seats", "two remote seats"), ("aec", "AEC form, one owner")):
        lines.append(
            f"| {label} (WebSocket) | {spread([r[key] for r in runs], rate)} "
            f"| {spread([r[key] / r['local'] for r in runs], share)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    for rep in range(args.reps):
        runs.append(measure(args.turns))
        print(f"rep {rep + 1}/{args.reps}: {runs[-1]}", file=sys.stderr, flush=True)
    section = render(runs, args.reps, args.turns)
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
