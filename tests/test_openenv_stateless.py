"""OpenEnv's HTTP routes as its consumers use them: resets that never send the session id
back (plain curl, `openenv validate` run in a loop) leave nothing behind and never fill the
server; a client that does send it keeps its episode, and can close it; one client address
cannot take every session; and the websocket transport answers the plain GETs those clients
read beside `/ws`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ecotone.kernel import Limits
from tests.conftest import run_server, wait_until
from tests.httpraw import Http

JSON = {"content-type": "application/json"}


def _curl(port: int, path: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        ["curl", "-s", "-w", "\n%{http_code}", "-XPOST", f"http://127.0.0.1:{port}{path}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body)


def test_curl_resets_that_keep_no_session_never_fill_the_server() -> None:
    """Before: with --max-sessions 2 the third `curl -XPOST :P/reset -d '{}'` was refused, and
    each reset held a session for the 300 s idle timeout."""
    limits = Limits(max_sessions=2, stateless_grace=0.5)
    with run_server("counter", transport="http", limits=limits) as server:
        for _ in range(10):
            status, body = _curl(
                server.port, "/reset", "-H", "content-type: application/json", "-d", "{}"
            )
            assert status == 200, body
            assert body["observation"]["count"] == 0
        assert len(server.recorder.opened) == 10
        assert len(server.recorder.open_sessions) <= 2
        # Past the grace, nothing a stateless client made is left.
        assert wait_until(lambda: server.recorder.open_sessions == set(), timeout=5)
        reasons = [server.recorder.close_reason(s) for s, _ in server.recorder.opened]
        # Each reset replaced an older loose session of this client once the server was full
        # (its last few are kept otherwise); what was left closed unclaimed after the grace.
        assert set(reasons) <= {"replaced", "unclaimed"} and "unclaimed" in reasons, reasons
        status, body = _curl(server.port, "/reset", "-d", "{}")  # a form: refused, said why
        assert status == 415 and "application/json" in str(body["detail"])


def test_a_client_that_sends_the_id_back_keeps_its_episode_and_can_close_it() -> None:
    limits = Limits(stateless_grace=0.3)
    with run_server("counter", transport="http", limits=limits) as server:
        http = Http(server.port)
        reset = http.request("POST", "/reset", {})
        session = reset.headers["x-ecotone-session"]
        mine = {"x-ecotone-session": session}
        step = http.request("POST", "/step", {"action": {"delta": 2}}, mine)
        assert step.json()["observation"]["count"] == 2
        time.sleep(0.8)  # past the grace: named once, the session is kept
        again = http.request("POST", "/step", {"action": {"delta": 3}}, mine)
        assert again.json()["observation"]["count"] == 5
        closed = http.request("POST", "/close", b"", mine)
        assert closed.status == 200 and closed.json() == {"session_id": session, "closed": True}
        assert "Max-Age=0" in closed.headers["set-cookie"]
        assert session not in server.recorder.open_sessions
        gone = http.request("POST", "/step", {"action": {"delta": 1}}, mine)
        assert gone.status == 404
        assert http.request("POST", "/close", b"").status == 422  # names no session


def test_one_client_address_cannot_take_every_session() -> None:
    limits = Limits(max_http_sessions_per_client=3, stateless_grace=60)
    with run_server("counter", transport="http", limits=limits) as server:
        http = Http(server.port)
        for _ in range(3):  # sessions it keeps: named by a step each
            session = http.request("POST", "/reset", {}).headers["x-ecotone-session"]
            step = http.request(
                "POST", "/step", {"action": {"delta": 1}}, {"x-ecotone-session": session}
            )
            assert step.status == 200
        refused = http.request("POST", "/reset", {})
        assert refused.status == 503
        assert "max_http_sessions_per_client" in refused.json()["detail"]


def test_openenv_validate_run_in_a_loop_leaves_no_sessions(openenv_python: str) -> None:
    cli = Path(openenv_python).parent / "openenv"
    limits = Limits(max_sessions=3, stateless_grace=0.5)
    with run_server("counter", transport="http", limits=limits) as server:
        url = f"http://127.0.0.1:{server.port}"
        for _ in range(4):
            done = subprocess.run(
                [str(cli), "validate", "--url", url, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert json.loads(done.stdout)["passed"] is True
        assert wait_until(lambda: server.recorder.open_sessions == set(), timeout=5)


@pytest.mark.parametrize("path", ["/schema", "/metadata", "/health", "/openapi.json"])
def test_the_websocket_transport_answers_what_openenv_consumers_read_beside_ws(path: str) -> None:
    with (
        run_server("wordle") as ws_server,
        run_server("wordle", transport="http") as http_server,
    ):
        over_ws = Http(ws_server.port).request("GET", path)
        over_http = Http(http_server.port).request("GET", path)
        assert over_ws.status == over_http.status == 200
        if path != "/openapi.json":  # that one lists each server's own routes
            assert over_ws.json() == over_http.json()


WORDLE_OPS = [
    ["reset", {"seed": 2}],
    ["step", {"guess": "zzzzz"}],  # not in the word list
    ["step", {"guess": "crane"}],
    ["state"],
]


def test_with_invalid_action_observation_a_bad_guess_is_an_observation_the_model_reads(
    openenv_python: str,
) -> None:
    """verifiers' OpenEnv taskset shows the model each observation and ends the rollout on
    any error: in this mode one bad guess tells the model why, and the episode goes on."""
    from ecotone.kernel.config import OpenEnvConfig
    from tests.test_openenv_interop import DRIVER, run_openenv

    mode = OpenEnvConfig(invalid_action="observation")
    with (
        run_server("wordle", openenv=mode) as ws_server,
        run_server("wordle", transport="http", openenv=mode) as http_server,
    ):
        targets = {
            name: {"url": f"http://127.0.0.1:{s.port}", "ops": WORDLE_OPS}
            for name, s in (("ws", ws_server), ("http", http_server))
        }
        report = run_openenv(
            openenv_python, str(DRIVER), "episodes", json.dumps({"targets": targets})
        )
        for name in targets:
            for face in ("async", "sync"):
                first, bad, good, state = report[name][face]
                assert "result" in first, first
                refused = bad["result"]
                assert refused["reward"] == 0.0 and refused["done"] is False, refused
                assert "'zzzzz' is not in the word list" in refused["observation"]["error"]
                assert refused["observation"]["field"] == "guess"
                assert good["result"]["observation"]["guess"] == "crane"
                assert state["result"]["guesses"] == ["crane"]  # the bad guess used no try
        http = Http(http_server.port)
        session = http.request("POST", "/reset", {}).headers["x-ecotone-session"]
        named = {"x-ecotone-session": session}
        over_http = http.request("POST", "/step", {"action": {"guess": "qqqqq"}}, named)
        assert over_http.status == 200
        refusal = over_http.json()["observation"]
        assert "not in the word list" in refusal["error"]
        assert refusal["details"] == {"reason": "'qqqqq' is not in the word list"}, refusal
