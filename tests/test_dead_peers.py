"""A peer that vanishes without closing (a half-open connection) loses its sessions.

The client runs in a network namespace this test makes, joined to the server by a veth pair;
cutting the link mid-session leaves the server's socket half-open: no FIN, no RST, nothing.
The server's next ping then goes unacknowledged, TCP_USER_TIMEOUT aborts the connection, and
the session is closed. Needs root and iproute2 (CI has both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ecotone.kernel import Limits
from tests.conftest import run_server, wait_until

HOST_ADDR = "169.254.77.1"  # link-local, on a link that exists only inside this test
PEER_ADDR = "169.254.77.2"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (`ip`) to make a network namespace",
)


def ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@pytest.fixture
def peer_namespace() -> Iterator[tuple[str, str]]:
    """A namespace `ns` with one veth end at PEER_ADDR; the other end (`link`) at HOST_ADDR."""
    tag = f"{os.getpid() % 100000}"
    ns, link, peer = f"ecotone-t{tag}", f"eco-h{tag}", f"eco-p{tag}"
    try:
        ip("netns", "add", ns)
        ip("link", "add", link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", ns)
        ip("addr", "add", f"{HOST_ADDR}/30", "dev", link)
        ip("link", "set", link, "up")
        ip("addr", "add", f"{PEER_ADDR}/30", "dev", peer, netns=ns)
        ip("link", "set", peer, "up", netns=ns)
        ip("link", "set", "lo", "up", netns=ns)
        yield ns, link
    finally:
        subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


CLIENT = """
import sys, time, ecotone
env = ecotone.connect(sys.argv[1])
env.reset()
print(env.session_id, flush=True)
time.sleep(60)
"""


def test_a_vanished_peer_is_detected_and_its_session_closed(
    peer_namespace: tuple[str, str],
) -> None:
    ns, link = peer_namespace
    limits = Limits(ping_interval=0.3, ping_timeout=1.0)
    with run_server("counter", host=HOST_ADDR, limits=limits) as server:
        client = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, server.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert client.stdout is not None
            session = client.stdout.readline().strip()
            assert session, client.stderr.read() if client.stderr else "no session id"
            assert session in server.recorder.open_sessions
            # Cut the wire. The client process lives on, but nothing reaches it any more.
            ip("link", "set", link, "down")
            assert wait_until(lambda: server.recorder.close_reason(session) == "disconnect", 20)
            assert client.poll() is None  # the peer never said goodbye: it was not asked to
        finally:
            client.kill()
            client.wait()
