# unasync: the source of ecotone/transports/http/client/_sync.py
"""The `http` transport's client end: each frame a `POST /v1/frames` on a keep-alive HTTP/1.1
connection (`_codec` on the face's stream), for networks where only plain HTTP gets through.

One request is in flight per connection (no HTTP pipelining): a request sent while another's
answer is due reads that answer first, and keeps it for `receive`. An answer that cannot be
read to its end (a timeout, a cancellation, a broken connection) drops the connection, so it
is never taken for a later one; the next request reconnects. Sessions live on the server, not
in the connection, so nothing is lost by reconnecting. In the async face a task reads its own
request's answer, holding the channel's turn (`io.CONCURRENT`), so no other task's
cancellation can drop it; in the blocking face `receive` reads it, with the caller's deadline.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ecotone.client._async import io, net
from ecotone.client.errors import ConnectionLost
from ecotone.transports.http.client._codec import AnswerReader, HttpError, request, request_head

FRAMES_PATH = "/v1/frames"
RECEIVE_SIZE = 65536
FRAME_TYPES = ("application/json", "application/msgpack")
"""The content types of an answer that is a frame (anything else is an HTTP error page)."""


class AsyncHttpChannel:
    """Frames as HTTP requests on one keep-alive connection; async tasks take turns on it."""

    def __init__(
        self, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> None:
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"URL {url!r} has no host")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.tls else 80)
        content_type = FRAME_TYPES[1] if codec == "msgpack" else FRAME_TYPES[0]
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        self.head = request_head(
            parts.path.rstrip("/") + FRAMES_PATH,
            [
                ("host", f"{host}:{self.port}"),
                ("content-type", content_type),
                ("accept", content_type),
                *([("authorization", f"Bearer {token}")] if token else []),
            ],
        )
        self.connect_timeout = connect_timeout
        self._stream: net.AsyncStream | None = None
        self._reader = AnswerReader()
        self._lock = io.Lock()
        self._waiting = False  # a request is out, its answer not read yet
        self._out: list[bytes | str] = []  # answers read, for `receive`
        self._sent = io.Wakeup()

    @classmethod
    async def open(
        cls, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> AsyncHttpChannel:
        """A channel to `url`, connected (ConnectionLost if nothing answers)."""
        channel = cls(url, codec, connect_timeout, token)
        await channel._connect()
        return channel

    async def _connect(self) -> net.AsyncStream:
        self._stream = await net.connect_tcp(
            self.host, self.port, tls=self.tls, timeout=self.connect_timeout, label=self.url
        )
        self._reader = AnswerReader()
        return self._stream

    async def _drop(self) -> None:
        stream, self._stream = self._stream, None
        self._waiting = False
        if stream is not None:
            await stream.aclose()

    async def send(self, data: bytes) -> None:
        async with self._lock:
            if self._waiting:  # one request in flight: the answer due is read first
                self._out += await self._answer(None)
            await self._request(data)
            if io.CONCURRENT:  # the async face: this task reads its own answer
                self._out += await self._answer(None)
        self._sent.set()

    async def _request(self, data: bytes) -> None:
        stream = self._stream or await self._connect()
        try:
            await stream.send(request(self.head, data))
        except ConnectionLost:  # a stale keep-alive connection: one retry on a fresh one
            await self._drop()
            stream = await self._connect()
            await stream.send(request(self.head, data))
        self._waiting = True

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while not self._out:
            if not self._waiting:  # nothing is due: the blocking face raises TimeoutError
                await self._sent.wait()
                continue
            async with self._lock:
                if self._waiting and not self._out:
                    self._out += await self._answer(deadline)
        out, self._out = self._out, []
        return out

    async def _answer(self, deadline: float | None) -> list[bytes | str]:
        """The answer due, read to its end; the connection is dropped if it cannot be."""
        reader, stream = self._reader, self._stream
        assert stream is not None
        try:
            while (answer := reader.answer()) is None:
                reader.feed(await stream.receive(RECEIVE_SIZE, deadline))
        except HttpError as exc:
            await self._drop()
            raise ConnectionLost(f"connection to {self.url} lost: {exc}") from exc
        except BaseException:  # timed out, cancelled or broken mid-answer: never reused
            await self._drop()
            raise
        self._waiting = False
        if answer.must_close:
            await self._drop()
        if answer.content_type not in FRAME_TYPES:
            body = answer.body[:200]
            raise ConnectionLost(f"{self.url} answered HTTP {answer.status}: {body!r}")
        return [answer.body]

    def fileno(self) -> int | None:
        """The keep-alive socket's descriptor (for `select`), None while not connected."""
        return self._stream.fileno() if self._stream is not None else None

    async def aclose(self) -> None:
        await self._drop()


async def open_channel(
    url: str,
    codec: str,
    connect_timeout: float,
    token: str | None,
) -> AsyncHttpChannel:
    """A channel for an http:// or https:// URL: the `http` transport's client end."""
    return await AsyncHttpChannel.open(url, codec, connect_timeout, token)
