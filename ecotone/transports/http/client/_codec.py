"""HTTP/1.1 for the http transport's client, sans-IO: a request's bytes, and the answer read
from what arrives, in the shape of h11 but cut to what a client of `POST /v1/frames` meets.

Both faces of the channel (`_async.py`, and `_sync.py` generated from it) use it, so it neither
reads nor writes. It is written here rather than taken from h11 for speed: a client of one
route needs none of h11's general event machinery, which costs every round trip more than the
stdlib's http.client did before, while each half of the work is a few string operations here
(the decision and its figures: docs/architecture.md, "The http transport's client reads
HTTP/1.1 itself"). An answer is framed as RFC 9112 says: by `Transfer-Encoding: chunked`, by
`Content-Length`, or by the end of the connection; 1xx interim answers are skipped. Anything
else that is not HTTP/1.x is an `HttpError`.
"""

from __future__ import annotations

MAX_HEAD = 65536
"""Bytes an answer's status line and headers may take."""


class HttpError(Exception):
    """What arrived is not an HTTP/1.x answer (or breaks off before its end)."""


class Answer:
    """One complete answer: its status, content type (without parameters), body, and whether
    the connection must close after it."""

    __slots__ = ("body", "content_type", "must_close", "status")

    def __init__(self, status: int, content_type: str, body: bytes, must_close: bool) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body
        self.must_close = must_close


def request_head(path: str, headers: list[tuple[str, str]]) -> bytes:
    """The start of a `POST path` request with `headers`, up to its `content-length` value
    (`request` completes it). ValueError for a header that would break the request."""
    lines = [f"POST {path} HTTP/1.1"] + [f"{name}: {value}" for name, value in headers]
    if any(c in line for line in lines for c in "\r\n\0"):
        raise ValueError("an HTTP header or path holds a line break")
    return ("\r\n".join(lines) + "\r\ncontent-length: ").encode("latin-1")


def request(head: bytes, body: bytes) -> bytes:
    """A whole request: `head` (from `request_head`) and `body`."""
    return b"%s%d\r\n\r\n%s" % (head, len(body), body)


class AnswerReader:
    """Reads answers one at a time: `feed` it what arrives (`b""`: the connection ended) until
    `answer` has one; bytes after an answer stay for the next."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._ended = False
        self._head: tuple[int, str, bool] | None = None  # status, content type, must close
        self._length: int | None = None  # Content-Length; None: chunked or to the end
        self._chunked = False
        self._body = bytearray()

    def feed(self, data: bytes) -> None:
        if not data:
            self._ended = True
        self._buffer += data

    def answer(self) -> Answer | None:
        """The next answer if what was fed completes it, else None (feed more). HttpError if
        it cannot be one, or the connection ended in the middle of it."""
        ended = self._ended
        if self._head is None and not self._read_head(ended):
            return None
        assert self._head is not None
        status, content_type, must_close = self._head
        if self._chunked:
            done = self._read_chunks(ended)
        elif self._length is not None:
            done = self._read_length(ended)
        else:  # framed by the end of the connection
            self._body += self._buffer
            self._buffer.clear()
            done = ended
        if not done:
            return None
        body, self._body = bytes(self._body), bytearray()
        self._head, self._length, self._chunked = None, None, False
        return Answer(status, content_type, body, must_close)

    def _read_head(self, ended: bool) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                raise HttpError(f"an answer's head is over {MAX_HEAD} bytes")
            if ended:
                raise HttpError("the connection closed before an answer")
            return False
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit() or rest[3:4] not in " ":
            raise HttpError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        headers = _headers(lines[1:])
        status = int(code)
        if 100 <= status < 200:  # an interim answer (100 Continue...): the real one follows
            return self._read_head(ended)
        connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        if version == "HTTP/1.0":
            must_close = "keep-alive" not in connection
        else:
            must_close = "close" in connection
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        self._frame(status, headers)
        if self._length is None and not self._chunked:
            must_close = True  # read to the end: nothing can follow it
        self._head = (status, content_type, must_close)
        return True

    def _frame(self, status: int, headers: dict[str, str]) -> None:
        """How the body of this answer ends (RFC 9112 section 6.3)."""
        if status in (204, 304):
            self._length = 0
        elif "transfer-encoding" in headers:
            codings = [c.strip().lower() for c in headers["transfer-encoding"].split(",")]
            if codings[-1] != "chunked":
                raise HttpError(f"an answer in a transfer coding not read here: {codings}")
            self._chunked = True
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            value = values.pop()
            if values or not value.isdigit():
                raise HttpError(f"a bad Content-Length: {headers['content-length']!r}")
            self._length = int(value)

    def _read_length(self, ended: bool) -> bool:
        assert self._length is not None
        want = self._length - len(self._body)
        self._body += self._buffer[:want]
        del self._buffer[:want]
        if len(self._body) == self._length:
            return True
        if ended:
            raise HttpError("the connection closed in the middle of an answer")
        return False

    def _read_chunks(self, ended: bool) -> bool:
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                break
            size_text = bytes(buffer[:line_end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpError(f"a bad chunk size: {size_text[:20]!r}") from None
            if size == 0:  # the last chunk, then trailers (ignored) and an empty line
                end = buffer.find(b"\r\n\r\n", line_end)
                if end < 0:
                    break
                del buffer[: end + 4]
                return True
            start = line_end + 2
            if len(buffer) < start + size + 2:
                break
            if buffer[start + size : start + size + 2] != b"\r\n":
                raise HttpError("a chunk that does not end where its size says")
            self._body += buffer[start : start + size]
            del buffer[: start + size + 2]
        if ended:
            raise HttpError("the connection closed in the middle of an answer")
        return False


def _headers(lines: list[str]) -> dict[str, str]:
    """Header lines by lower-cased name, repeated ones joined with `, `."""
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise HttpError(f"a malformed header line: {line[:80]!r}")
        name = name.lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers
