"""The protocol's rules, checked the same way over every transport: the conformance suite's
protocol checks (`ecotone/conformance/protocol.py`) against the `probe` env served over
websocket, HTTP (native API and its WebSocket), tcp, unix, stdio and in process.

Before the protocol engine, HTTP's `step_many` took no per-session turn and skipped the
duplicate-session check only the WebSocket router made: `no_overlapping_calls` and
`batch_names_session_twice` failed over HTTP."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

import pytest

import ecotone.conformance
from ecotone.conformance import Status
from tests.conftest import run_server

PROTOCOL_CHECKS = list(ecotone.conformance.PROTOCOL_CHECKS)
ROUTES = ["websocket", "http", "http-ws", "tcp", "unix", "stdio", "inproc"]


@pytest.fixture(scope="module")
def probes() -> Iterator[dict[str, str]]:
    """The probe env served over every network transport; route -> URL."""
    with contextlib.ExitStack() as stack:
        sock_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="eco"))
        ws = stack.enter_context(run_server("probe"))
        http = stack.enter_context(run_server("probe", transport="http"))
        tcp = stack.enter_context(run_server("probe", transport="tcp"))
        unix = stack.enter_context(
            run_server("probe", transport="unix", host=os.path.join(sock_dir, "p.sock"))
        )
        yield {
            "websocket": ws.url,
            "http": http.url,
            "http-ws": http.ws_url,
            "tcp": tcp.url,
            "unix": unix.url,
            "stdio": "stdio:probe",
        }


def test_the_protocol_checks_are_the_ones_the_issue_names() -> None:
    assert PROTOCOL_CHECKS == [
        "pipelined_in_order",
        "batch_names_session_twice",
        "no_overlapping_calls",
        "close_waits_for_step",
        "errors_without_id",
        "unknown_and_foreign_sessions",
    ]


@pytest.mark.parametrize("route", ROUTES)
def test_every_transport_keeps_the_protocol_rules(probes: dict[str, str], route: str) -> None:
    if route == "inproc":
        report = ecotone.conformance.run("probe", checks=PROTOCOL_CHECKS, timeout=20)
    else:
        report = ecotone.conformance.run(url=probes[route], checks=PROTOCOL_CHECKS, timeout=20)
    failed = [r.line() for r in report.results if r.status is not Status.PASS]
    assert not failed, "\n".join(failed)
    notes = {r.name: r.note for r in report.results}
    assert "close waited" in notes["close_waits_for_step"]
    if route == "http":  # every HTTP request of a server shares one session owner
        assert "shares sessions" in notes["unknown_and_foreign_sessions"]


def test_without_the_probe_the_inside_checks_say_what_they_need(probes: dict[str, str]) -> None:
    report = ecotone.conformance.run("counter", checks=PROTOCOL_CHECKS, timeout=20)
    by_name = {r.name: r for r in report.results}
    skipped = by_name["no_overlapping_calls"]
    assert skipped.status is Status.SKIP and "ecotone serve probe" in skipped.reason
    assert by_name["close_waits_for_step"].status is Status.PASS
    assert "answer order only" in by_name["close_waits_for_step"].note
    assert all(
        r.status is Status.PASS for name, r in by_name.items() if name != "no_overlapping_calls"
    )
