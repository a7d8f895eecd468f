"""HTTP channels: each frame is a `POST /v1/frames` on a keep-alive HTTP/1.1 connection.

For networks where only plain HTTP gets through. One request is in flight per connection (no
HTTP pipelining); a request that times out drops the connection (its answer can never be
mistaken for a later one) and the next request reconnects. Sessions live on the server, not in
the connection, so nothing is lost by reconnecting.
"""

from __future__ import annotations

import collections
import http.client
import socket
import time
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

from ecotone.client.errors import ConnectionLost
from ecotone.client.tls import client_context, connect_tcp

FRAMES_PATH = "/v1/frames"
RECEIVE_SIZE = 65536


def _endpoint(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"URL {url!r} has no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port, parts.path.rstrip("/") + FRAMES_PATH


def _content_type(codec: str) -> str:
    return "application/msgpack" if codec == "msgpack" else "application/json"


class HttpSyncChannel:
    """Blocking: the stdlib's http.client with keep-alive."""

    def __init__(
        self, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> None:
        self.url = url
        self.host, self.port, self.path = _endpoint(url)
        self.content_type = _content_type(codec)
        self.auth = [("authorization", f"Bearer {token}")] if token else []
        self.connect_timeout = connect_timeout
        self._conn: http.client.HTTPConnection | None = None
        self._waiting = False
        self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.url.startswith("https:"):
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout, context=client_context()
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {self.url}: {exc}") from exc
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = conn
        return conn

    def send(self, data: bytes) -> None:
        conn = self._conn or self._connect()
        headers = {
            "content-type": self.content_type,
            "accept": self.content_type,
            **dict(self.auth),
        }
        try:
            conn.request("POST", self.path, body=data, headers=headers)
        except (OSError, http.client.HTTPException):
            conn.close()  # a stale keep-alive connection: one retry on a fresh one
            conn = self._connect()
            try:
                conn.request("POST", self.path, body=data, headers=headers)
            except (OSError, http.client.HTTPException) as exc:
                raise ConnectionLost(f"cannot send to {self.url}: {exc}") from exc
        self._waiting = True

    def fileno(self) -> int | None:
        """The keep-alive socket's descriptor (for `select`), None while not connected."""
        conn = self._conn
        return conn.sock.fileno() if conn is not None and conn.sock is not None else None

    def receive(self, deadline: float | None) -> list[bytes | str]:
        conn = self._conn
        if conn is None or not self._waiting:
            raise TimeoutError
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            self._drop()
            raise TimeoutError
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        try:
            response = conn.getresponse()
            body = response.read()
        except TimeoutError:
            self._drop()
            raise
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise ConnectionLost(f"connection to {self.url} lost: {exc}") from exc
        self._waiting = False
        if response.getheader("content-type", "").split(";")[0] not in (
            "application/json",
            "application/msgpack",
        ):
            raise ConnectionLost(f"{self.url} answered HTTP {response.status}: {body[:200]!r}")
        return [body]

    def _drop(self) -> None:
        self._waiting = False
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._drop()


class HttpAsyncChannel:
    """Async (trio or asyncio): h11 on an anyio stream; requests take turns on one connection."""

    def __init__(
        self, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> None:
        self.url = url
        self.host, self.port, self.path = _endpoint(url)
        self.content_type = _content_type(codec)
        self.auth = [("authorization", f"Bearer {token}")] if token else []
        self.connect_timeout = connect_timeout
        self._stream: anyio.abc.ByteStream | None = None
        self._h11: h11.Connection | None = None
        self._lock = anyio.Lock()
        self._out: collections.deque[bytes | str] = collections.deque()
        self._arrived = anyio.Event()

    @classmethod
    async def open(
        cls, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> HttpAsyncChannel:
        channel = cls(url, codec, connect_timeout, token)
        await channel._connect()
        return channel

    async def _connect(self) -> anyio.abc.ByteStream:
        try:
            with anyio.fail_after(self.connect_timeout):
                tls = self.url.startswith("https:")
                self._stream = await connect_tcp(self.host, self.port, tls)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {self.url}: {exc}") from exc
        self._h11 = h11.Connection(h11.CLIENT)
        return self._stream

    async def _drop(self) -> None:
        stream, self._stream, self._h11 = self._stream, None, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def send(self, data: bytes) -> None:
        """Make the whole request and queue its answer for `receive`."""
        async with self._lock:
            try:
                body = await self._roundtrip(data)
            except BaseException:
                await self._drop()  # cancelled or failed mid-request: never reuse this socket
                raise
        self._out.append(body)
        self._arrived.set()

    async def _roundtrip(self, data: bytes) -> bytes:
        stream = self._stream or await self._connect()
        conn = self._h11
        assert conn is not None
        request = h11.Request(
            method="POST",
            target=self.path,
            headers=[
                ("host", f"{self.host}:{self.port}"),
                ("content-type", self.content_type),
                ("content-length", str(len(data))),
                *self.auth,
            ],
        )
        try:
            await stream.send(
                conn.send(request) + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage())
            )
            body = bytearray()
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive(RECEIVE_SIZE))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionLost(f"{self.url} closed the connection")
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, h11.ProtocolError) as exc:
            raise ConnectionLost(f"connection to {self.url} lost: {exc}") from exc
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            await self._drop()
        else:
            conn.start_next_cycle()
        if not body:
            raise ConnectionLost(f"{self.url} answered HTTP {status} with no body")
        return bytes(body)

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while not self._out:
            await self._arrived.wait()
            self._arrived = anyio.Event()
        out = list(self._out)
        self._out.clear()
        return out

    async def aclose(self) -> None:
        await self._drop()


class HttpChannels:
    """Opens http:// and https:// channels (the scheme says which)."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> HttpSyncChannel:
        return HttpSyncChannel(url, codec, connect_timeout, token)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> HttpAsyncChannel:
        return await HttpAsyncChannel.open(url, codec, connect_timeout, token)
