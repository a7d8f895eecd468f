"""Snapshots, restores and forks: their size and time per bundled env, and a fork of N
sessions against N fresh `open` + `reset` of the same env.

    .venv/bin/python bench/snapshots.py --reps 5 [--out docs/benchmarks.md]

Each rep starts `ecotone serve ENV` for every env below on a free loopback port (one process
each, as a user runs them) and, on one WebSocket connection with the blocking client:

* plays a seeded episode a few steps in, then times `snapshot()` (the env saves itself, the
  server keeps it), `export_snapshot` (sealed bytes) and `restore` (by id), each over
  `--calls` calls: the median call is the rep's figure;
* for counter, CartPole and coding: times `fork(N)` (one request: N sessions holding the
  episode) against N `open` + `reset` of fresh sessions one after another on the same
  connection, then closes them.

Reported: the median over reps, with the min-max. With --out, the tables replace the section
"## Snapshots, restores and forks" of that file (or are appended).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sections import replace_section
from servers import start

import ecotone

HEADING = "## Snapshots, restores and forks"

ENVS: list[tuple[str, Callable[[dict[str, Any], int], Any]]] = [
    ("counter", lambda obs, i: {"delta": 1}),
    ("echo", lambda obs, i: {"message": "hello"}),
    ("gridworld", lambda obs, i: {"move": "right" if i % 2 else "down"}),
    ("wordle", lambda obs, i: {"guess": ("crane", "slate", "about")[i % 3]}),
    ("chess", lambda obs, i: {"move": obs["legal_moves"][0]}),
    ("gymnasium:CartPole-v1", lambda obs, i: {"action": i % 2}),
    ("coding", lambda obs, i: {"code": "print(1)\n"}),
]
"""Each env with the action it takes at step i after observation `obs` (a few steps are
played before the snapshot)."""

FORKED = {"counter": 64, "gymnasium:CartPole-v1": 64, "coding": 8}
"""The envs whose forks are timed, and how many sessions a fork makes."""


def serve(env: str) -> tuple[subprocess.Popen[bytes], str]:
    return start([sys.executable, "-m", "ecotone", "serve", env])


def timed(fn: Callable[[], Any], calls: int) -> float:
    """The median seconds of `calls` calls of `fn`."""
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def measure(
    env_name: str, action: Callable[[dict[str, Any], int], Any], calls: int
) -> dict[str, float]:
    proc, url = serve(env_name)
    try:
        with ecotone.connect(url, timeout=120) as env:
            result = env.reset(seed=1)
            for i in range(3):
                result = env.step(action(result.observation, i))
                if result.finished:
                    result = env.reset(seed=1)
            snap = env.snapshot()
            out = {
                "size": float(snap.size),
                "snapshot": timed(lambda: env.drop_snapshot(env.snapshot()), calls),
                "export": timed(lambda: env.export_snapshot(snap), calls),
                "restore": timed(lambda: env.restore(snap), calls),
                "blob": float(len(env.export_snapshot(snap))),
            }
            n = FORKED.get(env_name)
            if n is not None:

                def fork() -> None:
                    for each in env.fork(n):
                        each.close()

                out["fork"] = timed(fork, max(3, calls // 10))

                def fresh() -> None:
                    made = []
                    for _ in range(n):
                        made.append(env.connection.open())
                        made[-1].reset(seed=1)
                    for each in made:
                        each.close()

                out["fresh"] = timed(fresh, max(3, calls // 10))
            return out
    finally:
        proc.terminate()
        proc.wait(30)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def render(results: dict[str, list[dict[str, float]]], reps: int, calls: int) -> str:
    lines = [
        HEADING,
        "",
        f"`bench/snapshots.py --reps {reps} --calls {calls}`, {time.strftime('%Y-%m-%d')}: one "
        "server process per env on loopback, the blocking client over WebSocket (JSON). "
        "Median over reps (min-max) of each rep's median call, in microseconds; sizes in "
        "bytes (the store's count: the env's state, its last observation, a rubric's turns; "
        "the export adds the sealed envelope and the episode's bookkeeping). The snapshot "
        "column times a snapshot and its drop (two round trips).",
        "",
        "| env | size | exported | snapshot + drop | export | restore |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, runs in results.items():
        lines.append(
            f"| {name} | {statistics.median(r['size'] for r in runs):,.0f} "
            f"| {statistics.median(r['blob'] for r in runs):,.0f} "
            f"| {spread([r['snapshot'] for r in runs], us)} "
            f"| {spread([r['export'] for r in runs], us)} "
            f"| {spread([r['restore'] for r in runs], us)} |"
        )
    lines += [
        "",
        "A fork of N sessions (one request) against N fresh sessions opened and reset one "
        "after another on the same connection (2N round trips), microseconds, closes "
        "included in both:",
        "",
        "| env | N | fork(N) | N x (open + reset) | fresh / fork |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, runs in results.items():
        if "fork" not in runs[0]:
            continue
        ratio = [r["fresh"] / r["fork"] for r in runs]
        lines.append(
            f"| {name} | {FORKED[name]} | {spread([r['fork'] for r in runs], us)} "
            f"| {spread([r['fresh'] for r in runs], us)} "
            f"| {spread(ratio, lambda x: f'{x:.1f}x')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    envs = [(name, a) for name, a in ENVS if name != "coding" or shutil.which("bwrap")]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in envs}
    for rep in range(args.reps):
        for name, action in envs:
            results[name].append(measure(name, action, args.calls))
            print(f"rep {rep + 1}/{args.reps} {name}: done", file=sys.stderr, flush=True)
    section = render(results, args.reps, args.calls)
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
