"""Limits a hostile or broken peer hits, each answered clearly, none costing the server more
than the limit: backpressure on a peer that never reads, sessions per connection,
connections per address, a peer that stops reading, stalls mid-frame, or sits idle."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import time

import msgspec
import pytest

import ecotone
from ecotone.kernel import Limits
from ecotone.specs import wsframing as wsf
from tests import envs
from tests.conftest import run_server, wait_until
from tests.wsraw import HandshakeRefused, RawWebSocket


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _serve(*args: str, **limits: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    env.update({f"ECOTONE_LIMITS_{k.upper()}": v for k, v in limits.items()})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serve_with_test_envs", "serve", *args, "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"at ((?:ws|tcp)://\S+)", line)
    assert found, line
    return proc, found.group(1)


@pytest.mark.parametrize("op", ["step", "open"])
def test_a_peer_that_sends_and_never_reads_holds_the_server_to_a_bounded_size(op: str) -> None:
    """Before backpressure: +1.47 GB in under 30 s. Now the server stops reading once
    max_pending_requests wait (and a blocked write drops the peer after write_timeout)."""
    proc, url = _serve("slow", "--transport", "tcp")
    try:
        host, port = url.removeprefix("tcp://").rsplit(":", 1)
        with ecotone.connect(url) as probe:  # the server works, and stays working
            probe.reset()
        sock = socket.create_connection((host, int(port)))
        sock.settimeout(0.2)

        def frame(value: dict[str, object]) -> bytes:
            body = msgspec.json.encode(value)
            return struct.pack(">I", len(body)) + body

        session = None
        if op == "step":
            sock.sendall(frame({"op": "open", "id": 1}))
            sock.settimeout(5)
            session = msgspec.json.decode(sock.recv(65536)[4:])["session"]
            sock.sendall(frame({"op": "reset", "id": 2, "session": session}))
            sock.settimeout(0.2)
        before = _rss_kib(proc.pid)
        blob = (
            frame(
                {
                    "op": "step",
                    "id": 3,
                    "session": session,
                    "action": {"sleep": 0.01, "tag": "x" * 200},
                }
                if op == "step"
                else {"op": "open", "id": 3}
            )
            * 500
        )
        deadline = time.monotonic() + 5.0
        sent = 0
        while time.monotonic() < deadline:
            try:
                sent += sock.send(blob)
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                break  # the server dropped us: also bounded
        grown_mib = (_rss_kib(proc.pid) - before) / 1024
        assert grown_mib < 60, (grown_mib, sent)
        with ecotone.connect(url) as other:  # and everyone else is still served
            other.reset()
            assert other.step({"sleep": 0}).observation["steps"] == 1
        sock.close()
    finally:
        proc.kill()
        proc.wait()


def test_sessions_per_connection_are_capped_and_the_error_says_which_limit() -> None:
    with run_server("counter", limits=Limits(max_sessions_per_connection=3)) as server:
        with ecotone.Connection(server.url) as conn:
            for _ in range(3):
                conn.open()
            with pytest.raises(ecotone.CapacityError) as refused:
                conn.open()
            assert refused.value.details["scope"] == "connection"
            assert "max_sessions_per_connection" in refused.value.message
        with ecotone.connect(server.url) as other:  # another connection has its own share
            other.reset()


def test_connections_per_address_are_capped_with_a_503_or_an_error_frame() -> None:
    limits = Limits(max_connections_per_ip=2)
    with run_server("counter", limits=limits) as ws_server:
        held = [RawWebSocket(ws_server.url) for _ in range(2)]
        with pytest.raises(HandshakeRefused) as refused:
            RawWebSocket(ws_server.url)
        assert refused.value.status == 503
        held[0].close()
        assert wait_until(lambda: _can_connect_ws(ws_server.url))
        for ws in held[1:]:
            ws.close()
    with run_server("counter", transport="tcp", limits=limits) as tcp_server:
        host, port = tcp_server.url.removeprefix("tcp://").rsplit(":", 1)
        held_socks = [socket.create_connection((host, int(port))) for _ in range(2)]
        with socket.create_connection((host, int(port)), timeout=5) as third:
            data = third.recv(65536)
            error = msgspec.json.decode(data[4:])
            assert (error["code"], error["id"]) == ("capacity", None)
            assert third.recv(65536) == b""  # then closed
        for sock in held_socks:
            sock.close()


def _can_connect_ws(url: str) -> bool:
    try:
        RawWebSocket(url).close()
    except HandshakeRefused:
        return False
    return True


def test_a_peer_that_stops_reading_is_dropped_after_the_write_timeout() -> None:
    limits = Limits(write_timeout=0.5)
    with run_server("echo", limits=limits) as server:
        ws = RawWebSocket(server.url)
        session = ws.open_session()
        ws.request("reset", session=session)
        big = "x" * 60_000
        for i in range(300):  # ~18 MB of answers it will never read
            try:
                ws.send(
                    {"op": "step", "id": 100 + i, "session": session, "action": {"message": big}}
                )
            except OSError:
                break
        assert wait_until(lambda: server.recorder.close_reason(session) == "disconnect", 15)
        ws.sock.close()


def test_a_silent_connection_without_sessions_is_closed_one_with_sessions_kept() -> None:
    limits = Limits(idle_connection_timeout=0.5)
    with run_server("counter", limits=limits) as server:
        idle = RawWebSocket(server.url)
        assert idle.wait_closed(timeout=5) == 1000
        busy = RawWebSocket(server.url)
        session = busy.open_session()
        time.sleep(1.2)
        assert busy.request("reset", session=session)["op"] == "observation"
        busy.close()


def test_a_peer_stalled_in_the_middle_of_a_frame_is_dropped() -> None:
    limits = Limits(message_timeout=0.5)
    with run_server("counter", limits=limits) as server:
        ws = RawWebSocket(server.url)
        frame = wsf.encode(wsf.TEXT, b'{"op": "ping", "id": 1}', mask=True)
        ws.sock.sendall(frame[:7])  # and nothing more
        assert ws.wait_closed(timeout=5) == 1008
    with run_server("counter", transport="tcp", limits=limits) as server:
        host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(struct.pack(">I", 100) + b"{")
            assert sock.recv(65536) == b""  # closed


assert envs  # the slow env used above is the test suite's
