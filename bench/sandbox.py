"""Sandboxed executions per second of the `coding` env: a fresh sandbox and interpreter per
run, against forks of a pre-started sandbox's zygote.

    .venv/bin/python bench/sandbox.py --reps 5 --seconds 5 [--out docs/benchmarks.md]

Each rep starts `ecotone serve coding` twice on a free loopback port, with bubblewrap required
(`ECOTONE_CODING_SANDBOX=bwrap`) and `ECOTONE_CODING_ZYGOTE=0` (fresh) or `1` (zygote); the
order alternates between reps. Against each, K sessions (one connection and thread each)
reset `fizzbuzz` and submit `print(1)` for `--seconds` seconds: every step is two sandboxed
executions (the program, then the hidden tests importing it), each with the seccomp filter,
the cgroup-wide limits and the scratch tmpfs. A first step per session is not timed (it starts
the zygotes). Reported: executions per second (2 x steps / s), median over reps with min-max,
and the median step latency at one session. With --out, the table replaces the section
"## Sandboxed runs" of that file (or is appended).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from sections import replace_section
from servers import start

import ecotone
from ecotone.plugins.coding.env import CodingAction, CodingObservation

HEADING = "## Sandboxed runs: fresh interpreter vs zygote"
CODE = "print(1)\n"


def serve(zygote: bool) -> tuple[subprocess.Popen[bytes], str]:
    env = {"ECOTONE_CODING_SANDBOX": "bwrap", "ECOTONE_CODING_ZYGOTE": str(int(zygote))}
    cmd = [sys.executable, "-m", "ecotone", "serve", "coding", "--host", "127.0.0.1"]
    return start(cmd, env=env, timeout=30)


def measure(url: str, sessions: int, seconds: float) -> tuple[float, float]:
    """Executions per second over `sessions` sessions, and the median step latency (s)."""
    steps = [0] * sessions
    latencies: list[list[float]] = [[] for _ in range(sessions)]
    stop_at = [0.0]

    def go() -> None:  # as the last one reaches the barrier, before any is released
        stop_at[0] = time.perf_counter() + seconds

    barrier = threading.Barrier(sessions + 1, action=go)
    errors: list[BaseException] = []

    def play(i: int) -> None:
        try:
            with ecotone.connect(url, observation_type=CodingObservation) as env:
                env.reset(task="fizzbuzz", max_attempts=10**9)
                obs = env.step(CodingAction(code=CODE)).observation  # warm: starts a zygote
                assert obs.stdout == "1\n" and "bwrap" in obs.isolation, obs
                barrier.wait()
                while True:
                    t0 = time.perf_counter()
                    if t0 >= stop_at[0]:
                        return
                    env.step(CodingAction(code=CODE))
                    latencies[i].append(time.perf_counter() - t0)
                    steps[i] += 1
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=play, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        for t in threads:
            t.join()
        raise errors[0] from None
    start = stop_at[0] - seconds
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    flat = [x for row in latencies for x in row]
    return 2 * sum(steps) / elapsed, statistics.median(flat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sessions", default="1,8", help="comma-separated session counts")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",")]
    if shutil.which("bwrap") is None:
        note = f"{HEADING}\n\nNot measured: bubblewrap is not installed here.\n"
        print(note)
        if args.out is not None:
            replace_section(args.out, HEADING, note)
        return 0
    rates: dict[tuple[str, int], list[float]] = {}
    lat: dict[str, list[float]] = {"fresh": [], "zygote": []}
    for rep in range(args.reps):
        order = ("fresh", "zygote") if rep % 2 == 0 else ("zygote", "fresh")
        for kind in order:
            proc, url = serve(kind == "zygote")
            try:
                for k in counts:
                    rate, median = measure(url, k, args.seconds)
                    rates.setdefault((kind, k), []).append(rate)
                    if k == 1:
                        lat[kind].append(median)
                    print(f"rep {rep + 1} {kind} K={k}: {rate:,.1f} exec/s", file=sys.stderr)
            finally:
                proc.terminate()
                proc.wait(10)
    rows = []
    for k in counts:
        fresh, zyg = rates[("fresh", k)], rates[("zygote", k)]
        rows.append(
            f"| {k} | {statistics.median(fresh):,.1f} ({min(fresh):,.1f}-{max(fresh):,.1f}) "
            f"| {statistics.median(zyg):,.1f} ({min(zyg):,.1f}-{max(zyg):,.1f}) "
            f"| {statistics.median(zyg) / statistics.median(fresh):.1f}x |"
        )
    cores = os.cpu_count()
    section = "\n".join(
        [
            HEADING,
            "",
            f"Generated by `bench/sandbox.py --reps {args.reps} --seconds {args.seconds:g}` "
            f"(via `make bench`), {time.strftime('%Y-%m-%d', time.gmtime())}, {cores} cores. "
            "`coding` under bubblewrap with its seccomp filter, cgroup-wide limits and scratch "
            "tmpfs; each step submits `print(1)` to `fizzbuzz`: two sandboxed executions (the "
            "program, then the hidden tests). Executions per second, median over reps "
            "(min-max):",
            "",
            "| sessions | fresh interpreter | zygote | zygote / fresh |",
            "| ---: | ---: | ---: | ---: |",
            *rows,
            "",
            f"Median step latency at one session: fresh {statistics.median(lat['fresh']) * 1e3:.1f}"
            f" ms, zygote {statistics.median(lat['zygote']) * 1e3:.1f} ms."
            if lat["fresh"] and lat["zygote"]
            else "",
            "",
        ]
    )
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
