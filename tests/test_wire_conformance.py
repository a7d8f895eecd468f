"""What RFC 6455 (WebSocket) and RFC 9110/9112 (HTTP) require of a server, byte for byte,
where the first round got it wrong. Raw frames over a real socket: a well-behaved client
library would refuse to send most of them."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from ecotone.specs import wsframing as wsf
from tests.conftest import RunningServer, run_server
from tests.httpraw import raw_exchange
from tests.wsraw import RawWebSocket


@pytest.fixture(scope="module")
def ws_server() -> Iterator[RunningServer]:
    with run_server("counter") as server:
        yield server


@pytest.fixture(scope="module")
def http_server() -> Iterator[RunningServer]:
    with run_server("counter", transport="http") as server:
        yield server


def frames_after(ws: RawWebSocket, data: bytes, timeout: float = 5.0) -> list[wsf.Event]:
    """Send raw bytes on an open WebSocket; what the server sends back until it closes."""
    ws.sock.sendall(data)
    reader = wsf.FrameReader(masked=False, max_message=1 << 20)
    events: list[wsf.Event] = []
    ws.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = ws.sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        events += reader.feed(chunk)
        if any(isinstance(e, wsf.Control) and e.opcode == wsf.CLOSE for e in events):
            break
    return events


def close_code(events: list[wsf.Event]) -> int | None:
    for event in events:
        if isinstance(event, wsf.Control) and event.opcode == wsf.CLOSE:
            return event.close_code
    return None


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1011, 3000, 4999])
def test_a_valid_close_code_is_echoed(ws_server: RunningServer, code: int) -> None:
    ws = RawWebSocket(ws_server.url)
    events = frames_after(ws, wsf.encode(wsf.CLOSE, struct.pack("!H", code) + b"bye", mask=True))
    assert close_code(events) == code
    ws.sock.close()


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535])
def test_an_invalid_close_code_is_answered_1002(ws_server: RunningServer, code: int) -> None:
    ws = RawWebSocket(ws_server.url)
    events = frames_after(ws, wsf.encode(wsf.CLOSE, struct.pack("!H", code), mask=True))
    assert close_code(events) == 1002
    ws.sock.close()


def test_a_one_byte_close_payload_is_answered_1002(ws_server: RunningServer) -> None:
    ws = RawWebSocket(ws_server.url)
    assert close_code(frames_after(ws, wsf.encode(wsf.CLOSE, b"\x03", mask=True))) == 1002
    ws.sock.close()


def test_a_close_reason_that_is_not_utf8_is_answered_1007(ws_server: RunningServer) -> None:
    ws = RawWebSocket(ws_server.url)
    payload = struct.pack("!H", 1000) + b"\xff\xfe"
    assert close_code(frames_after(ws, wsf.encode(wsf.CLOSE, payload, mask=True))) == 1007
    ws.sock.close()


def test_an_empty_close_is_answered_with_an_empty_close(ws_server: RunningServer) -> None:
    ws = RawWebSocket(ws_server.url)
    events = frames_after(ws, wsf.encode(wsf.CLOSE, b"", mask=True))
    closes = [e for e in events if isinstance(e, wsf.Control) and e.opcode == wsf.CLOSE]
    assert closes and closes[0].payload == b""  # never a 1005 on the wire
    ws.sock.close()


def test_a_text_message_that_is_not_utf8_fails_the_connection_with_1007(
    ws_server: RunningServer,
) -> None:
    ws = RawWebSocket(ws_server.url)
    events = frames_after(ws, wsf.encode(wsf.TEXT, b'{"op": "ping", "id": "\xff"}', mask=True))
    assert close_code(events) == 1007
    ws.sock.close()


def test_a_64_bit_length_with_its_top_bit_set_is_a_protocol_error(
    ws_server: RunningServer,
) -> None:
    ws = RawWebSocket(ws_server.url)
    head = bytes((0x82, 0x80 | 127)) + struct.pack("!Q", 1 << 63) + b"\x00\x00\x00\x00"
    assert close_code(frames_after(ws, head)) == 1002
    ws.sock.close()


def test_zero_byte_fragments_count_against_the_message_limit() -> None:
    from ecotone.kernel import Limits

    with run_server("counter", limits=Limits(max_frame_bytes=4096)) as server:
        ws = RawWebSocket(server.url)
        first = bytes((wsf.TEXT, 0x80)) + b"\x00" * 4  # a non-final empty text frame
        empty = bytes((wsf.CONTINUATION, 0x80)) + b"\x00" * 4
        ws.sock.sendall(first + empty * 20_000)  # never finished, 120 KB of nothing
        ws.sock.sendall(wsf.encode(wsf.CONTINUATION, b"", mask=True))  # and now finished
        reply = ws.recv()
        assert reply["code"] == "too_large"
        assert ws.request("ping")["op"] == "pong"  # the connection goes on
        ws.close()


def fragment(opcode: int, payload: bytes) -> bytes:
    """A masked frame that does not end its message (FIN clear)."""
    frame = bytearray(wsf.encode(opcode, payload, mask=True))
    frame[0] &= 0x7F
    return bytes(frame)


def test_a_ping_between_fragments_is_answered_before_the_rest_of_the_message(
    ws_server: RunningServer,
) -> None:
    """RFC 6455 §5.4/§5.5.2 (Autobahn cases 5.6-5.8): a ping inside a fragmented message is
    answered as soon as it is read, not after the message it interrupts."""
    ws = RawWebSocket(ws_server.url)
    reader = wsf.FrameReader(masked=False, max_message=1 << 20)
    ws.sock.settimeout(5.0)

    def read(count: int) -> list[wsf.Event]:
        events: list[wsf.Event] = []
        while len(events) < count:
            chunk = ws.sock.recv(65536)
            assert chunk, f"the server closed the connection after {events}"
            events += reader.feed(chunk)
        return events

    ping = wsf.encode(wsf.PING, b"between", mask=True)
    pong = wsf.Control(wsf.PONG, b"between")
    # The ping alone with the first fragment: its pong comes while the message is unfinished.
    ws.sock.sendall(fragment(wsf.TEXT, b'{"op": "ping", ') + ping)
    assert read(1) == [pong]
    ws.sock.sendall(wsf.encode(wsf.CONTINUATION, b'"id": 1}', mask=True))
    (answer,) = read(1)
    assert isinstance(answer, wsf.Message)
    assert json.loads(answer.data) == {"op": "pong", "id": 1, "ready": True}
    # Fragment, ping and last fragment in one write (read as one chunk, as Autobahn sends
    # them): the pong still goes out before the answer to the message it interrupted.
    first, last = fragment(wsf.TEXT, b'{"op": "ping", '), b'"id": 2}'
    ws.sock.sendall(first + ping + wsf.encode(wsf.CONTINUATION, last, mask=True))
    events = read(2)
    assert events[0] == pong, events
    assert isinstance(events[1], wsf.Message)
    assert json.loads(events[1].data) == {"op": "pong", "id": 2, "ready": True}
    ws.sock.close()


# --- HTTP ---------------------------------------------------------------------------------


def test_head_answers_with_the_gets_headers_and_no_body(http_server: RunningServer) -> None:
    get, _ = raw_exchange(
        http_server.port, b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    head, _ = raw_exchange(
        http_server.port, b"HEAD /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    _, get_body = get.split(b"\r\n\r\n", 1)
    head_head, head_body = head.split(b"\r\n\r\n", 1)
    assert head_body == b""
    assert b"content-length: %d" % len(get_body) in head_head.lower()
    assert b"x-content-length" not in head_head.lower()


def test_expect_100_continue_is_answered_before_the_body_is_sent(
    http_server: RunningServer,
) -> None:
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: 2\r\nexpect: 100-continue\r\n\r\n"
        )
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 "), interim
        sock.sendall(b"{}")
        final = sock.recv(65536)
        assert final.startswith(b"HTTP/1.1 200 "), final


def test_an_oversized_request_head_is_431(http_server: RunningServer) -> None:
    reply, closed = raw_exchange(
        http_server.port,
        b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:80]
    assert closed


def test_content_length_with_transfer_encoding_is_answered_then_closed(
    http_server: RunningServer,
) -> None:
    reply, closed = raw_exchange(
        http_server.port,
        b"POST /v1/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 "), reply[:80]
    assert b"connection: close" in reply.lower()
    assert closed


def test_an_oversized_message_fed_a_byte_at_a_time_never_desynchronises_the_reader() -> None:
    """The mask key of a frame cut by a read boundary must not be taken for the next frame's
    header (a bug the zero-byte fragment test found)."""
    reader = wsf.FrameReader(masked=True, max_message=100)
    data = (
        bytes((wsf.TEXT, 0x80)) + b"\x00" * 4
        + (bytes((wsf.CONTINUATION, 0x80)) + b"\x00" * 4) * 50
        + wsf.encode(wsf.CONTINUATION, b"x" * 200, mask=True)
        + wsf.encode(wsf.TEXT, b'{"op": "ping", "id": 1}', mask=True)
    )  # fmt: skip
    events: list[wsf.Event] = []
    for i in range(len(data)):
        events += reader.feed(data[i : i + 1])
    assert [type(e).__name__ for e in events] == ["TooLarge", "Message"]
    assert events[1] == wsf.Message(True, b'{"op": "ping", "id": 1}')
