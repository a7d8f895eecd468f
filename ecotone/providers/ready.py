"""Is the server at a URL answering yet? One application-level probe per transport.

A port that accepts a connection is not enough: Docker's port proxy accepts on the host side
before anything listens in the container, then closes. So the probe waits for an answer that
only an ecotone server gives:

- `ws://`, `http://`: an HTTP request (`GET /health`) and any HTTP status line in return
  (the WebSocket transport answers plain HTTP too, with an error status);
- `tcp://`, `unix://`: a length-prefixed `ping` frame and its `pong`;
- their TLS forms (`wss://`, `https://`, `tcp+tls://`) the same, under TLS.

Providers call `wait_ready` with a check that says whether their server is still alive, so a
server that dies during start is reported at once rather than at the deadline.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import anyio
import anyio.abc

from ecotone.specs import Ping, Pong, codec_for, framing

PROBE_TIMEOUT = 2.0
"""Seconds one probe may take once connected."""


class NotReady(Exception):
    """The last probe failed; the message says how."""


async def _connect(url: str) -> anyio.abc.ByteStream:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return await anyio.connect_unix(parts.path)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"cannot probe {url!r}: no host or port")
    if parts.scheme in ("wss", "https", "tcp+tls"):
        # Liveness only: whether the client trusts the certificate is the client's check
        # (ECOTONE_CA_BUNDLE), made when it connects.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return await anyio.connect_tcp(
            parts.hostname, parts.port, ssl_context=context, tls_standard_compatible=False
        )
    return await anyio.connect_tcp(parts.hostname, parts.port)


async def _probe_http(stream: anyio.abc.ByteStream, url: str) -> None:
    host = urlsplit(url).netloc
    await stream.send(f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while b"\r\n" not in data:
        chunk = await stream.receive(4096)
        data += chunk
        if len(data) > 65536:
            break
    if not data.startswith(b"HTTP/1."):
        raise NotReady(f"not an HTTP answer: {data[:40]!r}")


async def _probe_framed(stream: anyio.abc.ByteStream) -> None:
    codec = codec_for("json")
    await stream.send(framing.encode(codec.encode(Ping(id="ready"))))
    decoder = framing.FrameDecoder(limit=1 << 20)
    while True:
        for payload in decoder.feed(await stream.receive(65536)):
            if isinstance(payload, framing.TooLarge):
                raise NotReady("answer too large")
            if isinstance(codec.decode_response(payload), Pong):
                return
            raise NotReady(f"answered {payload[:60]!r} to a ping")


async def probe(url: str) -> None:
    """One attempt: returns if an ecotone server answers at `url`, else raises (OSError,
    NotReady, anyio errors, TimeoutError)."""
    stream = await _connect(url)
    async with stream:
        with anyio.fail_after(PROBE_TIMEOUT):
            if url.startswith(("ws://", "http://", "wss://", "https://")):
                await _probe_http(stream, url)
            else:
                await _probe_framed(stream)


async def wait_ready(
    url: str,
    deadline: float,
    *,
    alive: Callable[[], Awaitable[bool]] | None = None,
    interval: float = 0.02,
) -> bool:
    """Probe `url` until it answers (True), `alive()` says the server is gone (False), or
    `deadline` (anyio.current_time() value) passes (TimeoutError)."""
    delay = interval
    last = "no attempt"
    while True:
        if alive is not None and not await alive():
            return False
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            raise TimeoutError(f"no answer at {url} ({last})")
        try:
            with anyio.fail_after(max(remaining, 0.001)):
                await probe(url)
            return True
        except (OSError, NotReady, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except TimeoutError:
            last = "probe timed out"
        await anyio.sleep(min(delay, max(deadline - anyio.current_time(), 0)))
        delay = min(delay * 1.5, 0.25)
