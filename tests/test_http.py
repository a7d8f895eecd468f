"""The http transport against a real server on 127.0.0.1, driven with the stdlib's http.client
(keep-alive: many requests on one connection) and raw sockets for what a well-behaved client
never sends. The server runs in a background thread (BackgroundServer)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage
from wsproto.frame_protocol import FrameProtocol

import ecotone
import ecotone.server.http11.reader
from ecotone.kernel import Limits
from ecotone.kernel.config import ServerConfig
from ecotone.server.runner import Runner
from ecotone.serving import build_engine
from ecotone.specs.http import HttpRequest, HttpResponse
from ecotone.transports.http.server import HttpServer
from tests.conftest import RunningServer, make_registry, run_server, wait_until
from tests.httpraw import JSON, MSGPACK, Http, raw_exchange
from tests.wsraw import HandshakeRefused, RawWebSocket


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with run_server("counter", transport="http") as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[Http]:
    c = Http(server.port)
    yield c
    c.close()


def started_episode(port: int, start: int = 0) -> str:
    """A session, reset, opened on its own connection (the one the errors must not disturb)."""
    c = Http(port)
    try:
        sid = c.open_session()
        reply = c.request("POST", f"/v1/sessions/{sid}/reset", {"options": {"start": start}})
        assert reply.status == 200, reply
        return sid
    finally:
        c.close()


def assert_still_steps(port: int, sid: str, expected_count: int) -> None:
    """The session opened before the errors steps on from where it was."""
    c = Http(port)
    try:
        reply = c.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
        assert reply.status == 200, reply
        assert reply.json()["observation"]["count"] == expected_count
    finally:
        c.close()


# --- the native API --------------------------------------------------------------------------


def test_an_episode_over_one_keep_alive_connection(client: Http) -> None:
    sid = client.open_session()
    sock = client.sock
    assert sock is not None
    reset = client.request(
        "POST", f"/v1/sessions/{sid}/reset", {"seed": 3, "options": {"start": 2}}
    )
    assert reset.status == 200
    assert reset.headers["content-type"] == "application/json"
    assert reset.json()["op"] == "observation"
    assert reset.json()["observation"]["count"] == 2
    counts = []
    for delta in (3, -1, 4):
        step = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": delta}})
        assert step.status == 200
        counts.append(step.json()["observation"]["count"])
        assert step.json()["observation"]["reward"] == delta
    assert counts == [5, 4, 8]
    state = client.request("GET", f"/v1/sessions/{sid}/state")
    assert state.status == 200
    assert state.json()["state"]["count"] == 8
    assert state.json()["state"]["step_count"] == 3
    closed = client.request("DELETE", f"/v1/sessions/{sid}")
    assert closed.status == 200
    assert closed.json() == {"op": "closed", "session": sid, "id": closed.json()["id"]}
    assert client.sock is sock  # every request went over the same TCP connection


def test_a_session_persists_across_tcp_connections(server: RunningServer) -> None:
    first = Http(server.port)
    sid = first.open_session()
    first.close()
    second = Http(server.port)
    assert second.request("POST", f"/v1/sessions/{sid}/reset").status == 200
    step = second.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 7}})
    assert step.json()["observation"]["count"] == 7
    second.close()
    third = Http(server.port)
    state = third.request("GET", f"/v1/sessions/{sid}/state")
    assert (state.status, state.json()["state"]["count"]) == (200, 7)
    third.close()


def test_a_deleted_session_is_gone(client: Http) -> None:
    sid = client.open_session()
    assert client.request("DELETE", f"/v1/sessions/{sid}").status == 200
    again = client.request("DELETE", f"/v1/sessions/{sid}")
    assert (again.status, again.json()["code"]) == (404, "unknown_session")
    step = client.request("POST", f"/v1/sessions/{sid}/reset")
    assert (step.status, step.json()["code"]) == (404, "unknown_session")


def test_describe_names_the_env_and_its_schemas(client: Http) -> None:
    reply = client.request("GET", "/v1/describe")
    assert reply.status == 200
    info = reply.json()["info"]
    assert info["name"] == "counter"
    assert "delta" in info["action_schema"]["properties"]


def frames_episode(client: Http, codec: str) -> list[Any]:
    """open, reset, steps and state as raw frames on POST /v1/frames, in one codec."""
    encode = msgspec.msgpack.encode if codec == "msgpack" else msgspec.json.encode
    decode = msgspec.msgpack.decode if codec == "msgpack" else msgspec.json.decode
    headers = MSGPACK if codec == "msgpack" else JSON
    kind = headers["content-type"]

    def call(frame: dict[str, Any]) -> dict[str, Any]:
        reply = client.request("POST", "/v1/frames", encode(frame), headers)
        assert reply.status == 200, reply
        assert reply.headers["content-type"] == kind
        answer: dict[str, Any] = decode(reply.body)
        assert answer["id"] == frame["id"]
        return answer

    sid = call({"op": "open", "id": 1})["session"]
    out: list[Any] = [call({"op": "reset", "id": 2, "session": sid, "seed": 1})["observation"]]
    for rid, delta in enumerate((2, 5, -3), start=3):
        step = {"op": "step", "id": rid, "session": sid, "action": {"delta": delta}}
        out.append(call(step)["observation"])
    state = call({"op": "state", "id": 9, "session": sid})["state"]
    out.append({k: v for k, v in state.items() if k != "episode_id"})
    assert call({"op": "close", "id": 10, "session": sid})["op"] == "closed"
    return out


def test_json_and_msgpack_frames_give_the_same_results(client: Http) -> None:
    over_json = frames_episode(client, "json")
    over_msgpack = frames_episode(client, "msgpack")
    assert over_json == over_msgpack
    assert [o["count"] for o in over_json[:-1]] == [0, 2, 7, 4]
    assert over_json[-1]["step_count"] == 3


def test_a_frame_for_a_session_opened_by_the_convenience_routes(client: Http) -> None:
    sid = client.open_session()
    frame = {"op": "reset", "id": "r1", "session": sid, "options": {"start": 4}}
    reply = client.request("POST", "/v1/frames", msgspec.msgpack.encode(frame), MSGPACK)
    assert reply.status == 200
    assert msgspec.msgpack.decode(reply.body)["observation"]["count"] == 4
    state = client.request("GET", f"/v1/sessions/{sid}/state")
    assert state.json()["state"]["count"] == 4


# --- error codes and their statuses ------------------------------------------------------------


def test_an_unknown_session_is_404(client: Http) -> None:
    for method, path, body in (
        ("POST", "/v1/sessions/nope/reset", None),
        ("POST", "/v1/sessions/nope/step", {"action": {"delta": 1}}),
        ("GET", "/v1/sessions/nope/state", None),
        ("DELETE", "/v1/sessions/nope", None),
    ):
        reply = client.request(method, path, body)
        assert reply.status == 404, (method, path)
        assert reply.json()["code"] == "unknown_session"
        assert reply.json()["session"] == "nope"


def test_an_invalid_action_is_422_naming_the_field(server: RunningServer, client: Http) -> None:
    sid = started_episode(server.port, start=10)
    reply = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": "x"}})
    assert reply.status == 422
    assert reply.json()["code"] == "invalid_action"
    assert reply.json()["details"]["field"] == "delta"
    assert_still_steps(server.port, sid, 11)  # the bad action changed nothing


def test_a_step_before_reset_is_409(client: Http) -> None:
    sid = client.open_session()
    reply = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
    assert (reply.status, reply.json()["code"]) == (409, "reset_required")


def test_a_step_after_the_episode_ended_is_409(client: Http) -> None:
    sid = client.open_session()
    client.request("POST", f"/v1/sessions/{sid}/reset", {"options": {"target": 1}})
    done = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
    assert done.json()["observation"]["done"] is True
    reply = client.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
    assert (reply.status, reply.json()["code"]) == (409, "episode_done")


def test_capacity_is_503_and_frees_up_when_a_session_closes() -> None:
    with run_server("counter", transport="http", limits=Limits(max_sessions=1)) as server:
        c = Http(server.port)
        sid = c.open_session()
        refused = c.request("POST", "/v1/sessions")
        assert refused.status == 503
        assert refused.json()["code"] == "capacity"
        assert refused.json()["details"] == {"active": 1, "limit": 1}
        assert c.request("DELETE", f"/v1/sessions/{sid}").status == 200
        c.open_session()
        c.close()


def test_an_oversized_body_is_413_and_the_connection_closed() -> None:
    with run_server("counter", transport="http", limits=Limits(max_frame_bytes=1000)) as server:
        sid = started_episode(server.port)
        c = Http(server.port)
        body = {"action": {"delta": 1}, "padding": "x" * 5000}
        reply = c.request("POST", f"/v1/sessions/{sid}/step", body)
        assert reply.status == 413
        assert reply.json()["code"] == "too_large"
        assert reply.json()["details"]["limit"] == 1000
        assert reply.headers["connection"] == "close"
        assert c.sock is None  # http.client dropped the connection the server closed
        c.close()
        assert_still_steps(server.port, sid, 1)


def test_an_oversized_chunked_body_is_413() -> None:
    with run_server("counter", transport="http", limits=Limits(max_frame_bytes=1000)) as small:
        chunk = b"x" * 3000
        request = (
            b"POST /v1/frames HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk)
        )
        received, closed = raw_exchange(small.port, request)
    assert received.startswith(b"HTTP/1.1 413 ")
    assert b'"too_large"' in received
    assert closed


def test_a_wrong_content_type_is_415(server: RunningServer, client: Http) -> None:
    sid = started_episode(server.port)
    text = {"content-type": "text/plain"}
    for path in ("/v1/frames", f"/v1/sessions/{sid}/step", "/v1/sessions"):
        reply = client.request("POST", path, b'{"action": {"delta": 1}}', text)
        assert reply.status == 415, path
        assert reply.json()["code"] == "invalid_frame"
        assert "text/plain" in reply.json()["message"]
    assert_still_steps(server.port, sid, 1)


def test_malformed_json_is_400(server: RunningServer, client: Http) -> None:
    sid = started_episode(server.port)
    for path in (f"/v1/sessions/{sid}/step", f"/v1/sessions/{sid}/reset", "/v1/frames"):
        reply = client.request("POST", path, b'{"action": {"delta": 1', JSON)
        assert reply.status == 400, path
        assert reply.json()["code"] == "invalid_frame"
    assert_still_steps(server.port, sid, 1)


def test_a_step_without_a_body_is_400(server: RunningServer, client: Http) -> None:
    sid = started_episode(server.port)
    reply = client.request("POST", f"/v1/sessions/{sid}/step")
    assert (reply.status, reply.json()["code"]) == (400, "invalid_frame")
    wrong = client.request("POST", f"/v1/sessions/{sid}/step", {"delta": 1})
    assert (wrong.status, wrong.json()["details"]["field"]) == (400, "action")
    assert_still_steps(server.port, sid, 1)


def test_frames_that_are_not_requests_are_400_and_unsupported_ops_501(client: Http) -> None:
    unknown = client.request("POST", "/v1/frames", {"op": "teleport", "id": 1})
    assert (unknown.status, unknown.json()["code"]) == (400, "unknown_op")
    sid = client.open_session()
    tools = client.request("POST", "/v1/frames", {"op": "list_tools", "id": 2, "session": sid})
    assert (tools.status, tools.json()["code"]) == (501, "unsupported")  # counter has no tools
    env = client.request("POST", "/v1/sessions", {"env": "nope"})
    assert (env.status, env.json()["code"]) == (404, "unknown_env")


def test_an_unknown_route_is_404(client: Http) -> None:
    for path in ("/nope", "/v1/sessions/a/b/c", "/v2/frames"):
        reply = client.request("GET", path)
        assert (reply.status, reply.json()) == (404, {"detail": "Not Found"}), path


def test_a_wrong_method_is_405_with_an_allow_header(client: Http) -> None:
    reply = client.request("GET", "/v1/sessions")
    assert (reply.status, reply.json()) == (405, {"detail": "Method Not Allowed"})
    assert reply.headers["allow"] == "POST"
    reply = client.request("PUT", "/v1/sessions/abc")
    assert reply.status == 405
    assert reply.headers["allow"] == "DELETE"
    reply = client.request("POST", "/v1/sessions/abc/state")
    assert (reply.status, reply.headers["allow"]) == (405, "GET")


def test_a_client_stalling_inside_its_request_head_gets_408_and_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ecotone.server.http11.reader, "REQUEST_TIMEOUT", 0.5)
    with run_server("counter", transport="http") as server:
        sid = started_episode(server.port)
        received, closed = raw_exchange(
            server.port, b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        )
        assert received.startswith(b"HTTP/1.1 408 "), received
        assert b"connection: close" in received.lower()
        assert closed
        assert_still_steps(server.port, sid, 1)


def test_a_client_stalling_inside_its_body_gets_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ecotone.server.http11.reader, "REQUEST_TIMEOUT", 0.5)
    with run_server("counter", transport="http") as server:
        head = b"POST /v1/frames HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
        received, closed = raw_exchange(server.port, head)
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert closed


def test_garbage_bytes_get_400_and_are_dropped(server: RunningServer) -> None:
    sid = started_episode(server.port)
    for garbage in (
        b"\x00\x01\x02\xff not http at all\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
    ):
        received, closed = raw_exchange(server.port, garbage)
        assert received.startswith(b"HTTP/1.1 400 "), received
        assert closed
    assert_still_steps(server.port, sid, 1)


def test_head_answers_with_headers_only_and_keeps_the_connection(client: Http) -> None:
    sid = client.open_session()
    sock = client.sock
    for path in ("/health", f"/v1/sessions/{sid}/state", "/v1/describe"):
        get = client.request("GET", path)
        head = client.request("HEAD", path)
        assert (head.status, head.body) == (get.status, b""), path
        assert head.headers["content-type"] == get.headers["content-type"]
        assert int(head.headers["content-length"]) == len(get.body)  # the GET's (RFC 9110)
    assert client.request("HEAD", "/v1/sessions").status == 405  # POST only
    assert client.request("GET", "/health").json() == {"status": "healthy"}
    assert client.sock is sock


# --- WebSocket on the same port ----------------------------------------------------------------


def test_the_native_websocket_is_served_at_the_http_port(server: RunningServer) -> None:
    with ecotone.connect(server.ws_url) as env:
        assert env.reset(seed=1, start=5).observation["count"] == 5
        assert env.step({"delta": 2}).observation["count"] == 7
        assert env.state()["count"] == 7
    with RawWebSocket(server.ws_url, path="/") as ws:
        assert ws.request("ping")["op"] == "pong"


def test_a_websocket_peer_cannot_use_a_session_opened_over_http(server: RunningServer) -> None:
    c = Http(server.port)
    sid = c.open_session()
    with RawWebSocket(server.ws_url) as ws:
        reply = ws.request("reset", session=sid)
        assert reply["code"] == "unknown_session"
    assert c.request("POST", f"/v1/sessions/{sid}/reset").status == 200
    c.close()


def test_a_websocket_upgrade_to_an_unknown_path_is_refused(server: RunningServer) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        RawWebSocket(server.ws_url, path="/nowhere")
    assert refused.value.status == 404
    c = Http(server.port)
    assert c.request("GET", "/health").status == 200
    c.close()


def test_pipelined_requests_in_one_write_are_answered_in_order(server: RunningServer) -> None:
    requests = b"".join(
        b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path
        for path in (b"/health", b"/v1/describe", b"/nope")
    )
    requests += b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    received, closed = raw_exchange(server.port, requests)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", received)
    assert statuses == [b"200", b"200", b"404", b"200"]
    assert received.index(b'"status":"healthy"') < received.index(b'"name":"counter"')
    assert closed  # the last request asked for it


def test_a_websocket_message_sent_with_the_handshake_is_not_lost(server: RunningServer) -> None:
    client = WSConnection(ConnectionType.CLIENT)
    data = client.send(Request(host="127.0.0.1", target="/"))
    data += FrameProtocol(client=True, extensions=[]).send_data('{"op":"ping","id":7}', True)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)  # the first message rides in the same write as the handshake
        events: list[Any] = []
        while not any(isinstance(e, TextMessage) for e in events):
            client.receive_data(sock.recv(65536))
            events += client.events()
    assert isinstance(events[0], AcceptConnection)
    assert json.loads(events[-1].data) == {"op": "pong", "id": 7, "ready": True}


def test_concurrent_requests_on_one_session_all_apply(server: RunningServer) -> None:
    sid = started_episode(server.port)
    failures: list[Any] = []

    def worker() -> None:
        c = Http(server.port)
        for _ in range(25):
            reply = c.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}})
            if reply.status != 200:
                failures.append(reply)
        c.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert failures == []
    c = Http(server.port)
    state = c.request("GET", f"/v1/sessions/{sid}/state").json()["state"]
    assert (state["count"], state["step_count"]) == (100, 100)
    c.close()


def test_an_idle_session_is_reaped_and_then_unknown() -> None:
    with run_server("counter", transport="http", limits=Limits(lease=0.2)) as server:
        c = Http(server.port)
        sid = c.open_session()
        assert wait_until(lambda: server.recorder.close_reason(sid) == "lease")
        reply = c.request("POST", f"/v1/sessions/{sid}/reset")
        assert (reply.status, reply.json()["code"]) == (404, "unknown_session")
        c.close()


async def test_requests_naming_dead_sessions_leave_no_per_session_state() -> None:
    engine = build_engine(ServerConfig(env="counter"), make_registry())
    async with trio.open_nursery() as nursery:
        await _dead_sessions_leave_nothing(HttpServer(Runner(engine, nursery)))
        nursery.cancel_scope.cancel()
    assert len(engine.sessions) == 0


async def _dead_sessions_leave_nothing(routes: HttpServer) -> None:
    async def call(method: str, path: str, body: bytes = b"", session: str = "") -> int:
        headers = {"x-ecotone-session": session} if session else {}
        if body:
            headers["content-type"] = "application/json"
        response = await routes.handle(HttpRequest(method, path, {}, headers, body))
        assert isinstance(response, HttpResponse)
        return response.status

    action = b'{"action": {"delta": 1}}'
    for i in range(20):
        assert await call("GET", f"/v1/sessions/nope{i}/state") == 404
        assert await call("POST", "/step", action, session=f"gone{i}") == 404
    opened = await routes.handle(HttpRequest("POST", "/v1/sessions", {}, {}, b""))
    assert isinstance(opened, HttpResponse)
    sid = json.loads(opened.body)["session"]
    assert await call("POST", f"/v1/sessions/{sid}/reset") == 200
    assert await call("POST", f"/v1/sessions/{sid}/step", action) == 200
    assert await call("DELETE", f"/v1/sessions/{sid}") == 200


def test_no_error_disturbs_a_session_opened_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ecotone.server.http11.reader, "REQUEST_TIMEOUT", 0.5)
    limits = Limits(max_sessions=2, max_frame_bytes=1000)
    with run_server("counter", transport="http", limits=limits) as server:
        sid = started_episode(server.port, start=100)
        c = Http(server.port)
        other = c.open_session()  # the second and last slot
        statuses = [
            c.request("POST", "/v1/sessions").status,
            c.request("POST", f"/v1/sessions/{other}/step", {"action": {"delta": 1}}).status,
            c.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": "x"}}).status,
            c.request("POST", f"/v1/sessions/{sid}/step", {"action": {"delta": 1}, "x": 1}).status,
            c.request("POST", f"/v1/sessions/{sid}/step").status,
            c.request("POST", f"/v1/sessions/{sid}/step", b"{", JSON).status,
            c.request("POST", f"/v1/sessions/{sid}/step", b"{}", {"content-type": "a/b"}).status,
            c.request("GET", f"/v1/sessions/{sid}/step").status,
            c.request("GET", f"/v1/sessions/{sid}/nope").status,
            c.request("POST", "/v1/sessions/unknown/reset").status,
            c.request("POST", "/v1/frames", {"op": "close", "id": 1, "session": "unknown"}).status,
            c.request("POST", "/v1/frames", {"op": "step", "id": 2, "session": sid}).status,
            c.request("POST", f"/v1/sessions/{sid}/step", {"action": {"d": "x" * 2000}}).status,
        ]
        assert statuses == [503, 409, 422, 400, 400, 400, 415, 405, 404, 404, 404, 400, 413]
        c.close()
        assert raw_exchange(server.port, b"POST /v1/frames HTTP/1.1\r\n")[0][9:12] == b"408"
        assert raw_exchange(server.port, b"\x16\x03\x01 tls?\r\n\r\n")[0][9:12] == b"400"
        assert_still_steps(server.port, sid, 101)
        assert server.recorder.open_sessions == {sid, other}


def test_stopping_abandons_queued_steps_instead_of_running_them() -> None:
    """Eight 1 s steps of one session queued by concurrent HTTP requests: stopping waits for
    the step that runs (a worker thread cannot be interrupted), not for the seven behind it."""
    import time

    from ecotone.serving import BackgroundServer

    config = ServerConfig(env="slow", transport="http", port=0)
    server = BackgroundServer(config, registry=make_registry()).start()
    c = Http(int(server.url.rsplit(":", 1)[1]))
    sid = c.open_session()
    assert c.request("POST", f"/v1/sessions/{sid}/reset").status == 200
    c.close()

    def step() -> None:
        with contextlib.suppress(OSError):
            Http(int(server.url.rsplit(":", 1)[1])).request(
                "POST", f"/v1/sessions/{sid}/step", {"action": {"sleep": 1.0}}
            )

    threads = [threading.Thread(target=step, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # all eight arrived: one runs, seven wait in the session's queue
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 4.0  # running all eight would take 8 s
