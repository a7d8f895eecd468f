"""Leases over real servers and real client processes, on every transport: a live client's
idle session outlives many leases (the process's lease keeper renews it), a frozen client's
(SIGSTOP: its kernel still acknowledges every byte) is reclaimed within the lease plus one
sweep (websocket, http, tcp, unix; stdio too, whose server is the client's child), and,
woken up, the client hears its session was reclaimed. A frozen seat's holder loses
its seat the same way. The issue's 1,000 sessions over 20+ processes killed, frozen and cut
off: tests/test_lease_crowd.py."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ecotone
from ecotone.client.keeper import keeps
from ecotone.kernel import Limits
from ecotone.kernel.leases import sweep_period
from tests.conftest import RunningServer, run_server, wait_until

LEASE = 1.0
SWEEP = sweep_period(LEASE) or 0.0
SLACK = 0.5
"""Seconds allowed past the lease plus one sweep: the sweep's own work and this test's
polling, on a loaded 2-core machine."""

HOLDER = """
import sys, ecotone
url, n = sys.argv[1], int(sys.argv[2])
connection = ecotone.Connection.open_url(url)
sessions = []
for _ in range(n):
    session = connection.open()
    session.reset()
    sessions.append(session)
print(" ".join(s.session_id for s in sessions), flush=True)
for line in sys.stdin:
    try:
        counts = [s.step({"delta": 1}).observation["count"] for s in sessions]
        print("stepped", sum(counts), flush=True)
    except ecotone.ServerError as exc:
        print("error", exc.code, exc.details.get("reclaimed"), flush=True)
"""


class Holder:
    """A client process holding `n` sessions on one connection to `url`, idle; each line
    sent to it steps them all once."""

    def __init__(self, url: str, n: int = 1) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.readline()
        assert line, self.process.stderr.read() if self.process.stderr else "no session ids"
        self.sessions = line.split()

    def readline(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def step(self) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write("step\n")
        self.process.stdin.flush()
        return self.readline()

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.thaw()
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(params=["websocket", "http", "tcp", "unix"])
def leasing_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    transport = request.param
    host = str(tmp_path / "ecotone.sock") if transport == "unix" else "127.0.0.1"
    with run_server("counter", transport=transport, host=host, limits=Limits(lease=LEASE)) as s:
        yield s


def test_a_frozen_clients_session_is_reclaimed_and_a_live_idle_ones_kept(
    leasing_server: RunningServer,
) -> None:
    server = leasing_server
    live, frozen = Holder(server.url), Holder(server.url)
    try:
        (kept,), (lost,) = live.sessions, frozen.sessions
        frozen.freeze()
        stopped = time.monotonic()
        assert wait_until(lambda: server.recorder.close_reason(lost) == "lease", 10, 0.01)
        took = time.monotonic() - stopped
        assert took <= LEASE + SWEEP + SLACK, took  # the lease plus one sweep
        time.sleep(max(0.0, stopped + 3 * LEASE - time.monotonic()))
        assert kept in server.recorder.open_sessions  # idle for 3 leases: kept alive
        assert live.step() == "stepped 1"
        frozen.thaw()
        assert frozen.step() == "error unknown_session lease"  # it hears why
    finally:
        live.stop()
        frozen.stop()


def test_a_client_opened_without_keepalive_loses_its_idle_session(
    leasing_server: RunningServer,
) -> None:
    with ecotone.connect(leasing_server.url, keepalive=False) as env:
        env.reset()
        recorder = leasing_server.recorder
        assert wait_until(lambda: recorder.close_reason(env.session_id) == "lease", 10)
        with pytest.raises(ecotone.ServerError) as caught:
            env.step({"delta": 1})
        assert caught.value.code == "unknown_session"
        assert caught.value.details["reclaimed"] == "lease"
    # closing a session the server reclaimed is not an error: it is closed


def test_keepalive_renews_by_hand_what_a_connection_holds(
    leasing_server: RunningServer,
) -> None:
    with ecotone.Connection.open_url(leasing_server.url, keepalive=False) as connection:
        first, second = connection.open(), connection.open()
        for _ in range(6):  # 1.8 s: the lease is 1 s
            time.sleep(LEASE * 0.3)
            assert connection.keepalive() == []
        second.close()
        time.sleep(LEASE + 2 * SWEEP)  # nothing renews `first` now
        assert connection.keepalive() == [first.session_id]
        assert connection.keepalive() == []  # forgotten: it is gone


def test_an_openenv_client_that_stops_loses_its_session_to_the_lease() -> None:
    """OpenEnv's protocol has no keepalive: a session of its HTTP routes, named once (so no
    longer loose), lives as long as requests come, then is reclaimed with the same rule."""
    with run_server("counter", transport="http", limits=Limits(lease=LEASE)) as server:
        url = server.url.replace("http://", "openenv+http://")
        with ecotone.connect(url) as env:
            env.reset()
            env.step({"delta": 1})
            sessions = server.recorder.open_sessions
            assert len(sessions) == 1
            (session,) = sessions
            assert wait_until(lambda: server.recorder.close_reason(session) == "lease", 10)


SEATED = """
import sys, ecotone
url, key = sys.argv[1], sys.argv[2]
connection = ecotone.Connection.open_url(url)
seat = connection.join(key)
print(seat.seat, flush=True)
sys.stdin.readline()
"""


def test_a_frozen_seat_holder_loses_its_seat_after_the_lease() -> None:
    with (
        run_server("cards_threaded", limits=Limits(lease=LEASE)) as server,
        ecotone.Connection.open_url(server.url) as connection,
        ecotone.Connection.open_url(server.url) as player,
    ):
        owner = connection.open("cards_threaded")
        keys = owner.seat_keys()
        owner.reset(seed=1)
        north = player.join(keys.keys["north"])  # this (live) process holds north
        process = subprocess.Popen(
            [sys.executable, "-c", SEATED, server.url, keys.keys["south"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "south"
            os.kill(process.pid, signal.SIGSTOP)
            hand = north.observe().result.observation["hand"]
            north.play({"card": hand[0]})
            view = north.observe(wait=True, timeout=10)  # south's turn never comes
            assert view.lost == ["south"] and view.turn is None
            time.sleep(2 * LEASE)  # north, live and idle, keeps its seat
            with pytest.raises(ecotone.ServerError) as caught:
                north.play({"card": hand[1]})
            assert caught.value.code == "episode_done"  # (not forbidden: still its seat)
            metrics = _metrics(server.url)
            assert metrics["ecotone_seats_reclaimed_total"] == 1.0
            assert metrics['ecotone_leases{kind="seat"}'] == 1.0  # north's
            assert metrics['ecotone_leases{kind="session"}'] == 1.0
            assert metrics["ecotone_lease_seconds"] == LEASE
            assert 0.0 <= metrics["ecotone_lease_oldest_seconds"] < LEASE
        finally:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()


def _metrics(url: str) -> dict[str, float]:
    """`GET /metrics` of the server at `url` (ws:// or http://), by series."""
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    series = (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))
    return {name: float(value) for name, _, value in series if name}


def _post(port: int, path: str) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=b"", headers={"content-type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def test_the_http_keepalive_route_renews_and_says_404_once_reclaimed() -> None:
    with run_server("counter", transport="http", limits=Limits(lease=LEASE)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        status, opened = _post(port, "/v1/sessions")
        assert status == 200 and opened["lease"] == LEASE
        session = str(opened["session"])
        for _ in range(4):  # 1.2 s: past the lease, renewed every 0.3 s
            time.sleep(LEASE * 0.3)
            status, kept = _post(port, f"/v1/sessions/{session}/keepalive")
            assert (status, kept["op"], kept.get("unknown", [])) == (200, "kept", [])
        assert wait_until(lambda: server.recorder.close_reason(session) == "lease", 10)
        status, gone = _post(port, f"/v1/sessions/{session}/keepalive")
        assert (status, gone["code"]) == (404, "unknown_session")
        assert gone["details"] == {"reclaimed": "lease"}
        status, never = _post(port, "/v1/sessions/nosuch/keepalive")
        assert (status, never["code"]) == (404, "unknown_session")


def test_a_session_dropped_without_closing_is_left_to_the_lease() -> None:
    """The keeper renews what the process still holds: a session's client dropped without
    `close` (a TRL env instance, say) is no longer renewed, and the server takes it back."""
    with (
        run_server("counter", limits=Limits(lease=LEASE)) as server,
        ecotone.Connection.open_url(server.url) as connection,
    ):
        kept, dropped = connection.open(), connection.open()
        dropped_id = dropped.session_id
        del dropped
        assert wait_until(lambda: server.recorder.close_reason(dropped_id) == "lease", 10)
        assert kept.session_id in server.recorder.open_sessions
        assert connection.leases()[0] == {kept.session_id: LEASE}


ALONE = """
import sys, threading, ecotone
from ecotone.kernel import polling
env = ecotone.connect(sys.argv[1])  # holds a leased session: the keeper's thread starts
print(threading.active_count(), polling.alone(), flush=True)
"""


def test_the_keepers_thread_leaves_the_blocking_clients_busy_polling_on() -> None:
    """The keeper is a sleeper: a blocking client in a process of one thread of its own
    still spins on its reads (`ecotone.kernel.polling.alone`)."""
    with run_server("counter", limits=Limits(lease=LEASE)) as server:
        done = subprocess.run(
            [sys.executable, "-c", ALONE, server.url], capture_output=True, text=True, timeout=60
        )
    assert done.stdout.split() == ["2", "True"], done.stderr


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("ws://127.0.0.1:1", True),
        ("http://h:1", True),
        ("tcp://h:1", True),
        ("unix:///tmp/s", True),
        ("inproc://counter", False),
        ("stdio:counter", False),
        ("openenv+http://h:1", False),
    ],
)
def test_the_keeper_leaves_alone_the_servers_a_second_connection_cannot_reach(
    url: str, kept: bool
) -> None:
    assert keeps(url) is kept


STDIO = """
import sys, ecotone
env = ecotone.connect("stdio:counter")  # the server is this process's child
env.reset()
print(env.session_id, flush=True)
for line in sys.stdin:
    try:
        print("stepped", env.step({"delta": 1}).observation["count"], flush=True)
    except ecotone.ServerError as exc:
        print("error", exc.code, exc.details.get("reclaimed"), flush=True)
"""


def test_over_stdio_a_frozen_clients_session_is_reclaimed_too() -> None:
    """The server is the client's child, and lives on while its parent is frozen: the same
    lease takes the session (the keeper leaves stdio alone: a second connection would start
    another server). The child inherits the lease and JSON logs from the environment."""
    environ = {
        **os.environ,
        "ECOTONE_LIMITS_LEASE": str(LEASE),
        "ECOTONE_LOG_FORMAT": "json",
        "ECOTONE_LOG_LEVEL": "info",
    }
    client = subprocess.Popen(
        [sys.executable, "-c", STDIO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    closed: list[tuple[str, str]] = []

    def read_logs() -> None:
        assert client.stderr is not None
        for line in client.stderr:
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == "session_closed":
                    closed.append((entry["session"], entry["reason"]))

    threading.Thread(target=read_logs, daemon=True).start()
    try:
        assert client.stdout is not None and client.stdin is not None
        session = client.stdout.readline().strip()
        assert session
        os.kill(client.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        assert wait_until(lambda: (session, "lease") in closed, 10, 0.01)
        assert time.monotonic() - stopped <= LEASE + SWEEP + SLACK
        os.kill(client.pid, signal.SIGCONT)
        client.stdin.write("step\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "error unknown_session lease"
    finally:
        os.kill(client.pid, signal.SIGCONT)
        client.kill()
        client.wait()
        for stream in (client.stdin, client.stdout):
            if stream is not None:
                stream.close()
