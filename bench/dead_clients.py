"""1,000 clients that die on a server: killed (-9) or frozen (SIGSTOP), each holding a session
on its own connection. Afterwards the server must hold 0 sessions and no more file
descriptors than before, within its configured timeouts. Prints one JSON line per case.

    .venv/bin/python bench/dead_clients.py --clients 1000

The server: `ecotone serve counter` with ping_interval 2 s and ping_timeout 2 s (TCP
keepalive and TCP_USER_TIMEOUT for vanished peers), idle_timeout 5 s and
idle_connection_timeout 5 s (what frees a frozen peer's session and connection: its kernel
still acknowledges every byte), and max_connections_per_ip raised above the client count.
Its sessions are read from /metrics, its descriptors from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request

HOLDER = """
import sys, time, ecotone
url, n = sys.argv[1], int(sys.argv[2])
envs = []
for _ in range(n):
    env = ecotone.connect(url)
    env.reset()
    envs.append(env)
print("ready", flush=True)
time.sleep(3600)
"""


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _sessions(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r"^ecotone_sessions_open (\S+)$", text, re.M)
    assert found, text[:500]
    return int(float(found.group(1)))


def run(case: str, clients: int, per_process: int = 250) -> dict[str, object]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    environ |= {
        "ECOTONE_LIMITS_PING_INTERVAL": "2",
        "ECOTONE_LIMITS_PING_TIMEOUT": "2",
        "ECOTONE_LIMITS_MAX_CONNECTIONS_PER_IP": str(clients + 100),
        "ECOTONE_LIMITS_MAX_SESSIONS": str(clients + 100),
        # A frozen peer's kernel still acknowledges everything: nothing at the TCP level
        # tells it from a live idle client. Its sessions go when idle this long, then its
        # connection when silent this long.
        "ECOTONE_LIMITS_IDLE_TIMEOUT": "5",
        "ECOTONE_LIMITS_IDLE_CONNECTION_TIMEOUT": "5",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--port", "0"],
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    )
    holders: list[subprocess.Popen[str]] = []
    try:
        assert server.stderr is not None
        found = re.search(r"at (ws://\S+)", server.stderr.readline())
        assert found
        url = found.group(1)
        port = int(url.rsplit(":", 1)[1])
        time.sleep(0.3)
        fds_before = _fds(server.pid)
        for start in range(0, clients, per_process):
            n = min(per_process, clients - start)
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, url, str(n)],
                env=environ,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(holder)
        for holder in holders:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
        held = _sessions(port)
        fds_held = _fds(server.pid)
        sig = signal.SIGKILL if case == "killed" else signal.SIGSTOP
        started = time.monotonic()
        for holder in holders:
            holder.send_signal(sig)
        while _sessions(port) > 0 or _fds(server.pid) > fds_before:
            if time.monotonic() - started > 120:
                break
            time.sleep(0.1)
        took = time.monotonic() - started
        fds_after = _fds(server.pid)  # before the scrape below opens a connection of its own
        return {
            "case": case,
            "clients": clients,
            "sessions_held": held,
            "server_fds_before": fds_before,
            "server_fds_held": fds_held,
            "sessions_left": _sessions(port),
            "server_fds_after": fds_after,
            "seconds_to_clean": round(took, 2),
            "server_alive": server.poll() is None,
        }
    finally:
        for holder in holders:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clients", type=int, default=1000)
    args = parser.parse_args()
    for case in ("killed", "frozen"):
        print(json.dumps(run(case, args.clients)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
