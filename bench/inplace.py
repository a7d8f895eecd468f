"""Where a remote vector step's time goes: the engine's time per request, alone and in place.

`make_vec` over two `gymnasium:CartPole-v1` servers (64 sub-envs, a session each) runs three
busy processes: the client and two servers. Here the same `step_columns` requests (32
sessions, those whose episode ended reset within the request, as the client sends them) are
answered by an engine in this process:

  tight     back to back
  spin      0.6 ms between requests spent in `sched_yield` (as a server's busy poll waits)
  sleep     0.6 ms slept between requests (the vCPU may halt)
  crowded   as spin, while two other processes work and wait on the same cores

and in place: one server under `make_vec` x32 and each of two under x64, timed
(bench/timed_server.py wraps `Engine.submit`), with the client's own time before its first
send and after its last answer, beside Gymnasium's SyncVectorEnv x64 stepped in this
process. Medians over reps (min-max).

    python bench/inplace.py --reps 3 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import msgspec
import numpy as np
from sections import replace_section
from servers import start

import ecotone.gym
from ecotone.client._sync import net
from ecotone.kernel import Call, Engine, EnvSpec, Mode
from ecotone.plugins.gymnasium import env_class
from ecotone.specs import Open, Reset, StepColumns, codec_for

HEADING = "## Where a vector step's time goes (engine alone and in place)"
ENV = "gymnasium:CartPole-v1"
SESSIONS = 32
BETWEEN_S = 0.0006
HERE = Path(__file__).resolve().parent

# A process that works (a dict walk of about 1 ms) and waits (0.3 ms), as a client or a
# server of the make_vec run does.
HOG = """
import time
end = time.monotonic() + {seconds}
items = [dict(x=i) for i in range(100000)]
while time.monotonic() < end:
    s = 0
    for d in items[:20000]:
        s += d["x"]
    time.sleep(0.0003)
"""


def _run_calls(engine: Engine, calls: list[Call]) -> None:
    pending = list(calls)
    while pending:
        call = pending.pop(0)
        assert call.mode is Mode.INLINE, call
        call.run()
        pending.extend(engine.complete(call))


def engine_alone(requests: int, between: str) -> float:
    """Median microseconds the engine takes for a `step_columns` of SESSIONS CartPoles, with
    `between` ("tight", "spin", "sleep") what this process does between requests."""
    engine = Engine(EnvSpec.from_class(env_class(ENV)))
    codec = codec_for("msgpack")
    peer = engine.peer(codec, None, frames=False)
    ids = itertools.count(1)

    def ask(frame: Any) -> dict[str, Any]:
        _run_calls(engine, list(peer.receive(codec.encode(frame))))
        (answer,) = peer.take()
        return msgspec.msgpack.decode(answer)

    sessions = [ask(Open(id=next(ids)))["session"] for _ in range(SESSIONS)]
    for j, session in enumerate(sessions):
        ask(Reset(id=next(ids), session=session, seed=j))
    step = codec.raw([{"action": 1}] * SESSIONS)
    resets: list[int] = []
    took: list[float] = []
    for _ in range(requests + 200):
        actions = (
            codec.raw([None if j in resets else {"action": 1} for j in range(SESSIONS)])
            if resets
            else step
        )
        data = codec.encode(
            StepColumns(id=next(ids), sessions=sessions, actions=actions, resets=resets)
        )
        began = time.perf_counter()
        calls = peer.receive(data)
        (answer,) = peer.take()
        took.append(time.perf_counter() - began)
        assert not calls
        observations = msgspec.msgpack.decode(answer)["observations"]
        resets = [j for j, o in enumerate(observations) if o["done"] or o["truncated"]]
        if between == "sleep":
            time.sleep(BETWEEN_S)
        elif between == "spin":
            end = time.perf_counter() + BETWEEN_S
            while time.perf_counter() < end:
                os.sched_yield()
    return statistics.median(took[200:]) * 1e6


def crowded(requests: int) -> float:
    """`engine_alone(spin)` while two other processes work and wait."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG.format(seconds=120)]) for _ in range(2)]
    try:
        time.sleep(0.5)
        return engine_alone(requests, "spin")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def timed_server(times: str) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [sys.executable, str(HERE / "timed_server.py"), "serve", ENV]
    return start(cmd, env={"ECOTONE_BENCH_TIMES": times})


def _marking(marks: list[tuple[str, float]]) -> Callable[[], None]:
    """Record each send and receive of the blocking client's sockets in `marks`; returns
    what undoes it."""
    send, receive = net.SocketStream.send, net.SocketStream.receive

    def timed_send(self: Any, data: bytes) -> None:
        send(self, data)
        marks.append(("sent", time.perf_counter()))

    def timed_receive(self: Any, size: int, deadline: float | None = None) -> bytes:
        data = receive(self, size, deadline)
        marks.append(("got", time.perf_counter()))
        return data

    net.SocketStream.send = timed_send  # type: ignore[method-assign]
    net.SocketStream.receive = timed_receive  # type: ignore[method-assign]

    def undo() -> None:
        net.SocketStream.send = send  # type: ignore[method-assign]
        net.SocketStream.receive = receive  # type: ignore[method-assign]

    return undo


def in_place(steps: int, count: int) -> dict[str, float]:
    """make_vec of `count` x SESSIONS sub-envs over `count` timed servers: the client's phases
    and each server's engine time and time between requests (medians, microseconds)."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = [os.path.join(tmp, f"server{i}.json") for i in range(count)]
        servers = [timed_server(f) for f in files]
        marks: list[tuple[str, float]] = []
        try:
            venv = ecotone.gym.make_vec([url for _, url in servers], count * SESSIONS)
            actions = np.ones(count * SESSIONS, dtype=np.int64)
            venv.reset(seed=0)
            for _ in range(300):
                venv.step(actions)
            undo = _marking(marks)
            before, after, total = [], [], []
            try:
                for _ in range(steps):
                    marks.clear()
                    began = time.perf_counter()
                    venv.step(actions)
                    ended = time.perf_counter()
                    sent = [t for kind, t in marks if kind == "sent"]
                    got = [t for kind, t in marks if kind == "got"]
                    before.append(sent[-1] - began)
                    after.append(ended - got[-1])
                    total.append(ended - began)
            finally:
                undo()
            venv.close()
        finally:
            for proc, _ in servers:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
        for i, path in enumerate(files):
            with open(path) as f:
                data = json.load(f)
            out[f"engine{i}"] = statistics.median(data["submit_us"])
            out[f"gap{i}"] = statistics.median(data["gap_us"])
    out["before"] = statistics.median(before) * 1e6
    out["after"] = statistics.median(after) * 1e6
    out["step"] = statistics.median(total) * 1e6
    return out


def in_process(steps: int) -> float:
    """Microseconds a step of Gymnasium's SyncVectorEnv of 2 x SESSIONS CartPoles takes."""
    actions = np.ones(2 * SESSIONS, dtype=np.int64)
    sync = gymnasium.make_vec("CartPole-v1", 2 * SESSIONS, vectorization_mode="sync")
    sync.reset(seed=0)
    for _ in range(300):
        sync.step(actions)
    began = time.perf_counter()
    for _ in range(steps):
        sync.step(actions)
    took = (time.perf_counter() - began) / steps * 1e6
    sync.close()
    return took


def measure(requests: int, steps: int) -> dict[str, float]:
    out = {between: engine_alone(requests, between) for between in ("tight", "spin", "sleep")}
    out["crowded"] = crowded(requests)
    out.update({f"one_{key}": value for key, value in in_place(steps, 1).items()})
    out.update(in_place(steps, 2))
    out["sync"] = in_process(steps)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def engines(run: dict[str, float]) -> tuple[float, float]:
    return run["engine0"], run["engine1"]


def render(runs: list[dict[str, float]], reps: int, requests: int, steps: int) -> str:
    def row(label: str, key: str | Callable[[dict[str, float]], float]) -> str:
        values = [r[key] if isinstance(key, str) else key(r) for r in runs]
        return f"| {label} | {spread(values)} |"

    lines = [
        HEADING,
        "",
        f"`bench/inplace.py --reps {reps} --requests {requests} --steps {steps}`, "
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores. The engine's time for one "
        f"`step_columns` of {SESSIONS} `{ENV}` sessions (a session per sub-env, the ended "
        "ones reset in the request, MessagePack), in this process with nothing, a spin, a "
        "sleep, or a spin beside two other busy processes between requests; then in place, "
        f"one server under `make_vec` x{SESSIONS} and each of two under x{2 * SESSIONS} "
        "(`Engine.submit` timed by bench/timed_server.py), the client's time before its first "
        "send and after its last answer, and Gymnasium's SyncVectorEnv of 64 CartPoles in this "
        "process. Microseconds, medians over reps (min-max) of each rep's median.",
        "",
        "| measured | us |",
        "|---|--:|",
        row("engine alone, back to back", "tight"),
        row("engine alone, 0.6 ms spun between requests", "spin"),
        row("engine alone, 0.6 ms slept between requests", "sleep"),
        row("engine alone, spun, two other busy processes", "crowded"),
        row(f"in place, one server, make_vec x{SESSIONS}: engine per request", "one_engine0"),
        row(f"in place, one server, make_vec x{SESSIONS}: a step", "one_step"),
        row("in place: engine per request, the faster server", lambda r: min(engines(r))),
        row("in place: engine per request, the slower server", lambda r: max(engines(r))),
        row("in place: between a server's requests", lambda r: (r["gap0"] + r["gap1"]) / 2),
        row("in place: client, before its first send", "before"),
        row("in place: client, after its last answer", "after"),
        row(f"in place: a make_vec x{2 * SESSIONS} step", "step"),
        row(f"SyncVectorEnv x{2 * SESSIONS} step, in process", "sync"),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    for rep in range(args.reps):
        runs.append(measure(args.requests, args.steps))
        print(f"rep {rep + 1}/{args.reps}: {runs[-1]}", file=sys.stderr, flush=True)
    section = render(runs, args.reps, args.requests, args.steps)
    if args.out:
        replace_section(args.out, HEADING, section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
