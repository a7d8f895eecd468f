"""Where a `gymnasium-vector:` send/recv loop's time goes, stage by stage, both sides.

Starts SERVERS servers of `gymnasium-vector:ENV` in processes of their own, each with its env
step and its answers' writes timestamped (`time.monotonic`, one clock for every process here),
and runs EnvPool's loop over them (a batch per server; a batch is sent back as soon as it
answers), timestamping each `recv` and `send`. Then it matches the stamps and prints the
median (p10-p90) of each stage of a batch's cycle, in microseconds:

    step        the server's env step (Gymnasium's SyncVectorEnv of the batch, the bridge)
    srv post    step done -> its answer written to the socket (encode, frame, write)
    send->recv  answer written -> the client's `recv` returns it (transit, read, decode,
                gather; and the wait while the client handles another server's answer)
    cli send    the client: `recv` returned -> the next `send` of that batch written
    req         `send` written -> the server starts stepping it (transit, read, decode)
    srv idle    a server's gap between two steps (the sum of the last four)

On a machine with fewer cores than servers + 1 the gaps show the processes' contention.
A diagnostic: docs/benchmarks.md quotes it where it explains the figures `bench/run.py`
measures, never in their tables.

    python bench/pool_timeline.py [--servers 2] [--num-envs 64] [--steps 1500] [--env ID]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_SERVER = """
import json, os, signal, sys, time
import ecotone.plugins.gymnasium_vector as bridge
import ecotone.server.wsloop as wsloop
from ecotone import cli

steps, writes = [], []
step = bridge.GymnasiumVectorEnv.step
def timed_step(self, action):
    began = time.monotonic()
    out = step(self, action)
    steps.append((began, time.monotonic()))
    return out
write_answers = wsloop.WsPeer._write_answers
async def timed_write_answers(self, peer):
    await write_answers(self, peer)
    writes.append(time.monotonic())
bridge.GymnasiumVectorEnv.step = timed_step
wsloop.WsPeer._write_answers = timed_write_answers
def dump(*_):
    with open(sys.argv[1], "w") as out:
        json.dump([steps, writes], out)
    os._exit(0)
signal.signal(signal.SIGUSR1, dump)
sys.exit(cli.main(sys.argv[2:]))
"""


def _start(env: str, dump: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A timestamping server of `env`, its log in a file beside `dump`; and its URL."""
    log = dump.with_suffix(".log")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(dump), "serve", env, "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"at (ws://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if found is not None:
            return proc, found[1]
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise SystemExit(f"the server did not start: {log.read_text(errors='replace')}")


def _loop(urls: list[str], num_envs: int, steps: int) -> tuple[float, list[tuple[Any, ...]]]:
    """EnvPool's loop; (steps/s, one (recv returned, send written, batch) per answer)."""
    import ecotone.gym

    venv: Any = ecotone.gym.make_vec(urls, num_envs)
    venv.reset(seed=0)
    bounds = venv.bounds
    for start, stop in bounds:
        venv.send(np.ones(stop - start, dtype=np.int64), np.arange(start, stop))
    starts = {start: s for s, (start, _) in enumerate(bounds)}
    size = bounds[0][1] - bounds[0][0]
    stamps: list[tuple[Any, ...]] = []
    began = time.perf_counter()
    for _ in range(steps * len(bounds)):
        *_, infos = venv.recv(min_ready=size, max_ready=size)
        got = time.monotonic()
        ids = infos["env_id"]
        venv.send(np.ones(len(ids), dtype=np.int64), ids)
        # batch s is server s's: make_vec cuts one contiguous batch per URL, in order
        stamps.append((got, time.monotonic(), starts[int(ids[0])]))
    elapsed = time.perf_counter() - began
    venv.recv()
    venv.close()
    return steps * num_envs / elapsed, stamps


def _show(name: str, values: list[float]) -> None:
    xs = sorted(values)
    if not xs:
        return
    p10, p90 = xs[len(xs) // 10], xs[9 * len(xs) // 10]
    print(f"{name:>11}: {1e6 * statistics.median(xs):7.1f} us  ({1e6 * p10:.1f}-{1e6 * p90:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1500, help="steps of each sub-env")
    parser.add_argument("--env", default="CartPole-v1")
    args = parser.parse_args()
    if args.num_envs % args.servers:
        parser.error("--num-envs must be a multiple of --servers (equal batches)")
    with tempfile.TemporaryDirectory() as folder:
        dumps = [Path(folder, f"server{s}.txt") for s in range(args.servers)]
        servers = [_start("gymnasium-vector:" + args.env, dump) for dump in dumps]
        try:
            rate, stamps = _loop([url for _, url in servers], args.num_envs, args.steps)
        finally:
            for proc, _ in servers:
                proc.send_signal(signal.SIGUSR1)
            for proc, _ in servers:
                proc.wait(timeout=30)
        traces = [json.loads(dump.read_text()) for dump in dumps]
    print(
        f"{args.servers} servers, {args.num_envs} sub-envs: {rate:,.0f} steps/s "
        f"({os.cpu_count()} cores)"
    )
    stages: dict[str, list[float]] = {
        k: [] for k in ("step", "srv post", "send->recv", "cli send", "req", "srv idle")
    }
    seen = [0] * args.servers
    skip = len(stamps) // 10  # the first tenth: warm-up
    for n, (got, sent, s) in enumerate(stamps):
        steps, writes = traces[s]
        k = seen[s]
        seen[s] += 1
        if n < skip or k + 1 >= len(steps):
            continue
        began, ended = steps[k]
        written = writes[bisect.bisect_left(writes, ended)]
        stages["step"].append(ended - began)
        stages["srv post"].append(written - ended)
        stages["send->recv"].append(got - written)
        stages["cli send"].append(sent - got)
        stages["req"].append(steps[k + 1][0] - sent)
        stages["srv idle"].append(steps[k + 1][0] - ended)
    for name, values in stages.items():
        _show(name, values)


if __name__ == "__main__":
    main()
