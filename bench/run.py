"""Benchmark orchestrator behind `make bench`: ecotone vs OpenEnv vs a raw transport floor.

    python bench/run.py --openenv-python .venv-bench/bin/python \\
        --reps 5 --steps 3000 --sessions 64 --out docs/benchmarks.md

Each rep starts every server afresh on a free loopback port, waits until it accepts TCP
connections, reads its RSS at rest, runs that server's drivers one after another, reads
its RSS after load, and stops it. The servers' order rotates from rep to rep, so machine
noise is spread over all of them alike. A scenario that fails (server will not start,
driver exits non-zero, prints no JSON line, times out) is recorded as failed with the
tail of its stderr; the run goes on.

Every driver prints one JSON line on stdout,
``{"steps_per_s": float, "steps": int, "sessions": int, "elapsed_s": float}``
(``steps``: timed steps over all sessions); only ``steps_per_s`` is required here.

The report (Markdown) is written above the ``## Where the time goes`` heading of --out;
everything from that heading on is kept as it is. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------
# The tables. Placeholders in argv: {py} (this interpreter, ecotone's venv), {openenv_py}
# (--openenv-python), {port}, {http_url}, {ws_url}, {steps}, {sessions}.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    name: str
    argv: str  # shell-style words, split before the placeholders are filled in


@dataclass(frozen=True)
class Scenario:
    server: str  # a Server.name
    mode: str  # label; the key is "server/mode"
    group: str  # "1" = single session, "K" = --sessions concurrent sessions
    argv: str

    @property
    def key(self) -> str:
        return f"{self.server}/{self.mode}"


SERVERS: tuple[Server, ...] = (
    Server("floor", "{py} bench/ws_floor.py serve --port {port}"),
    Server(
        "openenv", "{openenv_py} bench/openenv_counter_server.py --host 127.0.0.1 --port {port}"
    ),
    Server("ecotone", "{py} -m ecotone serve counter --host 127.0.0.1 --port {port}"),
    Server(
        "ecotone-cartpole",
        "{py} -m ecotone serve gymnasium:CartPole-v1 --host 127.0.0.1 --port {port}",
    ),
    Server(
        "ecotone-tcp",
        "{py} -m ecotone serve counter --transport tcp --host 127.0.0.1 --port {port}",
    ),
    Server(
        "ecotone-unix",
        "{py} -m ecotone serve counter --transport unix --host {sock}",
    ),
    Server(
        "ecotone-http",
        "{py} -m ecotone serve counter --transport http --host 127.0.0.1 --port {port}",
    ),
)

_FLOOR = "{py} bench/ws_floor.py drive --url {ws_url} --steps {steps} --sessions {sessions}"
_OPENENV = (
    "{openenv_py} bench/openenv_driver.py --url {http_url} --steps {steps} --sessions {sessions}"
)
_ECOTONE = "{py} bench/ecotone_driver.py --url {ws_url} --steps {steps} --sessions {sessions}"
_VECTOR = "{py} bench/vector_driver.py --url {ws_url} --steps 300 --sessions {sessions}"
# The native counter's vector steps take about 100 us at 64 sub-envs: 2,000 of them (600 at
# 256) time 0.15-0.3 s, where 300 timed some 30 ms and one scheduling hiccup moved a rep by
# a third. The in-process reference runs the same count.
_COUNTER_VECTOR = "{py} bench/vector_driver.py --url {ws_url} --steps 2000 --sessions {sessions}"
_VECTOR_256 = "{py} bench/vector_driver.py --url {ws_url} --steps 600 --sessions 256"
_VECTOR_UNIX = (
    "{py} bench/vector_driver.py --url unix://{sock} --steps 2000 --sessions {sessions} "
    "--codec msgpack"
)
_VECTOR_UNIX_256 = (
    "{py} bench/vector_driver.py --url unix://{sock} --steps 600 --sessions 256 --codec msgpack"
)
_VECTOR_2 = "{py} bench/vector_driver.py --servers 2 --steps 300 --sessions {sessions}"
_COUNTER_2 = "{py} bench/vector_driver.py --servers 2 --steps 1000 --sessions {sessions}"
_VECTOR_256_2 = "{py} bench/vector_driver.py --servers 2 --steps 400 --sessions 256"
# CartPole: 1,000 vector steps of 64 take about 0.5-1 s (300 took 0.15-0.3 s, where one
# scheduling hiccup moved a rep by a fifth). Gymnasium's AsyncVectorEnv keeps 300: at ten
# times slower, they take as long.
_CARTPOLE = "{py} bench/vector_driver.py --url {ws_url} --steps 1000 --sessions {sessions}"
_CARTPOLE_ASYNC = _VECTOR
_BATCHES_2 = (
    "{py} bench/vector_driver.py --servers 2 --steps 1000 --sessions {sessions} --vector-form"
)
_BATCHES_2_UNIX = _BATCHES_2 + " --transport unix"
_ECOTONE_TCP = (
    "{py} bench/ecotone_driver.py --url tcp://127.0.0.1:{port} --steps {steps} "
    "--sessions {sessions}"
)
_ECOTONE_UNIX = "{py} bench/ecotone_driver.py --url unix://{sock} --steps {steps} --sessions 1"
_ECOTONE_HTTP = (
    "{py} bench/ecotone_driver.py --url {http_url} --steps {steps} --sessions {sessions}"
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("floor", "sync", "1", _FLOOR),  # blocking socket + wsproto client
    Scenario("floor", "async", "K", _FLOOR),  # K trio-websocket connections
    Scenario("openenv", "sync", "1", _OPENENV + " --mode sync"),
    Scenario("openenv", "async", "K", _OPENENV + " --mode async"),
    Scenario("ecotone", "sync", "1", _ECOTONE + " --mode sync"),
    Scenario("ecotone", "sync-msgpack", "1", _ECOTONE + " --mode sync --codec msgpack"),
    Scenario("ecotone", "async", "K", _ECOTONE + " --mode async"),
    Scenario("ecotone", "mux", "K", _ECOTONE + " --mode mux"),  # K sessions, one connection
    Scenario("ecotone", "batch", "K", _ECOTONE + " --mode batch"),  # step_many
    Scenario("ecotone-tcp", "sync", "1", _ECOTONE_TCP + " --mode sync"),
    Scenario("ecotone-tcp", "sync-msgpack", "1", _ECOTONE_TCP + " --mode sync --codec msgpack"),
    Scenario("ecotone-tcp", "mux", "K", _ECOTONE_TCP + " --mode mux"),
    Scenario("ecotone-unix", "sync", "1", _ECOTONE_UNIX + " --mode sync"),
    # HTTP: the same stdlib keep-alive client against both servers (POST /reset, /step).
    Scenario("openenv", "http", "1", _OPENENV + " --mode http"),
    Scenario("ecotone-http", "http", "1", _OPENENV + " --mode http"),
    # ecotone's own HTTP client (POST /v1/frames, keep-alive).
    Scenario("ecotone-http", "sync-http", "1", _ECOTONE_HTTP + " --mode sync"),
    # OpenEnv's own client against an ecotone server: the server's share of the time.
    Scenario("ecotone-http", "openenv-client-sync", "1", _OPENENV + " --mode sync"),
    Scenario("ecotone-http", "openenv-client-async", "K", _OPENENV + " --mode async"),
    # Vector stepping (issue: many remote envs at near the machine's limit). `steps` here is
    # vector steps, so each sub-env takes that many; sessions = sub-envs.
    Scenario("ecotone", "vector-batched", "K", _COUNTER_VECTOR + " --mode batched"),
    Scenario("ecotone", "vector-per-socket", "K", _VECTOR + " --mode per-socket"),
    Scenario("ecotone", "gym-inproc", "K", _COUNTER_VECTOR + " --mode gym-inproc"),
    Scenario("ecotone", "vector-batched-256", "256", _VECTOR_256 + " --mode batched"),
    Scenario("ecotone", "gym-inproc-256", "256", _VECTOR_256 + " --mode gym-inproc"),
    # The same over a unix socket with MessagePack: the leanest wire the vector env has.
    Scenario(
        "ecotone",
        "vector-batched-msgpack",
        "K",
        _COUNTER_VECTOR + " --mode batched --codec msgpack",
    ),
    Scenario("ecotone-unix", "vector-batched", "K", _VECTOR_UNIX + " --mode batched"),
    Scenario("ecotone-unix", "vector-batched-256", "256", _VECTOR_UNIX_256 + " --mode batched"),
    # The same over two servers the driver starts itself (process provider, one per core):
    # `step` (both servers step at once), and EnvPool's send/recv loop (`pool`: a server's
    # batch goes back as soon as it answers, while the other steps).
    Scenario("ecotone", "vector-2srv", "K", _COUNTER_2 + " --mode batched"),
    Scenario("ecotone", "vector-2srv-pool", "K", _COUNTER_2 + " --mode batched --pool"),
    Scenario("ecotone", "vector-2srv-256", "256", _VECTOR_256_2 + " --mode batched"),
    Scenario("ecotone", "vector-2srv-pool-256", "256", _VECTOR_256_2 + " --mode batched --pool"),
    # CartPole-v1 through the Gymnasium bridge, against Gymnasium's own vector envs in process
    # (issue 17's baseline): 300 vector steps of K sub-envs, always pushing right.
    Scenario("ecotone-cartpole", "make-vec", "K", _VECTOR + " --mode cartpole-remote"),
    Scenario("ecotone-cartpole", "make-vec-2srv", "K", _VECTOR_2 + " --mode cartpole-remote"),
    Scenario(
        "ecotone-cartpole", "make-vec-2srv-pool", "K", _VECTOR_2 + " --mode cartpole-remote --pool"
    ),
    # The same over `gymnasium-vector:CartPole-v1`: a batch per server, one SyncVectorEnv each,
    # over WebSocket (the process provider's default) and over unix sockets.
    Scenario("ecotone-cartpole", "batches-2srv", "K", _BATCHES_2 + " --mode cartpole-remote"),
    Scenario(
        "ecotone-cartpole", "batches-2srv-pool", "K", _BATCHES_2 + " --mode cartpole-remote --pool"
    ),
    Scenario(
        "ecotone-cartpole", "batches-2srv-unix", "K", _BATCHES_2_UNIX + " --mode cartpole-remote"
    ),
    Scenario(
        "ecotone-cartpole",
        "batches-2srv-unix-pool",
        "K",
        _BATCHES_2_UNIX + " --mode cartpole-remote --pool",
    ),
    Scenario("ecotone-cartpole", "gym-sync", "K", _CARTPOLE + " --mode cartpole-sync"),
    Scenario("ecotone-cartpole", "gym-async", "K", _CARTPOLE_ASYNC + " --mode cartpole-async"),
)

RATIOS: tuple[tuple[str, str], ...] = (
    ("ecotone/sync", "openenv/sync"),
    ("ecotone/sync", "floor/sync"),
    ("ecotone/sync-msgpack", "openenv/sync"),
    ("ecotone-tcp/sync", "openenv/sync"),
    ("ecotone-tcp/sync-msgpack", "openenv/sync"),
    ("ecotone-tcp/sync", "floor/sync"),
    ("ecotone-unix/sync", "openenv/sync"),
    ("ecotone/async", "openenv/async"),
    ("ecotone/async", "floor/async"),
    ("ecotone/mux", "openenv/async"),
    ("ecotone/mux", "floor/async"),
    ("ecotone-tcp/mux", "openenv/async"),
    ("ecotone/batch", "openenv/async"),
    ("ecotone-http/http", "openenv/http"),
    ("ecotone-http/sync-http", "openenv/http"),
    ("ecotone-http/openenv-client-sync", "openenv/sync"),
    ("ecotone-http/openenv-client-async", "openenv/async"),
    ("ecotone/vector-batched", "openenv/async"),
    ("ecotone/vector-batched", "ecotone/gym-inproc"),
    ("ecotone/vector-batched", "ecotone/vector-per-socket"),
    ("ecotone/vector-batched-256", "ecotone/gym-inproc-256"),
    ("ecotone/vector-batched-msgpack", "ecotone/gym-inproc"),
    ("ecotone-unix/vector-batched", "ecotone/gym-inproc"),
    ("ecotone-unix/vector-batched-256", "ecotone/gym-inproc-256"),
    ("ecotone/vector-2srv", "ecotone/gym-inproc"),
    ("ecotone/vector-2srv-pool", "ecotone/gym-inproc"),
    ("ecotone/vector-2srv-256", "ecotone/gym-inproc-256"),
    ("ecotone/vector-2srv-pool-256", "ecotone/gym-inproc-256"),
    ("ecotone-cartpole/make-vec", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/make-vec", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/make-vec-2srv", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/make-vec-2srv", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/make-vec-2srv-pool", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/make-vec-2srv-pool", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/batches-2srv", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/batches-2srv", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/batches-2srv-pool", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/batches-2srv-pool", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/batches-2srv-unix", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/batches-2srv-unix", "ecotone-cartpole/gym-async"),
    ("ecotone-cartpole/batches-2srv-unix-pool", "ecotone-cartpole/gym-sync"),
    ("ecotone-cartpole/batches-2srv-unix-pool", "ecotone-cartpole/gym-async"),
)
"""(numerator, denominator) scenario keys for the ratio table."""
TIME_HEADING = "## Where the time goes"
TIME_PLACEHOLDER = "_Not written yet: profile notes on where a step's time is spent._"
GROUP_LABEL = {"1": "1 session", "K": "{k} sessions", "256": "256 sub-envs"}

READY_DEADLINE_S = 30.0
STOP_GRACE_S = 5.0
STDERR_TAIL_LINES = 12
SERVER_FAILED = "server failed"

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    rates: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass
class ServerResult:
    rss_rest: list[float] = field(default_factory=list)
    rss_load: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Config:
    py: str
    openenv_py: str
    steps: int
    sessions: int
    driver_timeout: float
    servers: tuple[Server, ...] = SERVERS
    scenarios: tuple[Scenario, ...] = SCENARIOS


class ScenarioFailed(Exception):
    pass


# --------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def expand(argv: str, values: dict[str, str]) -> list[str]:
    return [word.format(**values) for word in shlex.split(argv)]


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:]) if kept else "(no stderr)"


def read_tail(path: Path) -> str:
    try:
        return tail(path.read_text(errors="replace"))
    except OSError:
        return "(no stderr)"


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 4, after the parenthesised command name (which may hold spaces).
    return int(stat.rsplit(")", 1)[1].split()[1])


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _ppid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def rss_mib(pid: int) -> float | None:
    """VmRSS of the process and its descendants, in MiB (None if it is gone)."""
    total_kb = 0
    seen = False
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
                seen = True
                break
    return total_kb / 1024 if seen else None


def wait_ready(
    proc: subprocess.Popen[bytes], port: int, deadline_s: float, unix: str | None = None
) -> None:
    """Until the server accepts a connection on its port (or its unix socket)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ScenarioFailed(f"server exited with code {proc.returncode} before listening")
        try:
            if unix is not None:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.settimeout(0.5)
                    probe.connect(unix)
                    return
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise ScenarioFailed(f"server did not accept connections within {deadline_s:.0f} s")


def exited_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_server(
    argv: list[str], port: int, log: Path, unix: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT
        )
    try:
        wait_ready(proc, port, READY_DEADLINE_S, unix)
        yield proc
    finally:
        stop(proc)


def run_driver(argv: list[str], timeout: float) -> float:
    try:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        raise ScenarioFailed(f"driver timed out after {timeout:.0f} s\n{tail(err)}") from None
    except OSError as exc:
        raise ScenarioFailed(f"driver could not start: {exc}") from None
    if done.returncode != 0:
        raise ScenarioFailed(f"driver exited with code {done.returncode}\n{tail(done.stderr)}")
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("steps_per_s"), int | float):
            return float(data["steps_per_s"])
    raise ScenarioFailed(f"driver printed no JSON result line\n{tail(done.stderr)}")


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_rep(
    rep: int,
    cfg: Config,
    scen_results: dict[str, ScenarioResult],
    srv_results: dict[str, ServerResult],
    logdir: Path,
) -> None:
    shift = rep % len(cfg.servers)
    order = cfg.servers[shift:] + cfg.servers[:shift]
    for server in order:
        scenarios = [s for s in cfg.scenarios if s.server == server.name]
        if not scenarios:
            continue
        port = free_port()
        values = {
            "py": cfg.py,
            "openenv_py": cfg.openenv_py,
            "port": str(port),
            "http_url": f"http://127.0.0.1:{port}",
            "ws_url": f"ws://127.0.0.1:{port}",
            "sock": f"/tmp/ecotone-bench-{port}.sock",
            "steps": str(cfg.steps),
        }
        srv_log = logdir / f"{server.name}-rep{rep}.log"
        srv = srv_results[server.name]
        try:
            died = False
            unix = values["sock"] if "{sock}" in server.argv else None
            with running_server(expand(server.argv, values), port, srv_log, unix) as proc:
                rest = rss_mib(proc.pid)
                if rest is not None:
                    srv.rss_rest.append(rest)
                for scen in scenarios:
                    sessions = "1" if scen.group == "1" else str(cfg.sessions)
                    argv = expand(scen.argv, {**values, "sessions": sessions})
                    try:
                        if proc.poll() is not None:
                            raise ScenarioFailed(f"server had died (code {proc.returncode})")
                        rate = run_driver(argv, cfg.driver_timeout)
                    except ScenarioFailed as exc:
                        scen_results[scen.key].failures.append(str(exc))
                        log(f"[rep {rep + 1}] {scen.key:<16} FAILED: {str(exc).splitlines()[0]}")
                        if not died and exited_within(proc, 1.0):
                            died = True
                            srv.failures.append(
                                f"server died (code {proc.returncode}) during {scen.key}\n"
                                f"{read_tail(srv_log)}"
                            )
                            log(f"[rep {rep + 1}] server {server.name} DIED during {scen.key}")
                        continue
                    scen_results[scen.key].rates.append(rate)
                    log(f"[rep {rep + 1}] {scen.key:<16} {rate:>10,.0f} steps/s")
                if proc.poll() is None:
                    load = rss_mib(proc.pid)
                    if load is not None:
                        srv.rss_load.append(load)
        except (ScenarioFailed, OSError) as exc:
            msg = f"{exc}\n{read_tail(srv_log)}"
            srv.failures.append(msg)
            for scen in scenarios:
                if len(scen_results[scen.key].rates) + len(scen_results[scen.key].failures) <= rep:
                    scen_results[scen.key].failures.append(f"{SERVER_FAILED}: {msg}")
            log(f"[rep {rep + 1}] server {server.name} FAILED: {str(exc).splitlines()[0]}")


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def spread(values: list[float], fmt: str = "{:,.0f}") -> tuple[str, str]:
    if not values:
        return "—", "—"
    med = fmt.format(statistics.median(values))
    rng = f"{fmt.format(min(values))}-{fmt.format(max(values))}"
    return med, rng


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def group_label(group: str, k: int) -> str:
    return GROUP_LABEL.get(group, group).format(k=k)


def throughput_table(cfg: Config, scen: dict[str, ScenarioResult], reps: int) -> str:
    k = cfg.sessions
    rows = []
    for s in cfg.scenarios:
        r = scen[s.key]
        med, rng = spread(r.rates)
        rows.append([s.server, s.mode, group_label(s.group, k), med, rng, f"{len(r.rates)}/{reps}"])
    header = ["server", "mode", "sessions", "median steps/s", "min-max", "ok reps"]
    return md_table(header, rows, {3, 4, 5})


def ratio_table(cfg: Config, scen: dict[str, ScenarioResult]) -> str:
    k = cfg.sessions
    groups = {s.key: s.group for s in cfg.scenarios}
    rows = []
    for num_key, den_key in RATIOS:
        if num_key not in scen or den_key not in scen:
            continue
        num, den = scen[num_key].rates, scen[den_key].rates
        if num and den:
            ratio = f"{statistics.median(num) / statistics.median(den):.2f}x"
        else:
            ratio = "n/a (failed)"
        rows.append([f"{num_key} / {den_key}", group_label(groups[num_key], k), ratio])
    return md_table(["comparison (median / median)", "sessions", "ratio"], rows, {2})


def memory_table(cfg: Config, srv: dict[str, ServerResult]) -> str:
    rows = []
    for s in cfg.servers:
        r = srv[s.name]
        rest_med, rest_rng = spread(r.rss_rest, "{:.1f}")
        load_med, load_rng = spread(r.rss_load, "{:.1f}")
        rows.append([s.name, rest_med, rest_rng, load_med, load_rng])
    header = ["server", "RSS at rest (MiB)", "min-max", "RSS after load (MiB)", "min-max"]
    return md_table(header, rows, {1, 2, 3, 4})


def failures_section(
    cfg: Config, scen: dict[str, ScenarioResult], srv: dict[str, ServerResult]
) -> str:
    def item(what: str, fails: list[str]) -> str:
        body = "\n".join("    " + ln for ln in fails[-1].splitlines())
        return f"- {what} failed in {len(fails)} rep(s); last error:\n\n{body}\n"

    parts = [
        item(f"server `{s.name}`", srv[s.name].failures)
        for s in cfg.servers
        if srv[s.name].failures
    ]
    for s in cfg.scenarios:
        own = [f for f in scen[s.key].failures if not f.startswith(SERVER_FAILED)]
        if own:
            parts.append(item(f"`{s.key}`", own))
    return "\n".join(parts)


def cmd_output(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_facts(cfg: Config) -> list[tuple[str, str]]:
    version_of = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    oe_py = cmd_output([cfg.openenv_py, "-c", "import platform; print(platform.python_version())"])
    return [
        ("nproc", str(len(os.sched_getaffinity(0)))),
        ("CPU", cpu_model()),
        ("kernel", platform.release()),
        ("python (ecotone)", platform.python_version()),
        ("python (openenv venv)", oe_py or "unknown"),
        ("openenv", cmd_output([cfg.openenv_py, "-c", version_of, "openenv"]) or "unknown"),
        ("uvicorn", cmd_output([cfg.openenv_py, "-c", version_of, "uvicorn"]) or "unknown"),
        ("ecotone", cmd_output([cfg.py, "-c", version_of, "ecotone"]) or "not installed"),
        ("git commit", cmd_output(["git", "rev-parse", "--short", "HEAD"]) or "none"),
    ]


@dataclass(frozen=True)
class RunFacts:
    """How the run went: its command line, when it started, how long it took."""

    command: str
    started: dt.datetime
    wall_s: float


def render(
    cfg: Config,
    reps: int,
    run: RunFacts,
    scen: dict[str, ScenarioResult],
    srv: dict[str, ServerResult],
) -> str:
    command, started, wall_s = run.command, run.started, run.wall_s
    facts = "\n".join(f"- {k}: {v}" for k, v in machine_facts(cfg))
    k = cfg.sessions
    out = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` (via `make bench`); edit the script, not this part.",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')} (run took {wall_s:.0f} s)",
        facts,
        "",
        # A record of what made these figures, not a block to paste: one line of prose.
        f"Made by `{command}` (`make bench` runs it).",
        "",
        f'Counter environment (action `{{"delta": 1}}`), loopback only. Each rep starts each '
        f"server afresh; the servers' order rotates between reps. Medians over {reps} reps, "
        f"with min-max. A step is one request and its reply: {cfg.steps} timed steps per "
        f"session after a warm-up of 200. `floor` is a trio-websocket echo server answering "
        f"the bytes of an ecotone step frame (sync: blocking socket + wsproto client; "
        f"async: {k} trio-websocket connections). `openenv` is OpenEnv's own server and "
        f"GenericEnvClient (sync: `.sync()`; async: {k} clients under asyncio.gather).",
        "",
        "## Throughput",
        "",
        throughput_table(cfg, scen, reps),
        "",
        "## Ratios",
        "",
        ratio_table(cfg, scen),
        "",
        "## Server memory",
        "",
        "VmRSS of the server process tree, right after it accepts connections and after all "
        "of its scenarios ran.",
        "",
        memory_table(cfg, srv),
        "",
    ]
    fails = failures_section(cfg, scen, srv)
    if fails:
        out += ["## Failures", "", fails]
    return "\n".join(out).rstrip() + "\n"


def write_report(path: Path, body: str) -> None:
    kept = f"{TIME_HEADING}\n\n{TIME_PLACEHOLDER}\n"
    if path.exists():
        text = path.read_text()
        if text.startswith(TIME_HEADING):
            kept = text
        else:
            idx = text.find("\n" + TIME_HEADING)
            if idx >= 0:
                kept = text[idx + 1 :]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body + "\n" + kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--openenv-python",
        required=True,
        help="python of a venv made from bench/requirements-openenv.txt",
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000, help="timed steps per session")
    parser.add_argument("--sessions", type=int, default=64, help="K for the K-session scenarios")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument(
        "--driver-timeout", type=float, default=600.0, help="seconds before a driver is killed"
    )
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="keep the servers' output here (default: drop)"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated server names to run (default: all)"
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.steps < 1 or args.sessions < 1:
        parser.error("--reps, --steps and --sessions must be >= 1")

    servers, scenarios = SERVERS, SCENARIOS
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        servers = tuple(s for s in servers if s.name in wanted)
        scenarios = tuple(s for s in scenarios if s.server in wanted)

    openenv_py = args.openenv_python
    if os.sep in openenv_py:  # a path, not a name on PATH: pin it before cwd changes
        openenv_py = str(Path(openenv_py).absolute())
    cfg = Config(
        sys.executable,
        openenv_py,
        args.steps,
        args.sessions,
        args.driver_timeout,
        servers,
        scenarios,
    )
    out_path: Path = args.out if args.out.is_absolute() else Path.cwd() / args.out
    command = "python bench/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])

    scen = {s.key: ScenarioResult() for s in cfg.scenarios}
    srv = {s.name: ServerResult() for s in cfg.servers}
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.log_dir is not None:
            logdir = args.log_dir.absolute()
            logdir.mkdir(parents=True, exist_ok=True)
        else:
            logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        for rep in range(args.reps):
            run_rep(rep, cfg, scen, srv, logdir)
    wall = time.monotonic() - t0

    body = render(cfg, args.reps, RunFacts(command, started, wall), scen, srv)
    write_report(out_path, body)
    print(body)
    log(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
