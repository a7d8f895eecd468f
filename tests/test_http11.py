"""The HTTP/1.1 front door's pieces without a socket: the one serializer, the refusals, the
request reader (on an in-memory stream)."""

from __future__ import annotations

import json
from typing import Any

import h11
import pytest
import trio
import trio.testing

import ecotone.server.http11.reader
from ecotone.server.admission import Admission, Refusal
from ecotone.server.http11 import refusals
from ecotone.server.http11.reader import MAX_HEAD, RequestReader, Upgrade
from ecotone.specs import ErrorCode
from ecotone.specs.http import CONTINUE, HttpRequest, HttpResponse


def test_serialize_writes_content_headers_then_the_extras_in_order() -> None:
    answer = HttpResponse(200, b"{}", headers=[("X-One", "1"), ("set-cookie", "a=b")])
    assert answer.serialize() == (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
        b"X-One: 1\r\nset-cookie: a=b\r\n\r\n{}"
    )


def test_serialize_closes_when_the_answer_or_the_caller_says_so() -> None:
    assert HttpResponse(200, b"", close=True).serialize().endswith(b"connection: close\r\n\r\n")
    assert HttpResponse(200, b"").serialize(close=True).endswith(b"connection: close\r\n\r\n")
    assert b"connection" not in HttpResponse(200, b"").serialize()


def test_a_head_answer_has_the_gets_length_and_no_body() -> None:
    answer = HttpResponse(200, b"hello", "text/plain")
    assert answer.serialize(head=True) == (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n"
    )


def test_informational_and_no_content_answers_have_no_content_headers() -> None:
    assert CONTINUE == b"HTTP/1.1 100 Continue\r\n\r\n"
    switching = HttpResponse(101, headers=[("upgrade", "websocket"), ("connection", "Upgrade")])
    assert switching.serialize() == (
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n"
    )
    assert HttpResponse(204, b"ignored").serialize() == b"HTTP/1.1 204 No Content\r\n\r\n"


def test_an_unknown_status_has_an_empty_reason_phrase() -> None:
    assert HttpResponse(599).serialize().startswith(b"HTTP/1.1 599 \r\n")


@pytest.mark.parametrize("header", [("x", "a\r\nb"), ("x", "a\nb"), ("x\r\ny", "v")])
def test_a_header_with_a_line_break_is_refused(header: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        HttpResponse(200, headers=[header]).serialize()


def test_the_gates_refusal_is_a_503_capacity_frame_that_closes() -> None:
    body = b'{"op":"error","id":null,"code":"capacity","message":"full","details":{}}'
    assert refusals.at_capacity("full").serialize() == (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


def test_every_refusal_closes_the_connection() -> None:
    h11_error = h11.RemoteProtocolError("no", 431)
    for answer in (
        refusals.refused(Refusal(403, ErrorCode.FORBIDDEN, "no")),
        refusals.too_large(10, 11),
        refusals.too_large(10),
        refusals.head_too_large(10),
        refusals.timed_out(1.0),
        refusals.bad_request(h11_error),
        refusals.at_capacity("full"),
    ):
        assert answer.close
        assert answer.serialize().endswith(b"connection: close\r\n\r\n" + answer.body)
    assert refusals.bad_request(h11_error).status == 431


def test_a_401_names_the_bearer_scheme() -> None:
    answer = refusals.refused(Refusal(401, ErrorCode.UNAUTHORIZED, "token"))
    assert answer.status == 401
    assert ("www-authenticate", "Bearer") in answer.headers


# --- RequestReader, on an in-memory stream ------------------------------------------------------


def _reader(max_body: int = 100, tokens: tuple[str, ...] = ()) -> tuple[RequestReader, Any]:
    client, server = trio.testing.memory_stream_pair()
    return RequestReader(server, Admission(tokens=tokens), max_body, "1.2.3.4"), client


async def test_a_request_is_read_whole_with_its_query_and_peer() -> None:
    reader, client = _reader()
    await client.send_all(
        b"POST /v1/x?a=1&b=2 HTTP/1.1\r\nHost: h\r\nContent-Type: Application/JSON; q=1\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    got = await reader.next()
    assert isinstance(got, HttpRequest)
    assert (got.method, got.path, got.query, got.body) == (
        "POST",
        "/v1/x",
        {"a": "1", "b": "2"},
        b"{}",
    )
    assert (got.content_type, got.peer, got.must_close) == ("application/json", "1.2.3.4", False)


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n",
    ],
)
async def test_keep_alive_is_h11s_rule(head: bytes) -> None:
    reader, client = _reader()
    await client.send_all(head)
    got = await reader.next()
    assert isinstance(got, HttpRequest) and got.must_close


async def test_pipelined_requests_survive_the_next_cycle() -> None:
    reader, client = _reader()
    await client.send_all(
        b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
        b"POST /b HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"
    )
    first = await reader.next()
    assert isinstance(first, HttpRequest) and first.path == "/a"
    reader.next_cycle()
    second = await reader.next()
    assert isinstance(second, HttpRequest) and (second.path, second.body) == ("/b", b"abc")


async def test_100_continue_is_sent_once_the_head_is_admitted() -> None:
    reader, client = _reader()
    await client.send_all(
        b"POST /b HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.next)
        assert await client.receive_some() == CONTINUE
        await client.send_all(b"abc")


async def test_a_declared_body_over_the_limit_is_413_before_any_100_continue() -> None:
    reader, client = _reader(max_body=10)
    await client.send_all(
        b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n"
    )
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 413 and got.close
    assert json.loads(got.body)["details"] == {"size": 11, "limit": 10}


async def test_a_chunked_body_over_the_limit_is_413_as_it_arrives() -> None:
    reader, client = _reader(max_body=10)
    await client.send_all(
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
        b"8\r\n12345678\r\n"
    )
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 413
    assert json.loads(got.body)["details"] == {"limit": 10}


async def test_a_head_over_the_limit_is_431_whole_or_in_pieces() -> None:
    reader, client = _reader()
    await client.send_all(b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * MAX_HEAD + b"\r\n\r\n")
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 431
    reader, client = _reader()
    await client.send_all(b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * MAX_HEAD)
    await client.send_all(b"a" * 100)
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 431


async def test_a_request_cut_short_is_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ecotone.server.http11.reader, "REQUEST_TIMEOUT", 0.05)
    for partial in (
        b"GET / HTTP/1.1\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n1",
    ):
        reader, client = _reader()
        await client.send_all(partial)
        got = await reader.next()
        assert isinstance(got, HttpResponse) and got.status == 408 and got.close


async def test_garbage_is_400_and_a_client_that_leaves_is_none() -> None:
    reader, client = _reader()
    await client.send_all(b"\x16\x03\x01 not http\r\n\r\n")
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 400
    reader, client = _reader()
    await client.aclose()
    assert await reader.next() is None


async def test_an_upgrade_keeps_the_bytes_after_its_head() -> None:
    reader, client = _reader(tokens=("t0", "t1"))
    await client.send_all(
        b"GET /ws?token=t1 HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\n"
        b"Connection: keep-alive, Upgrade\r\n\r\n\x81\x00"
    )
    got = await reader.next()
    assert isinstance(got, Upgrade)
    assert (got.request.path, got.request.principal, got.pending) == ("/ws", 1, b"\x81\x00")


async def test_admission_refuses_before_anything_is_read() -> None:
    reader, client = _reader(tokens=("t0",))
    await client.send_all(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n")
    got = await reader.next()
    assert isinstance(got, HttpResponse) and got.status == 401 and got.close
