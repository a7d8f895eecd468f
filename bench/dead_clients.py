"""1,000 clients that die on a server: killed (-9), frozen (SIGSTOP) or vanished (a blackhole
route: the server's packets to them are dropped, no FIN, no RST), each holding a session on
its own connection. Afterwards the server must hold 0 sessions and no more file descriptors
than before, within its configured timeouts. Prints one JSON line per case.

    .venv/bin/python bench/dead_clients.py --clients 1000

The vanished case needs root and iproute2: the clients run in a network namespace this
script makes, joined to the server by a veth pair (link-local addresses that exist only
there), and the route back to them becomes a blackhole mid-run.

The server: `ecotone serve counter` with ping_interval 2 s and ping_timeout 2 s (TCP
keepalive and TCP_USER_TIMEOUT for vanished peers), a lease of 5 s and
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


def _sessions(metrics: str) -> int:
    with urllib.request.urlopen(metrics, timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r"^ecotone_sessions_open (\S+)$", text, re.M)
    assert found, text[:500]
    return int(float(found.group(1)))


HOST_ADDR = "169.254.78.1"
PEER_ADDR = "169.254.78.2"


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class _Namespace:
    """A namespace holding the clients, a veth pair to it, and the blackhole that cuts it."""

    def __init__(self) -> None:
        tag = os.getpid() % 100000
        self.ns, self.link, self.peer = f"ecotone-b{tag}", f"eco-bh{tag}", f"eco-bp{tag}"

    def __enter__(self) -> _Namespace:
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.link, "type", "veth", "peer", "name", self.peer)
        _ip("link", "set", self.peer, "netns", self.ns)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", self.link)
        _ip("link", "set", self.link, "up")
        _ip("addr", "add", f"{PEER_ADDR}/30", "dev", self.peer, netns=self.ns)
        _ip("link", "set", self.peer, "up", netns=self.ns)
        _ip("link", "set", "lo", "up", netns=self.ns)
        return self

    def blackhole(self) -> None:
        _ip("route", "add", "blackhole", f"{PEER_ADDR}/32")

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "route", "del", "blackhole", f"{PEER_ADDR}/32"], capture_output=True)
        subprocess.run(["ip", "link", "del", self.link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


def run(case: str, clients: int, per_process: int = 250) -> dict[str, object]:
    if case == "vanished":
        with _Namespace() as namespace:
            return _run(case, clients, per_process, namespace)
    return _run(case, clients, per_process, None)


def _run(
    case: str, clients: int, per_process: int, namespace: _Namespace | None
) -> dict[str, object]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    environ |= {
        "ECOTONE_LIMITS_PING_INTERVAL": "2",
        "ECOTONE_LIMITS_PING_TIMEOUT": "2",
        "ECOTONE_LIMITS_MAX_CONNECTIONS_PER_IP": str(clients + 100),
        "ECOTONE_LIMITS_MAX_SESSIONS": str(clients + 100),
        # A frozen peer's kernel still acknowledges everything: nothing at the TCP level
        # tells it from a live idle client. Its sessions go when their lease runs out, then
        # its connection when silent this long.
        "ECOTONE_LIMITS_LEASE": "5",
        "ECOTONE_LIMITS_IDLE_CONNECTION_TIMEOUT": "5",
    }
    host = HOST_ADDR if namespace is not None else "127.0.0.1"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ecotone",
            "serve",
            "counter",
            "--port",
            "0",
            "--host",
            host,
            "--no-auth",
        ],
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
        metrics = f"http://{host}:{port}/metrics"
        time.sleep(0.3)
        fds_before = _fds(server.pid)
        for start in range(0, clients, per_process):
            n = min(per_process, clients - start)
            inside = ["ip", "netns", "exec", namespace.ns] if namespace is not None else []
            holder = subprocess.Popen(
                [*inside, sys.executable, "-c", HOLDER, url, str(n)],
                env=environ,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(holder)
        for holder in holders:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
        held = _sessions(metrics)
        fds_held = _fds(server.pid)
        started = time.monotonic()
        if namespace is not None:
            namespace.blackhole()  # the clients live on; nothing reaches them any more
        else:
            sig = signal.SIGKILL if case == "killed" else signal.SIGSTOP
            for holder in holders:
                holder.send_signal(sig)
        while _sessions(metrics) > 0 or _fds(server.pid) > fds_before:
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
            "sessions_left": _sessions(metrics),
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
    parser.add_argument("--cases", default="killed,frozen,vanished")
    args = parser.parse_args()
    for case in args.cases.split(","):
        print(json.dumps(run(case, args.clients)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
