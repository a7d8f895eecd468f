"""The HTTP/1.1 front door's pieces without a socket: the one serializer, the refusals."""

from __future__ import annotations

import h11
import pytest

from ecotone.server.admission import Refusal
from ecotone.server.http11 import refusals
from ecotone.specs import ErrorCode
from ecotone.specs.http import CONTINUE, HttpResponse


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
