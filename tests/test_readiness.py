"""Readiness that means "has room": `/ready` (and `ping`'s `ready` on every transport) says
not ready while the server holds `max_sessions` or is draining, and ready again when a session
closes; `/health` stays liveness only; `/metrics` exports sessions, capacity and occupancy
for an autoscaler. Real servers on loopback."""

from __future__ import annotations

import os
import tempfile

import pytest

import ecotone
from ecotone.kernel.config import AuthConfig
from ecotone.kernel.limits import Limits
from tests.conftest import run_server
from tests.httpraw import Http
from tests.test_observability import _scrape


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_a_full_server_is_not_ready_and_ready_again_when_a_session_closes(transport: str) -> None:
    with run_server("counter", transport=transport, limits=Limits(max_sessions=2)) as server:
        http = Http(server.port)
        reply = http.request("GET", "/ready")
        assert (reply.status, reply.json()) == (
            200,
            {"status": "ready", "sessions": 0, "capacity": 2},
        )
        with ecotone.Connection.open_url(server.url) as conn:
            assert conn.ready() is True
            first = conn.open()
            second = conn.open()
            reply = http.request("GET", "/ready")
            assert (reply.status, reply.json()) == (
                503,
                {"status": "full", "sessions": 2, "capacity": 2},
            )
            assert conn.ready() is False
            assert http.request("GET", "/health").status == 200  # liveness only
            seen = _scrape(server.port)
            assert seen["ecotone_sessions_capacity"] == 2
            assert seen["ecotone_sessions_occupancy"] == 1.0
            assert seen["ecotone_ready"] == 0 and seen["ecotone_draining"] == 0
            with pytest.raises(ecotone.CapacityError):
                conn.open()
            first.close()
            reply = http.request("GET", "/ready")
            assert (reply.status, reply.json()["status"]) == (200, "ready")
            assert conn.ready() is True
            seen = _scrape(server.port)
            assert seen["ecotone_sessions_occupancy"] == 0.5 and seen["ecotone_ready"] == 1
            second.close()


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_ping_says_whether_a_tcp_or_unix_server_has_room(transport: str) -> None:
    folder = tempfile.mkdtemp(prefix="eco-ready-")
    host = os.path.join(folder, "s.sock") if transport == "unix" else "127.0.0.1"
    with (
        run_server(
            "counter", transport=transport, host=host, limits=Limits(max_sessions=1)
        ) as server,
        ecotone.Connection.open_url(server.url) as conn,
    ):
        assert conn.ready() is True
        session = conn.open()
        assert conn.ready() is False
        session.close()
        assert conn.ready() is True


def test_the_probes_need_no_token_and_tell_nothing_else() -> None:
    auth = AuthConfig(token="s3cret")
    with run_server("counter", auth=auth, limits=Limits(max_sessions=1)) as server:
        http = Http(server.port)
        assert http.request("GET", "/ready").status == 200
        assert http.request("GET", "/health").status == 200
        assert http.request("GET", "/metrics").status == 401
        with ecotone.connect(server.url, token="s3cret"):
            assert http.request("GET", "/ready").status == 503
