"""The http transport client's HTTP/1.1 codec (`ecotone.transports.http.client._codec`):
requests as bytes, answers however they are framed and however they arrive."""

from __future__ import annotations

import pytest

from ecotone.transports.http.client._codec import (
    MAX_HEAD,
    Answer,
    AnswerReader,
    HttpError,
    request,
    request_head,
)

JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\n"


def read(*pieces: bytes) -> tuple[AnswerReader, list[Answer]]:
    """Feed `pieces` one at a time, collecting every answer they complete."""
    reader = AnswerReader()
    answers = []
    for piece in pieces:
        reader.feed(piece)
        while (answer := reader.answer()) is not None:
            answers.append(answer)
    return reader, answers


def test_a_request_is_its_head_its_length_and_its_body() -> None:
    head = request_head("/v1/frames", [("host", "h:80"), ("authorization", "Bearer t")])
    assert request(head, b"{}") == (
        b"POST /v1/frames HTTP/1.1\r\nhost: h:80\r\nauthorization: Bearer t\r\n"
        b"content-length: 2\r\n\r\n{}"
    )


def test_a_header_cannot_smuggle_a_line() -> None:
    with pytest.raises(ValueError, match="line break"):
        request_head("/v1/frames", [("authorization", "Bearer t\r\nx-evil: 1")])


def test_an_answer_by_content_length_in_any_pieces() -> None:
    whole = JSON_HEAD + b'content-length: 7\r\n\r\n{"a":1}'
    for cut in range(1, len(whole)):
        _, answers = read(whole[:cut], whole[cut:])
        assert len(answers) == 1, cut
        answer = answers[0]
        assert (answer.status, answer.content_type, answer.body) == (
            200,
            "application/json",
            b'{"a":1}',
        )
        assert not answer.must_close


def test_bytes_after_an_answer_begin_the_next() -> None:
    one = JSON_HEAD + b"content-length: 1\r\n\r\n1"
    two = JSON_HEAD + b"content-length: 1\r\n\r\n2"
    _, answers = read(one + two[:10], two[10:])
    assert [a.body for a in answers] == [b"1", b"2"]


def test_a_chunked_answer_with_extensions_and_trailers() -> None:
    whole = (
        JSON_HEAD + b"transfer-encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n0a\r\n0123456789\r\n0\r\nx-trailer: y\r\n\r\n"
    )
    for cut in range(1, len(whole)):
        _, answers = read(whole[:cut], whole[cut:])
        assert [a.body for a in answers] == [b"abc0123456789"], cut
    _, answers = read(JSON_HEAD + b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n")
    assert answers[0].body == b""


def test_an_answer_to_the_end_of_the_connection_closes_it() -> None:
    reader, answers = read(JSON_HEAD + b"\r\n" + b"part one, ", b"part two")
    assert answers == []
    reader.feed(b"")
    answer = reader.answer()
    assert answer is not None and answer.body == b"part one, part two" and answer.must_close


def test_interim_answers_are_skipped() -> None:
    _, answers = read(b"HTTP/1.1 100 Continue\r\n\r\n" + JSON_HEAD + b"content-length: 0\r\n\r\n")
    assert [a.status for a in answers] == [200]


@pytest.mark.parametrize(
    ("head", "must_close"),
    [
        (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\ncontent-length: 0\r\n\r\n", True),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n", True),
        (b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False),
    ],
)
def test_whether_the_connection_must_close(head: bytes, must_close: bool) -> None:
    _, answers = read(head)
    assert answers[0].must_close is must_close
    assert answers[0].content_type == ""


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", "transfer coding"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nabc\r\n", "does not end"),
    ],
)
def test_what_is_no_answer_is_an_error(data: bytes, match: str) -> None:
    with pytest.raises(HttpError, match=match):
        read(data)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\n",
        JSON_HEAD + b"content-length: 5\r\n\r\nab",
        JSON_HEAD + b"transfer-encoding: chunked\r\n\r\n5\r\nab",
    ],
)
def test_an_answer_cut_off_by_the_end_of_the_connection_is_an_error(data: bytes) -> None:
    reader, answers = read(data)
    assert answers == []
    reader.feed(b"")
    with pytest.raises(HttpError, match="closed"):
        reader.answer()


def test_an_endless_head_is_an_error() -> None:
    with pytest.raises(HttpError, match="head is over"):
        read(b"HTTP/1.1 200 OK\r\n" + b"x-filler: " + b"y" * MAX_HEAD)
