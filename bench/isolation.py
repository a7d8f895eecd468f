"""Process isolation's cost: a step, and a session's open, of `counter` served in the server's
process against each session's env in a process of its own (`serve --isolate`).

    .venv/bin/python bench/isolation.py --reps 5 [--out docs/benchmarks.md]

Each rep starts `ecotone serve counter` and `ecotone serve counter --isolate` on free loopback
ports (a process each, as a user runs them) and, with the blocking client over one WebSocket
connection to each (JSON), one session each, measures the two in alternating blocks, so that
whatever else the machine runs meanwhile weighs on both alike:

* a step: `--blocks` blocks of `--steps` back-to-back steps on each server in turn (after
  `--warmup` steps each); a block's figure is its mean step;
* an open: `--blocks` blocks of `--opens` open + reset + close of a new session on each
  server in turn (in-process: a new env instance; isolated: a fork of the env's zygote, the
  env built in it, and the process reaped); a block's figure is its median.

A rep's figures are the medians over its blocks, and its ratio the median of the blocks'
isolated / in-process ratios (each pair measured back to back). Reported: the median over
reps (min-max). With --out, the table replaces the section "## Process isolation" of that file
(or is appended).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sections import replace_section
from servers import start

import ecotone

HEADING = "## Process isolation"
MODES = {"in-process": (), "isolated": ("--isolate",)}
"""Each way of serving, and its flags."""


def serve(flags: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], str]:
    return start([sys.executable, "-m", "ecotone", "serve", "counter", *flags])


def steps_block(env: Any, steps: int) -> float:
    """The mean seconds of `steps` back-to-back steps."""
    action = {"delta": 1}
    start = time.perf_counter()
    for _ in range(steps):
        env.step(action)
    return (time.perf_counter() - start) / steps


def opens_block(conn: Any, opens: int) -> float:
    """The median seconds of `opens` open + reset + close of a new session."""
    cycles = []
    for _ in range(opens):
        start = time.perf_counter()
        session = conn.open()
        session.reset(seed=1)
        session.close()
        cycles.append(time.perf_counter() - start)
    return statistics.median(cycles)


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One rep: each mode's step and open (seconds, medians over blocks), and their ratios
    (isolated / in-process, the median over pairs of blocks)."""
    servers = {mode: serve(flags) for mode, flags in MODES.items()}
    try:
        conns = {mode: ecotone.Connection(url) for mode, (_, url) in servers.items()}
        envs = {mode: conn.open() for mode, conn in conns.items()}
        for env in envs.values():
            env.reset(seed=1)
            steps_block(env, args.warmup)
        blocks: dict[str, dict[str, list[float]]] = {m: {"step": [], "open": []} for m in MODES}
        for _ in range(args.blocks):
            for mode in MODES:
                blocks[mode]["step"].append(steps_block(envs[mode], args.steps))
            for mode in MODES:
                blocks[mode]["open"].append(opens_block(conns[mode], args.opens))
        for conn in conns.values():
            conn.close()
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    out = {m: {k: statistics.median(v) for k, v in kinds.items()} for m, kinds in blocks.items()}
    inside, apart = blocks["in-process"], blocks["isolated"]
    out["ratio"] = {
        key: statistics.median(a / b for a, b in zip(apart[key], inside[key], strict=True))
        for key in ("step", "open")
    }
    return out


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def spread(values: list[float], fmt: str = "{:,.0f}", scale: float = 1e6) -> str:
    shown = [fmt.format(v * scale) for v in (statistics.median(values), min(values), max(values))]
    return f"{shown[0]} ({shown[1]}-{shown[2]})"


def render(runs: list[dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        HEADING,
        "",
        f"`bench/isolation.py --reps {args.reps} --blocks {args.blocks} --steps {args.steps} "
        f"--opens {args.opens}`, {time.strftime('%Y-%m-%d')}: `ecotone serve counter` and "
        "`ecotone serve counter --isolate` (each session's env in a process of its own, "
        "forked by the env's zygote) side by side on loopback, the blocking client over a "
        "WebSocket connection to each (JSON), measured in alternating blocks so that what "
        "else the machine runs weighs on both alike. A step: the mean of a block of "
        "back-to-back steps of one session. An open: open + reset + close of a new session, "
        "a block's median (isolated: a fork, the env built in the child, the child reaped "
        "before the close is answered). Each rep's figure is the median over its blocks, and "
        "its ratio the median of the isolated / in-process ratios of blocks measured back to "
        "back; median over reps (min-max), microseconds. The machine's load average "
        f"(1 min, {os.cpu_count()} CPUs): {args.load[0]:.1f} at the start, "
        f"{args.load[1]:.1f} at the end.",
        "",
        "| | in-process | isolated | isolated / in-process |",
        "|---|--:|--:|--:|",
    ]
    for key, label in (("step", "step"), ("open", "open + reset + close")):
        inside = [run["in-process"][key] for run in runs]
        apart = [run["isolated"][key] for run in runs]
        ratios = [run["ratio"][key] for run in runs]
        lines.append(
            f"| {label} | {spread(inside)} | {spread(apart)} | {spread(ratios, '{:.2f}x', 1.0)} |"
        )
    lines += [
        "",
        "counter is an inline env: in the server's process its step is answered on the event "
        "loop with no hop at all, so the isolated step's extra is the whole cost of the "
        "crossing (the action and the observation as MessagePack over a unix socket pair, "
        "the worker's wake-up and the server's wait for its answer). An env whose step "
        "costs more than that, or that would run in a worker thread anyway, pays "
        "proportionally less.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--opens", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: list[dict[str, dict[str, float]]] = []
    started = os.getloadavg()[0]
    for rep in range(args.reps):
        run = measure(args)
        runs.append(run)
        shown = ", ".join(
            f"{mode} step {us(run[mode]['step'])} us, open {us(run[mode]['open'])} us"
            for mode in MODES
        )
        print(f"rep {rep + 1}/{args.reps}: {shown}", file=sys.stderr, flush=True)
    args.load = (started, os.getloadavg()[0])
    section = render(runs, args)
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
