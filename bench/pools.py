"""Warm pools and many sandboxed episodes: how long until N isolated `coding` episodes are
ready to step, and how fast a warm pool hands out a server.

    .venv/bin/python bench/pools.py --episodes 256 --servers 64 --handouts 40 --launches 20
    .venv/bin/python bench/pools.py --only launch --launches 20 --out docs/benchmarks.md

Four figures, each printed as a JSON line and, with --out, as markdown sections (the first
three under one heading, the fourth under its own; `--only launch` runs the fourth alone):

* `sessions`: one `ecotone serve coding` (bubblewrap required), then `--episodes` sessions
  on it, each reset and stepped once (`print(1)`: two sandboxed runs, forks of the server's
  zygotes). Time from launching the server until every episode has answered its first step.
* `servers`: a process-provider pool of `--servers` `coding` servers (each episode a server
  process of its own), from nothing until all are ready, then one step on each.
* `handout`: a warm pool of `counter` servers; `--handouts` times: take a server, connect,
  reset (the episode's first answer), with a pause between takes so the pool refills.
  Median and slowest, in ms.
* `launch`: `ecotone.launch("counter", provider="process")` against the same with `pool=2`
  (the pool warm: waited ready before each), `--launches` times each, taking turns: from the
  call until the episode's first answer (`reset`), the server's stop on the way out not
  counted. Median and slowest in ms, and the cold start's median over the warm one's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from sections import replace_section

import ecotone
from ecotone.launcher.warm import close_pools, warm_pool
from ecotone.plugins.coding.env import CodingAction, CodingObservation

HEADING = "## Warm pools and many sandboxed episodes"
LAUNCH_HEADING = "## launch(pool=N): a warm server against a cold start"


def sessions_figure(episodes: int) -> dict[str, float]:
    env = dict(os.environ, ECOTONE_CODING_SANDBOX="bwrap")
    started = time.perf_counter()
    with ecotone.start_server("coding", provider="process", environment=env) as server:
        up = time.perf_counter() - started
        with ecotone.Connection(server.url) as conn:
            clients = [conn.open(observation_type=CodingObservation) for _ in range(episodes)]
            for client in clients:
                client.reset(task="fizzbuzz")
            reset = time.perf_counter() - started
            results = conn.step_many([(c, CodingAction(code="print(1)\n")) for c in clients])
            ready = time.perf_counter() - started
        for r in results:
            assert isinstance(r, ecotone.StepResult) and r.observation.stdout == "1\n", r
            assert "bwrap" in r.observation.isolation, r.observation.isolation
    return {"episodes": episodes, "server_up_s": up, "all_reset_s": reset, "all_stepped_s": ready}


def servers_figure(servers: int) -> dict[str, float]:
    env = dict(os.environ, ECOTONE_CODING_SANDBOX="bwrap")
    started = time.perf_counter()
    with ecotone.server_pool("coding", servers, provider="process", environment=env) as pool:
        pool.wait_ready(timeout=600)
        ready = time.perf_counter() - started
        taken = [pool.take() for _ in range(servers)]
        clients = [s.connect(observation_type=CodingObservation) for s in taken]
        errors: list[BaseException] = []

        def play(client: ecotone.EnvClient[CodingObservation, object]) -> None:
            try:
                client.reset(task="fizzbuzz")
                obs = client.step(CodingAction(code="print(1)\n")).observation
                assert obs.stdout == "1\n"
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=play, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stepped = time.perf_counter() - started
        rss = _rss_mib([int(s.id) for s in taken])
        for c in clients:
            c.close()
        if errors:
            raise errors[0]
    return {"servers": servers, "all_ready_s": ready, "all_stepped_s": stepped, "rss_mib": rss}


def handout_figure(handouts: int) -> dict[str, float]:
    times = []
    with ecotone.server_pool("counter", 4, provider="process") as pool:
        pool.wait_ready(timeout=120)
        for _ in range(handouts):
            pool.wait_ready(timeout=120)
            t0 = time.perf_counter()
            with pool.take() as server, server.connect() as env:
                env.reset(seed=0)
                times.append(time.perf_counter() - t0)
    return {
        "handouts": handouts,
        "median_ms": statistics.median(times) * 1e3,
        "slowest_ms": max(times) * 1e3,
    }


def launch_figure(launches: int) -> dict[str, float]:
    cold: list[float] = []
    warm: list[float] = []
    load = os.getloadavg()[0]
    pool = warm_pool("counter", 2, provider="process")
    try:
        for _ in range(launches):
            t0 = time.perf_counter()
            with ecotone.launch("counter", provider="process") as env:
                env.reset(seed=0)
                cold.append(time.perf_counter() - t0)
            pool.wait_ready(timeout=120)
            t0 = time.perf_counter()
            with ecotone.launch("counter", provider="process", pool=2) as env:
                env.reset(seed=0)
                warm.append(time.perf_counter() - t0)
    finally:
        close_pools()
    return {
        "launches": launches,
        "load": load,
        "cold_median_ms": statistics.median(cold) * 1e3,
        "cold_slowest_ms": max(cold) * 1e3,
        "warm_median_ms": statistics.median(warm) * 1e3,
        "warm_slowest_ms": max(warm) * 1e3,
        "cold_over_warm": statistics.median(cold) / statistics.median(warm),
    }


def launch_section(got: dict[str, float], cmd: str) -> str:
    return "\n".join(
        [
            LAUNCH_HEADING,
            "",
            f"Generated by `bench/pools.py {cmd}`, {time.strftime('%Y-%m-%d', time.gmtime())}, "
            f"{os.cpu_count()} cores, load average {got['load']:.1f} as it began (other work "
            "shared the machine: a cold start is slower than the providers' section says). "
            '`ecotone.launch("counter", provider="process")` '
            "with and without `pool=2` (the pool waited ready before each warm launch), "
            f"{got['launches']:.0f} of each, taking turns: from the call until the episode's "
            "first answer (`reset`); the server's stop on the way out not counted.",
            "",
            "| launch | median | slowest |",
            "| --- | ---: | ---: |",
            f"| cold start (a server started for it) | {got['cold_median_ms']:.1f} ms "
            f"| {got['cold_slowest_ms']:.1f} ms |",
            f"| `pool=2` (a warm server handed out) | {got['warm_median_ms']:.1f} ms "
            f"| {got['warm_slowest_ms']:.1f} ms |",
            "",
            f"A warm hand-out is {got['cold_over_warm']:.0f}x faster than a cold start "
            "(medians, same run).",
            "",
        ]
    )


def _rss_mib(pids: list[int]) -> float:
    """VmRSS of these processes and their descendants, MiB."""
    seen: set[int] = set()
    todo = list(pids)
    total = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        todo += [int(c) for c in children]
    return total / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--servers", type=int, default=64)
    parser.add_argument("--handouts", type=int, default=40)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--only", choices=["all", "launch"], default="all")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cmd = " ".join(sys.argv[1:])
    launched = launch_figure(args.launches)
    print(json.dumps(launched), flush=True)
    print(launch_section(launched, cmd))
    if args.out is not None:
        replace_section(args.out, LAUNCH_HEADING, launch_section(launched, cmd))
    if args.only == "launch":
        return 0
    one = sessions_figure(args.episodes)
    print(json.dumps(one), flush=True)
    many = servers_figure(args.servers)
    print(json.dumps(many), flush=True)
    hand = handout_figure(args.handouts)
    print(json.dumps(hand), flush=True)
    section = "\n".join(
        [
            HEADING,
            "",
            f"Generated by `bench/pools.py {cmd}` (via `make bench`), "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores; `coding` "
            "under bubblewrap (seccomp, cgroup-wide limits), each first step `print(1)`.",
            "",
            "| what | ready to step |",
            "| --- | ---: |",
            f"| {one['episodes']} `coding` episodes on one server (every run its own sandboxed "
            f"fork) | {one['all_stepped_s']:.2f} s (server up {one['server_up_s']:.2f} s, all "
            f"reset {one['all_reset_s']:.2f} s) |",
            f"| {many['servers']} `coding` servers in a process-provider pool (an episode per "
            f"server process) | {many['all_ready_s']:.2f} s ready, {many['all_stepped_s']:.2f} s "
            f"stepped; {many['rss_mib']:,.0f} MiB RSS in all |",
            f"| hand-out from a warm pool: take, connect, reset ({hand['handouts']:.0f} times) "
            f"| median {hand['median_ms']:.1f} ms, slowest {hand['slowest_ms']:.1f} ms |",
            "",
        ]
    )
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    subprocess.run([sys.executable, "-m", "ecotone", "gc"], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
