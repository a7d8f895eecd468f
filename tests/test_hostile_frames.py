"""Frames built to hurt the parser get an error frame, never a dropped connection, and the
sessions on the connection go on: deep nesting (a RecursionError inside the decoder), on
every route that decodes a peer's bytes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_bare_server, run_server
from tests.httpraw import JSON, Http
from tests.wsraw import RawWebSocket

DEPTH = 5000
DEEP = "[" * DEPTH + "]" * DEPTH


def test_a_deeply_nested_frame_over_websocket_is_invalid_frame_and_the_socket_goes_on() -> None:
    with run_server("counter") as server, RawWebSocket(server.url) as ws:
        session = ws.open_session()
        ws.request("reset", session=session)
        ws.send_text(f'{{"op": "step", "id": 77, "session": "{session}", "action": ' + DEEP + "}")
        error = ws.recv()
        assert (error["op"], error["code"]) == ("error", "invalid_frame")
        assert "nested" in error["message"]
        ws.send_text(DEEP)  # not even an object
        assert ws.recv()["code"] == "invalid_frame"
        assert ws.request("step", session=session, action={"delta": 2})["op"] == "observation"


def test_a_deeply_nested_action_over_tcp_is_invalid_frame_and_the_stream_stays_in_sync() -> None:
    from tests.test_transports import FramedSocket
    from tests.test_transports import frame as transport_frame

    with run_server("counter", transport="tcp") as server:
        peer = FramedSocket(server.url)
        try:
            opened = peer.call({"op": "open", "id": 1})
            session = opened["session"]
            peer.call({"op": "reset", "id": 2, "session": session})
            frame = f'{{"op": "step", "id": 3, "session": "{session}", "action": ' + DEEP + "}"
            peer.send_raw(transport_frame(frame.encode()))
            assert peer.recv()["code"] == "invalid_frame"
            step = {"op": "step", "id": 4, "session": session, "action": {"delta": 1}}
            assert peer.call(step)["op"] == "observation"
        finally:
            peer.close()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/frames", '{"op": "describe", "id": 1, "env": ' + DEEP + "}"),
        ("/v1/sessions", DEEP),
        ("/reset", DEEP),
        ("/step", '{"action": ' + DEEP + "}"),
        ("/mcp", DEEP),
    ],
)
def test_a_deeply_nested_http_body_is_answered_and_the_connection_kept(
    path: str, body: str
) -> None:
    with run_server("counter", transport="http") as server:
        c = Http(server.port)
        reply = c.request("POST", path, body.encode(), JSON)
        assert reply.status in (400, 422, 200), reply
        assert "nested" in reply.body.decode() or reply.status == 200, reply.body[:200]
        assert c.request("GET", "/health").status == 200  # the same keep-alive connection
        c.close()


def test_a_deeply_nested_message_on_openenv_ws_is_answered_and_the_socket_goes_on() -> None:
    with run_server("counter", transport="http") as server:
        ws = RawWebSocket(server.ws_url, subprotocol=None, path="/ws")
        try:
            ws.send_text('{"type": "step", "data": ' + DEEP + "}")
            reply = json.loads(ws.recv_raw())
            assert reply["type"] == "error", reply
            ws.send_text(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv_raw())["type"] == "observation"
        finally:
            ws.close()


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "per_item"])
def test_step_columns_reset_options_too_deep_to_copy_are_invalid_argument_and_step_nothing(
    inline: bool,
) -> None:
    """Options the decoder takes (700 levels) but `copy.deepcopy` cannot copy for each reset
    (it recurses in Python): one `invalid_argument`, not an `internal` error, on the inline
    pass and on the per-item path (an unknown session sends the frame there)."""
    depth = 700
    deep = "{}"
    for _ in range(depth):
        deep = '{"a": ' + deep + "}"
    with run_bare_server("counter") as url, RawWebSocket(url) as ws:
        a, b = ws.open_session(), ws.open_session()
        for session in (a, b):
            ws.request("reset", session=session)
        other = b if inline else "0123456789abcdef"
        head = {"op": "step_columns", "id": 9, "sessions": [a, other], "resets": [1]}
        ws.send_text(
            json.dumps(head)[:-1]
            + ', "actions": [{"delta": 1}, null], "reset": {"options": {"x": '
            + deep
            + "}}}"
        )
        answer = ws.recv()
        assert (answer["op"], answer["code"], answer["id"]) == ("error", "invalid_argument", 9)
        assert "`reset.options` nest too deeply" in answer["message"]
        stepped = ws.request("step", session=a, action={"delta": 2})  # a was not stepped
        assert stepped["observation"]["count"] == 2
