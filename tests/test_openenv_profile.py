"""ecotone's OpenEnv profile, checked with raw requests against the shapes of OpenEnv 0.10.0's
wire protocol (no openenv package here: see test_openenv_interop.py for the real client).

HTTP routes run on the http transport; `/ws` runs on both the http and websocket transports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ecotone.kernel import Limits
from tests.conftest import RunningServer, run_server, wait_until
from tests.httpraw import Http, Reply
from tests.wsraw import RawWebSocket


@pytest.fixture
def counter_http() -> Iterator[RunningServer]:
    with run_server("counter", transport="http") as server:
        yield server


@pytest.fixture
def echo_http() -> Iterator[RunningServer]:
    with run_server("echo", transport="http") as server:
        yield server


@pytest.fixture
def client(counter_http: RunningServer) -> Iterator[Http]:
    c = Http(counter_http.port)
    yield c
    c.close()


def rpc(client: Http, method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> Any:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
    if params is not None:
        body["params"] = params
    reply = client.request("POST", "/mcp", body)
    assert reply.status == 200, reply  # JSON-RPC errors still come with 200
    answer = reply.json()
    assert answer["jsonrpc"] == "2.0"
    return answer


# --- discovery routes ------------------------------------------------------------------------


def test_health_is_healthy(client: Http) -> None:
    reply = client.request("GET", "/health")
    assert (reply.status, reply.json()) == (200, {"status": "healthy"})


def test_metadata_has_every_openenv_field(client: Http) -> None:
    meta = client.request("GET", "/metadata").json()
    assert set(meta) == {
        "name",
        "description",
        "readme_content",
        "version",
        "author",
        "documentation_url",
    }
    assert meta["name"] == "counter"
    assert meta["description"].startswith("Adds each action's delta")


def test_schema_has_action_observation_and_state_objects(client: Http) -> None:
    schema = client.request("GET", "/schema").json()
    for key in ("action", "observation", "state", "reset_observation"):
        assert schema[key]["type"] == "object", key
    assert "delta" in schema["action"]["properties"]
    assert "count" in schema["observation"]["properties"]
    assert "step_count" in schema["state"]["properties"]


def test_openapi_declares_version_1_0_0_and_the_simulation_routes(client: Http) -> None:
    spec = client.request("GET", "/openapi.json").json()
    assert spec["info"]["version"] == "1.0.0"
    paths = spec["paths"]
    for path, method in (("/reset", "post"), ("/step", "post"), ("/state", "get")):
        assert method in paths[path], path
    assert "post" in paths["/mcp"]


# --- /reset, /step, /state -------------------------------------------------------------------


def session_of(reply: Reply) -> str:
    sid = reply.headers["x-ecotone-session"]
    assert f"ecotone_session={sid}" in reply.headers["set-cookie"]
    return sid


def test_reset_answers_in_openenv_shape_with_a_session_header_and_cookie(client: Http) -> None:
    reply = client.request("POST", "/reset", {"seed": 4, "start": 3})
    assert reply.status == 200
    body = reply.json()
    assert set(body) == {"observation", "reward", "done", "metadata"}
    assert body["observation"]["count"] == 3
    assert (body["reward"], body["done"], body["metadata"]) == (None, False, None)
    assert session_of(reply)


def test_reset_without_a_body_starts_an_episode(client: Http) -> None:
    reply = client.request("POST", "/reset")
    assert (reply.status, reply.json()["observation"]["count"]) == (200, 0)


def test_step_with_the_session_header_continues_the_episode(client: Http) -> None:
    sid = session_of(client.request("POST", "/reset", {"start": 1}))
    counts = []
    for delta in (2, 3, 4):
        reply = client.request(
            "POST", "/step", {"action": {"delta": delta}}, {"X-Ecotone-Session": sid}
        )
        assert reply.status == 200
        assert reply.json()["reward"] == float(delta)
        assert session_of(reply) == sid
        counts.append(reply.json()["observation"]["count"])
    assert counts == [3, 6, 10]  # OpenEnv itself would answer 2, 3, 4: a fresh env each time
    state = client.request("GET", "/state", headers={"X-Ecotone-Session": sid})
    assert state.json()["count"] == 10
    assert state.json()["step_count"] == 3


def test_the_session_cookie_works_like_the_header(client: Http) -> None:
    sid = session_of(client.request("POST", "/reset"))
    cookie = {"Cookie": f"theme=dark; ecotone_session={sid}"}
    client.request("POST", "/step", {"action": {"delta": 5}}, cookie)
    reply = client.request("POST", "/step", {"action": {"delta": 5}}, cookie)
    assert reply.json()["observation"]["count"] == 10
    again = client.request("POST", "/reset", {"start": 7}, cookie)
    assert session_of(again) == sid  # a reset with a live session restarts that session
    assert client.request("GET", "/state", headers=cookie).json()["count"] == 7


def test_step_and_state_without_a_session_are_stateless(client: Http) -> None:
    session_of(client.request("POST", "/reset", {"start": 100}))
    for _ in range(2):
        reply = client.request("POST", "/step", {"action": {"delta": 2}})
        assert reply.status == 200
        assert reply.json()["observation"]["count"] == 2  # a fresh env every time
        assert "x-ecotone-session" not in reply.headers
    state = client.request("GET", "/state")
    assert (state.json()["count"], state.json()["step_count"]) == (0, 0)


def test_a_negative_seed_is_422_at_body_seed(client: Http) -> None:
    reply = client.request("POST", "/reset", {"seed": -1})
    assert reply.status == 422
    assert reply.json()["detail"][0]["loc"] == ["body", "seed"]
    assert reply.json()["detail"][0]["input"] == -1


def test_an_invalid_action_is_422_located_at_the_field(client: Http) -> None:
    sid = session_of(client.request("POST", "/reset"))
    reply = client.request("POST", "/step", {"action": {"delta": "x"}}, {"X-Ecotone-Session": sid})
    assert reply.status == 422
    assert reply.json()["detail"][0]["loc"] == ["delta"]
    stateless = client.request("POST", "/step", {"action": {"delta": "x"}})
    assert stateless.json()["detail"][0]["loc"] == ["delta"]
    ok = client.request("POST", "/step", {"action": {"delta": 1}}, {"X-Ecotone-Session": sid})
    assert ok.json()["observation"]["count"] == 1


def test_step_without_an_action_is_422_at_body_action(client: Http) -> None:
    reply = client.request("POST", "/step", {"delta": 1})
    assert reply.status == 422
    assert reply.json()["detail"][0]["loc"] == ["body", "action"]
    bad = client.request("POST", "/reset", b"{nope", {"content-type": "application/json"})
    assert (bad.status, bad.json()["detail"][0]["type"]) == (422, "json_invalid")


def test_an_unknown_session_id_on_reset_starts_a_new_session(client: Http) -> None:
    reply = client.request("POST", "/reset", headers={"X-Ecotone-Session": "gone"})
    assert reply.status == 200
    assert session_of(reply) != "gone"
    step = client.request("POST", "/step", {"action": {"delta": 1}}, {"X-Ecotone-Session": "gone"})
    assert step.status == 404


# --- POST /mcp -------------------------------------------------------------------------------


def test_tools_list_on_an_env_without_tools_is_32603(client: Http) -> None:
    answer = rpc(client, "tools/list")
    assert answer["id"] == 1
    assert answer["error"] == {
        "code": -32603,
        "message": "Environment does not support MCP",
        "data": None,
    }


def test_tools_list_and_call_on_echo(echo_http: RunningServer) -> None:
    c = Http(echo_http.port)
    tools = rpc(c, "tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["shout"]
    assert tools[0]["inputSchema"]["required"] == ["message"]
    called = rpc(c, "tools/call", {"name": "shout", "arguments": {"message": "hi"}}, rid="c1")
    assert called["id"] == "c1"
    assert called["result"]["data"] == "HI"
    assert called["result"]["is_error"] is False
    assert called["result"]["content"][0] == {"type": "text", "text": "HI"}
    c.close()
    assert wait_until(lambda: not echo_http.recorder.open_sessions)  # temporary envs closed


def test_tools_call_without_a_name_is_32602(client: Http) -> None:
    answer = rpc(client, "tools/call", {})
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "Missing 'name' in params"


def test_an_unknown_method_is_32601(client: Http) -> None:
    answer = rpc(client, "initialize", {}, rid=3)
    assert (answer["id"], answer["error"]["code"]) == (3, -32601)
    assert answer["error"]["message"] == "Method not found: initialize"


def test_malformed_json_is_32700_and_an_empty_object_32600(client: Http) -> None:
    reply = client.request("POST", "/mcp", b"{bad", {"content-type": "application/json"})
    assert reply.status == 200
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error", "data": None},
    }
    # JSON that parses is never -32700 (JSON-RPC 2.0): a batch, empty or not, or any other
    # JSON that is not an object is -32600 Invalid Request (docs/openenv.md said so; issue 40).
    for body in (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', b"[1, 2]", b"[]", b"1"):
        reply = client.request("POST", "/mcp", body, {"content-type": "application/json"})
        assert reply.status == 200
        error = reply.json()["error"]
        assert error["code"] == -32600 and error["message"].startswith("Invalid Request"), body
    empty = client.request("POST", "/mcp", {})
    assert empty.status == 200
    assert empty.json()["jsonrpc"] == "2.0"
    assert empty.json()["id"] is None
    assert empty.json()["error"]["code"] == -32600
    assert empty.json()["error"]["message"].startswith("Invalid request: ")


def test_mcp_sessions_are_created_closed_and_counted_toward_capacity() -> None:
    with run_server("counter", transport="http", limits=Limits(max_sessions=1)) as server:
        c = Http(server.port)
        sid = rpc(c, "openenv/session/create", rid=7)["result"]["session_id"]
        full = rpc(c, "openenv/session/create", rid=8)
        assert full["error"]["code"] == -32000
        assert full["error"]["message"].startswith("Server at capacity: 1/1 sessions active.")
        assert full["error"]["data"] == {"active_sessions": 1, "max_sessions": 1}
        closed = rpc(c, "openenv/session/close", {"session_id": sid}, rid=9)
        assert closed["result"] == {"session_id": sid, "closed": True}
        again = rpc(c, "openenv/session/close", {"session_id": sid})
        assert again["error"] == {
            "code": -32602,
            "message": f"Unknown session_id: {sid}",
            "data": None,
        }
        assert "result" in rpc(c, "openenv/session/create")  # the slot is free again
        c.close()


def test_session_close_without_an_id_is_32602(client: Http) -> None:
    answer = rpc(client, "openenv/session/close", {})
    assert answer["error"]["code"] == -32602


# --- WebSocket /ws ---------------------------------------------------------------------------


@pytest.fixture(params=["websocket", "http"])
def ws_transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def counter_ws(ws_transport: str) -> Iterator[RunningServer]:
    with run_server("counter", transport=ws_transport) as server:
        yield server


class OpenEnvSocket(RawWebSocket):
    """A raw socket on OpenEnv's `/ws`: JSON text messages, no subprotocol."""

    def __init__(self, server: RunningServer) -> None:
        super().__init__(server.ws_url, subprotocol=None, path="/ws")

    def call(self, message: dict[str, Any] | str) -> dict[str, Any]:
        self.send_text(message if isinstance(message, str) else json.dumps(message))
        reply: dict[str, Any] = self.recv()
        return reply


def test_ws_reset_step_state_close(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        reset = ws.call({"type": "reset", "data": {"seed": 42, "episode_id": "ep-ws", "start": 1}})
        assert reset["type"] == "observation"
        assert reset["data"]["observation"]["count"] == 1
        assert (reset["data"]["reward"], reset["data"]["done"]) == (None, False)
        assert "metadata" not in reset["data"]  # omitted when empty, as OpenEnv does on /ws
        step = ws.call({"type": "step", "data": {"delta": 1}})
        assert step == {
            "type": "observation",
            "data": {
                "observation": {"truncated": False, "metadata": {}, "count": 2},
                "reward": 1.0,
                "done": False,
            },
        }
        state = ws.call({"type": "state"})
        assert state["type"] == "state"
        assert state["data"]["episode_id"] == "ep-ws"
        assert (state["data"]["step_count"], state["data"]["count"]) == (1, 2)
        assert wait_until(lambda: len(counter_ws.recorder.open_sessions) == 1)
        ws.send_text('{"type": "close"}')
        assert ws.wait_closed() == 1000
        with pytest.raises(ConnectionError):
            ws.recv_raw()  # no reply frame to `close`
    assert wait_until(lambda: not counter_ws.recorder.open_sessions)


def test_ws_done_is_done_or_truncated(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        ws.call({"type": "reset", "data": {"max_steps": 1}})
        step = ws.call({"type": "step", "data": {"delta": 1}})
        assert step["data"]["done"] is True
        assert step["data"]["observation"]["truncated"] is True
        after = ws.call({"type": "step", "data": {"delta": 1}})
        assert after["data"]["code"] == "EXECUTION_ERROR"


def test_ws_validation_errors_carry_the_envs_other_details_as_ctx() -> None:
    """As docs/openenv.md says: `errors` is pydantic-style, and details beyond the field and
    the reason (chess's legal moves) are the entry's `ctx`; none, no `ctx`."""
    with run_server("chess") as server, OpenEnvSocket(server) as ws:
        ws.call({"type": "reset", "data": {"seed": 0}})
        illegal = ws.call({"type": "step", "data": {"move": "e5e4"}})
        (entry,) = illegal["data"]["errors"]
        assert entry["loc"] == ["move"] and "e2e4" in entry["ctx"]["legal_moves"], entry
        typed = ws.call({"type": "step", "data": {"move": 5}})
        assert "ctx" not in typed["data"]["errors"][0], typed


def test_ws_errors_keep_the_session(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        ws.call({"type": "reset"})
        ws.call({"type": "step", "data": {"delta": 5}})

        invalid = ws.call({"type": "step", "data": {"delta": "x"}})
        assert invalid["type"] == "error"
        assert invalid["data"]["code"] == "VALIDATION_ERROR"
        # OpenEnv's client passes on `message` alone: it says what was wrong, and where.
        assert invalid["data"]["message"] == (
            "Invalid message: invalid action for env 'counter': Expected `int`, got `str` "
            "(field `delta`)"
        )
        assert invalid["data"]["errors"][0]["loc"] == ["delta"]

        unknown = ws.call({"type": "frobnicate"})
        assert unknown["data"] == {
            "message": "Unknown message type: frobnicate",
            "code": "UNKNOWN_TYPE",
        }
        untyped = ws.call({})
        assert untyped["data"]["message"] == "Unknown message type: "

        bad_json = ws.call("not json at all")
        assert bad_json["data"]["code"] == "INVALID_JSON"
        assert bad_json["data"]["message"].startswith("Invalid JSON: ")

        no_data = ws.call({"type": "step"})
        assert no_data["data"]["code"] == "VALIDATION_ERROR"
        assert no_data["data"]["errors"][0]["loc"] == ["data"]
        state_with_data = ws.call({"type": "state", "data": {}})
        assert state_with_data["data"]["code"] == "VALIDATION_ERROR"

        step = ws.call({"type": "step", "data": {"delta": 1}})
        assert step["data"]["observation"]["count"] == 6  # the same episode went on


def test_ws_a_binary_frame_ends_the_session(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        ws.call({"type": "reset"})
        ws.send_bytes(b'{"type": "state"}')
        reply = ws.recv()
        assert reply["type"] == "error"
        assert reply["data"]["code"] == "SESSION_ERROR"
        assert ws.wait_closed() == 1000
    assert wait_until(lambda: not counter_ws.recorder.open_sessions)


def test_ws_a_message_that_is_not_an_object_ends_the_session(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        assert ws.call("[1, 2]")["data"]["code"] == "SESSION_ERROR"
        assert ws.wait_closed() == 1000


def test_ws_capacity_is_reached_unsolicited_then_closed(ws_transport: str) -> None:
    with run_server("counter", transport=ws_transport, limits=Limits(max_sessions=1)) as server:
        with OpenEnvSocket(server) as first:
            first.call({"type": "reset"})
            with OpenEnvSocket(server) as second:
                refused = second.recv()  # sent before the client says anything
                assert refused["type"] == "error"
                assert refused["data"] == {
                    "message": "Server at capacity: 1/1 sessions active. "
                    "Cannot accept new connections.",
                    "code": "CAPACITY_REACHED",
                    "active_sessions": 1,
                    "max_sessions": 1,
                }
                assert second.wait_closed() == 1000
            step = first.call({"type": "step", "data": {"delta": 3}})
            assert step["data"]["observation"]["count"] == 3
        assert wait_until(lambda: not server.recorder.open_sessions)
        with OpenEnvSocket(server) as third:  # the slot was freed
            assert third.call({"type": "reset"})["type"] == "observation"


def test_ws_mcp_messages(ws_transport: str) -> None:
    with run_server("echo", transport=ws_transport) as server, OpenEnvSocket(server) as ws:
        listed = ws.call(
            {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}}
        )
        assert listed["type"] == "mcp"
        assert listed["data"]["id"] == 1
        assert [t["name"] for t in listed["data"]["result"]["tools"]] == ["shout"]
        call = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": "shout", "arguments": {"message": "hey"}},
            "id": 2,
        }
        assert ws.call({"type": "mcp", "data": call})["data"]["result"]["data"] == "HEY"
        own = ws.call(
            {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 3}}
        )
        session = own["data"]["result"]["session_id"]
        assert session in server.recorder.open_sessions  # this socket's own session
        refused = ws.call(
            {
                "type": "mcp",
                "data": {
                    "jsonrpc": "2.0",
                    "method": "openenv/session/close",
                    "params": {"session_id": session},
                    "id": 4,
                },
            }
        )
        assert refused["data"]["error"]["code"] == -32600
        invalid = ws.call({"type": "mcp", "data": {"method": "tools/list"}})
        assert invalid["data"]["error"]["code"] == -32600
        assert ws.call({"type": "mcp"})["data"]["code"] == "VALIDATION_ERROR"
        ws.call({"type": "reset"})
        step = ws.call({"type": "step", "data": {"message": "ok"}})
        assert step["data"]["observation"]["echoed"] == "ok"


def test_ws_mcp_on_an_env_without_tools(counter_ws: RunningServer) -> None:
    with OpenEnvSocket(counter_ws) as ws:
        reply = ws.call(
            {"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}}
        )
        assert reply["data"]["error"] == {
            "code": -32603,
            "message": "Environment does not support MCP",
            "data": None,
        }
