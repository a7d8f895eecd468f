"""The websocket transport against a real server on 127.0.0.1: raw frames, pipelining, slow envs,
peers that vanish, and limits. The server runs in a background thread (BackgroundServer)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

import ecotone
from ecotone.kernel import Limits
from tests import envs
from tests.conftest import RunningServer, run_server, wait_until
from tests.wsraw import JSON, MSGPACK, HandshakeRefused, RawWebSocket


def step_frame(rid: int, session: str, action: dict[str, Any]) -> dict[str, Any]:
    return {"op": "step", "id": rid, "session": session, "action": action}


# --- codecs ----------------------------------------------------------------------------------


def play_counter_episode(url: str, codec: str) -> list[Any]:
    with ecotone.connect(url, codec=codec) as env:
        results = [env.reset(seed=7, target=8)]
        for delta in (3, -1, 2, 5):
            results.append(env.step({"delta": delta}))
        return [(r.observation, r.reward, r.done) for r in results] + [env.state()["count"]]


def test_json_and_msgpack_subprotocols_give_identical_episodes(counter_url: str) -> None:
    over_json = play_counter_episode(counter_url, "json")
    over_msgpack = play_counter_episode(counter_url, "msgpack")
    assert over_json == over_msgpack
    assert [obs["count"] for obs, _, _ in over_json[:-1]] == [0, 3, 2, 4, 9]
    assert over_json[-2][2] is True  # the target was reached


def test_json_is_sent_as_text_and_msgpack_as_binary_messages(counter_url: str) -> None:
    for subprotocol, kind in ((JSON, str), (MSGPACK, bytes)):
        with RawWebSocket(counter_url, subprotocol=subprotocol) as ws:
            assert ws.subprotocol == subprotocol
            ws.send({"op": "ping", "id": 1})
            assert type(ws.recv_raw()) is kind


def test_a_client_offering_no_subprotocol_speaks_json(counter_url: str) -> None:
    with RawWebSocket(counter_url, subprotocol=None) as ws:
        assert ws.subprotocol == ""
        assert ws.request("hello", version=1)["envs"] == ["counter"]


def test_an_unknown_subprotocol_is_refused_with_400(counter_url: str) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        RawWebSocket(counter_url, subprotocol="ecotone.v9.xml")
    assert refused.value.status == 400
    with RawWebSocket(counter_url) as ws:  # the server is unharmed
        assert ws.request("ping")["op"] == "pong"


def test_a_text_message_on_a_msgpack_connection_is_invalid_frame(counter_url: str) -> None:
    with RawWebSocket(counter_url, subprotocol=MSGPACK) as ws:
        session = ws.open_session()
        ws.send_text('{"op": "ping", "id": 1}')
        reply = ws.recv()
        assert (reply["op"], reply["code"]) == ("error", "invalid_frame")
        ws.request("reset", session=session)
        assert ws.request("step", session=session, action={"delta": 2})["observation"]["count"] == 2


# --- pipelining and ordering -----------------------------------------------------------------


def test_fifty_pipelined_steps_are_answered_in_order(counter_url: str) -> None:
    with RawWebSocket(counter_url) as ws:
        session = ws.open_session()
        ws.request("reset", session=session)
        for rid in range(100, 150):
            ws.send(step_frame(rid, session, {"delta": 1}))
        replies = [ws.recv() for _ in range(50)]
    assert [r["id"] for r in replies] == list(range(100, 150))
    assert [r["observation"]["count"] for r in replies] == list(range(1, 51))


def test_pipelined_steps_on_a_threaded_env_keep_their_order(slow_server: RunningServer) -> None:
    with RawWebSocket(slow_server.url) as ws:
        session = ws.open_session()
        ws.request("reset", session=session)
        for rid in range(1, 21):
            ws.send(step_frame(rid, session, {"tag": f"t{rid}"}))
        replies = [ws.recv() for _ in range(20)]
    assert [r["id"] for r in replies] == list(range(1, 21))
    assert [r["observation"]["tag"] for r in replies] == [f"t{i}" for i in range(1, 21)]
    assert [r["observation"]["steps"] for r in replies] == list(range(1, 21))


def test_a_bad_frame_in_a_pipeline_does_not_disturb_the_others(counter_url: str) -> None:
    with RawWebSocket(counter_url) as ws:
        session = ws.open_session()
        ws.request("reset", session=session)
        for rid in range(1, 31):
            if rid == 10:
                ws.send_text("{this is not json")
            elif rid == 20:
                ws.send(step_frame(rid, session, {"delta": "many"}))
            elif rid == 25:
                ws.send({"op": {"weird": "op"}, "id": rid})
            else:
                ws.send(step_frame(rid, session, {"delta": 1}))
        replies = [ws.recv() for _ in range(30)]

    assert replies[9]["code"] == "invalid_frame" and replies[9]["id"] is None
    assert (replies[19]["id"], replies[19]["code"]) == (20, "invalid_action")
    assert replies[19]["details"]["field"] == "delta"
    assert (replies[24]["id"], replies[24]["code"]) == (25, "unknown_op")
    good = [r for i, r in enumerate(replies) if i not in (9, 19, 24)]
    assert [r["id"] for r in good] == [i for i in range(1, 31) if i not in (10, 20, 25)]
    assert [r["observation"]["count"] for r in good] == list(range(1, 28))


def test_several_sessions_share_one_connection(counter_url: str) -> None:
    with ecotone.Connection(counter_url) as connection:
        clients = [connection.open() for _ in range(3)]
        assert len({c.session_id for c in clients}) == 3
        for i, client in enumerate(clients):
            client.reset(start=i * 10)
        for _ in range(2):
            for i, client in enumerate(clients):
                client.step({"delta": i + 1})
        assert [c.state()["count"] for c in clients] == [2, 14, 26]
        clients[1].close()
        assert clients[0].step({"delta": 1}).observation["count"] == 3
        assert clients[2].step({"delta": 1}).observation["count"] == 27


def test_step_many_steps_eight_sessions_in_one_round_trip(counter_url: str) -> None:
    with ecotone.Connection(counter_url, codec="msgpack") as connection:
        clients = [connection.open() for _ in range(8)]
        for i, client in enumerate(clients):
            client.reset(start=100 * i)
        results = connection.step_many((c, {"delta": i}) for i, c in enumerate(clients))
        counts = [r.observation["count"] for r in results if isinstance(r, ecotone.StepResult)]
        assert counts == [100 * i + i for i in range(8)]
        assert [r.reward for r in results if isinstance(r, ecotone.StepResult)] == [
            float(i) for i in range(8)
        ]

        once, twice = connection.step_many([(clients[0], {"delta": 1}), (clients[0], {"delta": 1})])
        assert isinstance(once, ecotone.StepResult) and once.observation["count"] == 1
        assert isinstance(twice, ecotone.ServerError) and twice.code == "invalid_argument"
        assert twice.details["reason"] == "duplicate_session"
        assert (twice.details["item"], twice.details["first_item"]) == (1, 0)
        assert clients[0].step({"delta": 1}).observation["count"] == 2  # not stepped twice


def test_step_many_reports_each_sessions_error_in_its_place(counter_url: str) -> None:
    with ecotone.Connection(counter_url) as connection:
        a, b, c = (connection.open() for _ in range(3))
        a.reset()
        c.reset()
        results = connection.step_many([(a, {"delta": 1}), (b, {"delta": 1}), (c, {"x": 1})])
        assert isinstance(results[0], ecotone.StepResult)
        assert results[0].observation["count"] == 1
        assert isinstance(results[1], ecotone.ServerError)
        assert results[1].code == "reset_required"
        assert isinstance(results[2], ecotone.InvalidActionError)
        assert results[2].field == "x"


def test_step_many_on_threaded_sessions_is_answered_before_their_next_requests(
    slow_server: RunningServer,
) -> None:
    with RawWebSocket(slow_server.url) as ws:
        sessions = [ws.open_session() for _ in range(4)]
        for session in sessions:
            ws.request("reset", session=session)
        items = [
            {"session": s, "action": {"sleep": 0.05 * i, "tag": f"batch{i}"}}
            for i, s in enumerate(sessions)
        ]
        ws.send({"op": "step_many", "id": 1, "steps": items})
        ws.send(step_frame(2, sessions[0], {"tag": "after"}))
        first, second = ws.recv(), ws.recv()
    assert (first["op"], first["id"]) == ("step_many_result", 1)
    assert [r["observation"]["tag"] for r in first["results"]] == [f"batch{i}" for i in range(4)]
    assert [r["session"] for r in first["results"]] == sessions
    assert (second["id"], second["observation"]["tag"], second["observation"]["steps"]) == (
        2,
        "after",
        2,
    )


# --- slow envs don't stall others ------------------------------------------------------------


def test_a_slow_session_does_not_stall_a_fast_one_on_the_same_connection(
    slow_server: RunningServer,
) -> None:
    with RawWebSocket(slow_server.url) as ws:
        slow, fast = ws.open_session(), ws.open_session()
        ws.request("reset", session=slow)
        ws.request("reset", session=fast)
        ws.send(step_frame(1, slow, {"sleep": 0.5, "tag": "slow"}))
        for rid in range(2, 7):
            ws.send(step_frame(rid, fast, {"tag": f"fast{rid}"}))
        order = [ws.recv()["id"] for _ in range(6)]
    assert order == [2, 3, 4, 5, 6, 1]


def test_a_slow_session_does_not_stall_another_connection(slow_server: RunningServer) -> None:
    with RawWebSocket(slow_server.url) as slow_ws, RawWebSocket(slow_server.url) as fast_ws:
        slow, fast = slow_ws.open_session(), fast_ws.open_session()
        slow_ws.request("reset", session=slow)
        fast_ws.request("reset", session=fast)
        slow_ws.send(step_frame(1, slow, {"sleep": 0.5, "tag": "slow"}))
        fast_tags = [
            fast_ws.request("step", session=fast, action={"tag": f"fast{i}"})["observation"]["tag"]
            for i in range(5)
        ]
        slow_reply = slow_ws.recv()
    assert fast_tags == [f"fast{i}" for i in range(5)]
    assert slow_reply["observation"]["tag"] == "slow"
    completed = [step[3].tag for step in slow_server.recorder.steps]
    assert completed == [f"fast{i}" for i in range(5)] + ["slow"]


# --- peers that go away ----------------------------------------------------------------------


def test_an_abruptly_dropped_client_gets_its_sessions_closed() -> None:
    with run_server("closing") as server:
        ws = RawWebSocket(server.url)
        sessions = [ws.open_session(), ws.open_session()]
        ws.request("reset", session=sessions[0])
        assert server.recorder.open_sessions == set(sessions)
        ws.abort()  # no close frame, just a reset TCP connection

        assert wait_until(lambda: not server.recorder.open_sessions)
        assert [server.recorder.close_reason(s) for s in sessions] == ["disconnect"] * 2
        assert [env.close_calls for env in envs.ClosingEnv.instances] == [1, 1]


def test_a_client_leaving_mid_step_gets_its_session_closed_after_the_step(
    slow_server: RunningServer,
) -> None:
    ws = RawWebSocket(slow_server.url)
    session = ws.open_session()
    ws.request("reset", session=session)
    ws.send(step_frame(1, session, {"sleep": 0.3, "tag": "orphan"}))
    ws.abort()
    assert wait_until(lambda: slow_server.recorder.close_reason(session) == "disconnect")
    assert slow_server.recorder.open_sessions == set()


def test_a_client_that_closes_politely_gets_its_sessions_closed(counter_server: RunningServer):
    ws = RawWebSocket(counter_server.url)
    session = ws.open_session()
    ws.close()
    assert wait_until(lambda: counter_server.recorder.close_reason(session) == "disconnect")


def test_a_live_peer_that_ignores_pings_keeps_its_session() -> None:
    # Its TCP stack acknowledges the pings, so it is alive, only idle. (A peer that vanished
    # is dropped: tests/test_dead_peers.py cuts a real link to show it.)
    with run_server("closing", limits=Limits(ping_interval=0.1, ping_timeout=0.2)) as server:
        with RawWebSocket(server.url) as ws:
            session = ws.open_session()
            time.sleep(0.8)  # several ping rounds, none answered
            assert server.recorder.close_reason(session) is None
            reply = ws.request("reset", session=session)
            assert reply["op"] == "observation"


def test_a_peer_that_answers_pings_is_kept_across_ping_rounds() -> None:
    with run_server("counter", limits=Limits(ping_interval=0.1, ping_timeout=0.2)) as server:
        with RawWebSocket(server.url) as ws:
            session = ws.open_session()
            ws.request("reset", session=session)
            with pytest.raises(TimeoutError):
                ws.recv_raw(timeout=0.8)  # reads (and answers pings) for several ping rounds
            assert ws.pings_answered >= 2
            reply = ws.request("step", session=session, action={"delta": 1})
            assert reply["observation"]["count"] == 1
            assert server.recorder.close_reason(session) is None


def test_a_blocking_client_idle_past_the_ping_window_keeps_its_session() -> None:
    with run_server("counter", limits=Limits(ping_interval=0.1, ping_timeout=0.1)) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            time.sleep(0.6)
            assert env.step({"delta": 1}).observation["count"] == 1


# --- what is not a WebSocket -----------------------------------------------------------------


def http_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_plain_http_request_gets_an_answer_and_the_server_goes_on(
    counter_server: RunningServer,
):
    head = b"Host: localhost\r\nConnection: close\r\n\r\n"
    reply = http_exchange(counter_server.port, b"GET / HTTP/1.1\r\n" + head)
    assert reply.startswith(b"HTTP/1.1 404")
    assert b"not a WebSocket handshake" in reply and b"--transport http" in reply
    # What OpenEnv's consumers read beside /ws, on the same port.
    for path in (b"/health", b"/schema", b"/metadata", b"/openapi.json"):
        reply = http_exchange(counter_server.port, b"GET " + path + b" HTTP/1.1\r\n" + head)
        assert reply.startswith(b"HTTP/1.1 200"), (path, reply)
    posted = http_exchange(counter_server.port, b"POST /reset HTTP/1.1\r\n" + head)
    assert posted.startswith(b"HTTP/1.1 404")
    reply = http_exchange(counter_server.port, b"\x16\x03\x01 this is not http at all\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400")
    with ecotone.connect(counter_server.url) as env:
        env.reset()
        assert env.step({"delta": 2}).observation["count"] == 2


def test_a_websocket_on_the_wrong_path_gets_404(counter_server: RunningServer) -> None:
    with pytest.raises(HandshakeRefused) as refused:
        RawWebSocket(counter_server.url, path="/not-ecotone")
    assert refused.value.status == 404
    with pytest.raises(ecotone.EcotoneError, match="404"):
        ecotone.connect(counter_server.url + "/not-ecotone", connect_timeout=5)
    for path in ("/", "/ecotone", "/v1"):
        with RawWebSocket(counter_server.url, path=path) as ws:
            assert ws.request("ping")["op"] == "pong"


# --- limits ----------------------------------------------------------------------------------


def test_an_oversized_message_is_too_large_and_the_session_still_works() -> None:
    with run_server("counter", limits=Limits(max_frame_bytes=1024)) as server:
        with RawWebSocket(server.url) as ws:
            session = ws.open_session()
            ws.request("reset", session=session)
            assert ws.request("step", session=session, action={"delta": 1})["op"] == "observation"

            ws.send(step_frame(3, session, {"delta": 1, "metadata": {"pad": "x" * 4000}}))
            reply = ws.recv()
            assert (reply["op"], reply["code"]) == ("error", "too_large")
            assert reply["details"]["limit"] == 1024
            assert reply["details"]["size"] > 4000

            reply = ws.request("step", session=session, action={"delta": 1})
            assert reply["observation"]["count"] == 2


def test_a_fragmented_message_is_reassembled_or_rejected_by_its_total_size() -> None:
    with run_server("counter", limits=Limits(max_frame_bytes=1024)) as server:
        with RawWebSocket(server.url, subprotocol=MSGPACK) as ws:
            session = ws.open_session()
            ws.request("reset", session=session)

            small = ws.encode(step_frame(10, session, {"delta": 5}))
            ws.send_fragments([small[:7], small[7:15], small[15:]])
            assert ws.recv()["observation"]["count"] == 5

            big = ws.encode(step_frame(11, session, {"delta": 1, "metadata": {"p": "x" * 3000}}))
            ws.send_fragments([big[i : i + 500] for i in range(0, len(big), 500)])
            reply = ws.recv()
            assert (reply["code"], reply["details"]["size"]) == ("too_large", len(big))

            again = ws.encode(step_frame(12, session, {"delta": 2}))
            ws.send_fragments([again[:10], again[10:]])  # the size count starts afresh
            reply = ws.recv()
            assert (reply["id"], reply["observation"]["count"]) == (12, 7)

            assert ws.request("step", session=session, action={"delta": 1})["observation"] == {
                "reward": 1.0,
                "done": False,
                "truncated": False,
                "metadata": {},
                "count": 8,
            }


def test_capacity_over_websocket_is_an_error_frame_and_the_connection_stays_usable() -> None:
    with run_server("counter", limits=Limits(max_sessions=2)) as server:
        with RawWebSocket(server.url) as ws:
            first, second = ws.open_session(), ws.open_session()
            reply = ws.request("open")
            assert (reply["code"], reply["details"]) == ("capacity", {"active": 2, "limit": 2})

            with pytest.raises(ecotone.CapacityError):  # another connection: same answer
                ecotone.connect(server.url)

            ws.request("reset", session=second)
            assert (
                ws.request("step", session=second, action={"delta": 3})["observation"]["count"] == 3
            )
            assert ws.request("close", session=first)["op"] == "closed"
            third = ws.open_session()
            assert server.recorder.open_sessions == {second, third}


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_a_websocket_outlives_the_request_deadline_of_its_handshake(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    # The handshake must arrive within REQUEST_TIMEOUT; the socket it opens lives on.
    monkeypatch.setattr("ecotone.server.http11.reader.REQUEST_TIMEOUT", 0.2)
    with run_server("counter", transport=transport) as server:
        with ecotone.connect(server.ws_url) as env:
            env.reset()
            time.sleep(0.6)
            assert env.step({"delta": 2}).observation["count"] == 2


@pytest.mark.parametrize("with_numpy", [True, False])
def test_masking_is_the_key_repeated_xor_on_either_path(
    with_numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frames are (un)masked with numpy when the process has it loaded, else with integer
    arithmetic; both give RFC 6455's byte-wise XOR for every length and buffer kind."""
    import os
    import sys

    from ecotone.specs import wsframing

    if not with_numpy:
        monkeypatch.setitem(sys.modules, "numpy", None)  # as in a process that never loaded it
    else:
        import numpy  # noqa: F401

    for size in (0, 1, 3, 4, 5, wsframing.NUMPY_FROM - 1, wsframing.NUMPY_FROM, 2001, 70001):
        payload, key = os.urandom(size), os.urandom(4)
        expected = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        assert wsframing._unmask(payload, key) == expected, size
        assert wsframing._unmask(bytearray(payload), key) == expected, size
        assert wsframing._unmask(memoryview(b"xyz" + payload)[3:], key) == expected, size
        frame = wsframing.encode(wsframing.BINARY, payload, mask=True)
        reader = wsframing.FrameReader(masked=True, max_message=1 << 20)
        (message,) = reader.feed(frame)
        assert isinstance(message, wsframing.Message) and message.data == payload


def test_a_numpy_still_being_imported_is_not_used_for_masking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread may be importing numpy while a frame is masked: its half-made module
    (no `empty` yet) is left alone, and the frame is masked the other way."""
    import importlib.machinery
    import os
    import sys
    import types

    from ecotone.specs import wsframing

    half = types.ModuleType("numpy")
    half.__spec__ = importlib.machinery.ModuleSpec("numpy", None)
    half.__spec__._initializing = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numpy", half)
    payload, key = os.urandom(4 * wsframing.NUMPY_FROM + 3), os.urandom(4)
    expected = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    assert wsframing._unmask(payload, key) == expected
    del half.__spec__._initializing  # type: ignore[attr-defined]  # done, but no `empty`: still
    assert wsframing._unmask(payload, key) == expected
