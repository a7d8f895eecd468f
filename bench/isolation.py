"""Process isolation's cost: a step, and a session's open, of `counter` served in the server's
process against each session's env in a process of its own (`serve --isolate`).

    .venv/bin/python bench/isolation.py --reps 5 [--out docs/benchmarks.md]

Each rep starts `ecotone serve counter` and `ecotone serve counter --isolate` on free loopback
ports (one at a time, one process each, as a user runs them) and, with the blocking client
over one WebSocket connection (JSON):

* one session: reset, `--warmup` steps, then `--steps` steps timed back to back: the mean
  step is the rep's figure;
* `--opens` times open + reset + close of a new session (in-process: a new env instance;
  isolated: a fork of the env's zygote, the env built in it, and the process reaped): the
  median is the rep's figure.

Reported: the median over reps (min-max), and the ratio of isolated to in-process measured
in the same rep. With --out, the table replaces the section "## Process isolation" of that
file (or is appended).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sections import replace_section

import ecotone

HEADING = "## Process isolation"
MODES = {"in-process": (), "isolated": ("--isolate",)}
"""Each way of serving, and its flags."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(flags: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "ecotone", "serve", "counter", "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            why = proc.stderr.read().decode() if proc.stderr else ""
            raise SystemExit(f"`{' '.join(cmd)}` exited: {why}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"`{' '.join(cmd)}` did not start")


def measure(flags: tuple[str, ...], steps: int, warmup: int, opens: int) -> dict[str, float]:
    """Seconds per step (the mean of `steps`) and per open + reset + close (the median of
    `opens`)."""
    proc, url = serve(flags)
    try:
        with ecotone.Connection(url) as conn:
            env = conn.open()
            env.reset(seed=1)
            action = {"delta": 1}
            for _ in range(warmup):
                env.step(action)
            start = time.perf_counter()
            for _ in range(steps):
                env.step(action)
            step = (time.perf_counter() - start) / steps
            env.close()
            cycles = []
            for _ in range(opens):
                start = time.perf_counter()
                session = conn.open()
                session.reset(seed=1)
                session.close()
                cycles.append(time.perf_counter() - start)
            return {"step": step, "open": statistics.median(cycles)}
    finally:
        proc.terminate()
        proc.wait(30)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def spread(values: list[float], fmt: str = "{:,.0f}", scale: float = 1e6) -> str:
    shown = [fmt.format(v * scale) for v in (statistics.median(values), min(values), max(values))]
    return f"{shown[0]} ({shown[1]}-{shown[2]})"


def render(runs: list[dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        HEADING,
        "",
        f"`bench/isolation.py --reps {args.reps} --steps {args.steps} --opens {args.opens}`, "
        f"{time.strftime('%Y-%m-%d')}: `ecotone serve counter`, then `ecotone serve counter "
        "--isolate` (each session's env in a process of its own, forked by the env's zygote), "
        "one server process at a time on loopback, the blocking client over one WebSocket "
        "connection (JSON). A step: the mean of back-to-back steps of one session after "
        f"{args.warmup} to warm up. An open: open + reset + close of a new session, the "
        "median (isolated: a fork, the env built in the child, the child reaped before the "
        "close is answered). Median over reps (min-max), microseconds; the ratio is "
        "isolated / in-process, measured in the same rep.",
        "",
        "| | in-process | isolated | isolated / in-process |",
        "|---|--:|--:|--:|",
    ]
    for key, label in (("step", "step"), ("open", "open + reset + close")):
        inside = [run["in-process"][key] for run in runs]
        apart = [run["isolated"][key] for run in runs]
        ratios = [run["isolated"][key] / run["in-process"][key] for run in runs]
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
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--opens", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: list[dict[str, dict[str, float]]] = []
    for rep in range(args.reps):
        run = {
            mode: measure(flags, args.steps, args.warmup, args.opens)
            for mode, flags in MODES.items()
        }
        runs.append(run)
        shown = ", ".join(
            f"{m} step {us(r['step'])} us, open {us(r['open'])} us" for m, r in run.items()
        )
        print(f"rep {rep + 1}/{args.reps}: {shown}", file=sys.stderr, flush=True)
    section = render(runs, args)
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
