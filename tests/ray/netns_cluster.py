"""A Ray cluster of several "hosts" on this machine: each node in a network namespace of its
own, all joined by a bridge in another namespace (a switch), and this host joined to the
switch too, by link-local addresses that exist only on that veth network.

    with NetnsCluster(ray_bin, workers=2) as cluster:
        cluster.address          # ray://169.254.91.10:10001 (Ray Client, on the head)
        cluster.kill_node("w1")  # every process of that node, kill -9

Needs root and iproute2. The switch is a namespace of its own so that this host's firewall
(Docker's FORWARD policy, br_netfilter) never sees the bridged traffic.

Hermetic: the cluster runs in Ray's token authentication mode with a token of its own, in a
file of its own (`RAY_AUTH_MODE`, `RAY_AUTH_TOKEN_PATH`), whatever the user's home holds: a
plain `ray.init()` once run on the machine leaves `~/.ray/auth_token`, which Ray would
otherwise pick up (and a client of this cluster would present). Its clients run with
`cluster.environ()`.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

SUBNET = "169.254.91"
HOST_ADDR = f"{SUBNET}.1"
HEAD_ADDR = f"{SUBNET}.10"
GCS_PORT = 6379
CLIENT_PORT = 10001
# Node loss is noticed in about a second and a half, not the default half a minute.
RAY_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


class NetnsCluster:
    def __init__(
        self,
        ray: str,
        workers: int = 2,
        cpus: int = 4,
        subnet: str = SUBNET,
        home: str | None = None,
    ) -> None:
        """`subnet`: the /24 the nodes and this host's leg take (`A.B.C`), and `home`: the
        HOME of its processes (Ray keeps its token in ~/.ray/auth_token, which a head
        starting writes anew): another cluster on this machine at the same time needs
        others, and its clients the same HOME."""
        self.ray = ray
        self.home = home
        self.subnet = subnet
        self.host_addr = f"{subnet}.1"
        self.head_addr = f"{subnet}.10"
        self.tag = secrets.token_hex(3)
        self.switch = f"eco-sw-{self.tag}"
        self.nodes = ["head"] + [f"w{i}" for i in range(1, workers + 1)]
        self.addrs = {n: f"{subnet}.{10 + i}" for i, n in enumerate(self.nodes)}
        self.cpus = cpus
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.temp = Path(f"/tmp/ecotone-ray-{self.tag}")
        self.host_veth = f"eco-h-{self.tag}"
        self.last_status = ""
        self.token_path = self.temp / "auth_token"

    def environ(self, **extra: str) -> dict[str, str]:
        """This process's environment for a node or a client of this cluster: its own auth
        mode and token file (never the user's `~/.ray/auth_token`), no RAY_ADDRESS."""
        env = dict(os.environ, **RAY_ENV)
        env.pop("RAY_ADDRESS", None)
        env.pop("RAY_AUTH_TOKEN", None)
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_path))
        if self.home is not None:
            env["HOME"] = self.home
        env.update(extra)
        return env

    @property
    def address(self) -> str:
        return f"ray://{self.head_addr}:{CLIENT_PORT}"

    def ns(self, node: str) -> str:
        return f"eco-{node}-{self.tag}"

    def __enter__(self) -> NetnsCluster:
        try:
            self.temp.mkdir(parents=True)
            fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))  # as `ray get-auth-token --generate` makes
            self._network()
            self._start("head")
            _wait_port(self.head_addr, CLIENT_PORT, 90)
            for node in self.nodes[1:]:
                self._start(node)
            self._wait_nodes(len(self.nodes), 90)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _network(self) -> None:
        run("ip", "netns", "add", self.switch)
        sw = ["ip", "netns", "exec", self.switch]
        run(*sw, "ip", "link", "add", "br0", "type", "bridge")
        run(*sw, "ip", "link", "set", "br0", "up")
        run(*sw, "ip", "link", "set", "lo", "up")
        # this host's leg
        run("ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", "up0")
        run("ip", "link", "set", "up0", "netns", self.switch)
        run(*sw, "ip", "link", "set", "up0", "master", "br0", "up")
        run("ip", "addr", "add", f"{self.host_addr}/24", "dev", self.host_veth)
        run("ip", "link", "set", self.host_veth, "up")
        for i, node in enumerate(self.nodes):
            name = self.ns(node)
            run("ip", "netns", "add", name)
            inside = ["ip", "netns", "exec", name]
            leg = f"n{i}"
            run(*sw, "ip", "link", "add", leg, "type", "veth", "peer", "name", "eth0")
            run(*sw, "ip", "link", "set", "eth0", "netns", name)
            run(*sw, "ip", "link", "set", leg, "master", "br0", "up")
            run(*inside, "ip", "link", "set", "lo", "up")
            run(*inside, "ip", "addr", "add", f"{self.addrs[node]}/24", "dev", "eth0")
            run(*inside, "ip", "link", "set", "eth0", "up")

    def _start(self, node: str) -> None:
        common = [
            f"--node-ip-address={self.addrs[node]}",
            f"--num-cpus={self.cpus}",
            "--block",
            "--disable-usage-stats",
            f'--resources={{"node:{node}": 1}}',
            f"--temp-dir={self.temp}/{node}",  # each "host" its own sessions and sockets
        ]
        if node == "head":
            args = [
                "--head",
                f"--port={GCS_PORT}",
                f"--ray-client-server-port={CLIENT_PORT}",
                "--include-dashboard=false",
            ]
        else:
            args = [f"--address={self.head_addr}:{GCS_PORT}"]
        log = open(self.temp.parent / f"ecotone-ray-{self.tag}-{node}.log", "wb")
        env = self.environ()
        self.procs[node] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(node), self.ray, "start", *args, *common],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def _wait_nodes(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["ip", "netns", "exec", self.ns("head"), self.ray, "status",
                 f"--address={self.head_addr}:{GCS_PORT}"],
                capture_output=True,
                text=True,
                env=self.environ(),
            )  # fmt: skip
            if done.returncode == 0 and _active_nodes(done.stdout) >= n:
                return
            self.last_status = done.stdout + done.stderr
            time.sleep(1)
        raise TimeoutError(
            f"the Ray cluster did not reach {n} nodes: {self.last_status}\n{self.logs()}"
        )

    def pids(self, node: str) -> list[int]:
        done = subprocess.run(
            ["ip", "netns", "pids", self.ns(node)], capture_output=True, text=True
        )
        return [int(p) for p in done.stdout.split()]

    def kill_node(self, node: str) -> None:
        """The node is lost: every process in its namespace is killed at once."""
        for _ in range(5):
            pids = self.pids(node)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def logs(self) -> str:
        out = []
        for node in self.nodes:
            path = self.temp.parent / f"ecotone-ray-{self.tag}-{node}.log"
            if path.exists():
                out.append(f"--- {node} ---\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def close(self) -> None:
        for node in reversed(self.nodes):
            self.kill_node(node)
            proc = self.procs.get(node)
            if proc is not None:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for node in self.nodes:
            subprocess.run(["ip", "netns", "del", self.ns(node)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True)
        subprocess.run(["rm", "-rf", str(self.temp)], capture_output=True)
        for node in self.nodes:
            (self.temp.parent / f"ecotone-ray-{self.tag}-{node}.log").unlink(missing_ok=True)


def _active_nodes(status: str) -> int:
    """How many nodes `ray status` lists as active."""
    count, active = 0, False
    for line in status.splitlines():
        stripped = line.strip()
        if stripped.startswith("Active:"):
            active = True
            continue
        if stripped.startswith(("Pending:", "Recent failures:")):
            active = False
        if active and stripped.startswith("1 node_"):
            count += 1
    return count


def _wait_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"nothing answers on {host}:{port}")
