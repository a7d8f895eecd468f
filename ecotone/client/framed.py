"""Channels for length-prefixed frames: tcp://, unix:// and stdio: (a subprocess's pipes).

The blocking channel is a plain socket (or pipe) and `select`: no event loop, no thread. The
async channel is an anyio stream (trio or asyncio).
"""

from __future__ import annotations

import os
import select
import shlex
import socket
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.lowlevel

from ecotone.client._blocking import DeadlineReceiver
from ecotone.client.errors import ConnectionLost
from ecotone.client.tls import client_context, connect_tcp
from ecotone.specs.framing import FrameDecoder, TooLarge, encode

RECEIVE_SIZE = 65536
MAX_INCOMING = 1 << 31  # the server enforces its own limit; the client trusts its server
SEND_TIMEOUT = 30.0


def stdio_command(url: str) -> list[str]:
    """`stdio:ENV` -> serve ENV in a subprocess of this Python; `stdio:CMD ARGS` -> run CMD."""
    target = url.split(":", 1)[1].strip()
    if target.startswith("//"):
        target = target[2:]
    if not target:
        raise ValueError("stdio URL names nothing: use stdio:ENV or stdio:COMMAND ARGS")
    if " " in target:
        return shlex.split(target)
    return [sys.executable, "-m", "ecotone", "serve", target, "--transport", "stdio"]


def _address(url: str) -> tuple[int, Any]:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        path = parts.path or parts.netloc
        if not path:
            raise ValueError(f"unix URL {url!r} has no path: use unix:///path/to.sock")
        return socket.AF_UNIX, path
    if not parts.hostname or not parts.port:
        raise ValueError(f"tcp URL {url!r} needs a host and a port: tcp://HOST:PORT")
    return socket.AF_INET6 if ":" in parts.hostname else socket.AF_INET, (
        parts.hostname,
        parts.port,
    )


class FramedSyncChannel:
    """Blocking frames over a socket, or over a child process's stdin/stdout."""

    needs_hello = True
    """No headers here: a token goes in the connection's first frame, `hello`."""

    def __init__(self, url: str, connect_timeout: float) -> None:
        self.url = url
        self._decoder = FrameDecoder(MAX_INCOMING)
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        if url.startswith("stdio:"):
            command = stdio_command(url)
            try:
                self._proc = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
                )
            except OSError as exc:
                raise ConnectionLost(f"cannot start {shlex.join(command)}: {exc}") from exc
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._out_fd = self._proc.stdin.fileno()
            self._in_fd = self._proc.stdout.fileno()
        else:
            family, address = _address(url)
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(connect_timeout)
            try:
                sock.connect(address)
            except OSError as exc:
                sock.close()
                raise ConnectionLost(f"cannot connect to {url}: {exc}") from exc
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if url.startswith("tcp+tls:"):
                try:  # the handshake, within the connect timeout still set
                    sock = client_context().wrap_socket(sock, server_hostname=address[0])
                except OSError as exc:
                    sock.close()
                    raise ConnectionLost(f"cannot connect to {url}: {exc}") from exc
            self._sock = sock
            self._receiver = DeadlineReceiver(sock)

    def send(self, data: bytes) -> None:
        frame = encode(data)
        try:
            if self._sock is not None:
                self._sock.sendall(frame)
            else:
                view = memoryview(frame)
                while view:
                    view = view[os.write(self._out_fd, view) :]
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.url} lost while sending: {exc}") from exc

    def receive(self, deadline: float | None) -> list[bytes | str]:
        while True:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise TimeoutError
            try:
                if self._sock is not None:
                    data = self._receiver.recv(RECEIVE_SIZE, deadline)
                else:
                    ready, _, _ = select.select([self._in_fd], [], [], timeout)
                    if not ready:
                        raise TimeoutError
                    data = os.read(self._in_fd, RECEIVE_SIZE)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ConnectionLost(f"connection to {self.url} lost: {exc}") from exc
            if not data:
                raise ConnectionLost(self._gone())
            frames = [f for f in self._decoder.feed(data) if not isinstance(f, TooLarge)]
            if frames:
                return frames  # type: ignore[return-value]

    def _gone(self) -> str:
        if self._proc is not None:
            code = self._proc.poll()
            return (
                f"the server process ended (exit status {code})"
                if code is not None
                else ("the server process closed its output")
            )
        return f"the server at {self.url} closed the connection"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            return
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the server exits when its stdin closes
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class FramedAsyncChannel:
    """Frames over an anyio byte stream (trio or asyncio)."""

    needs_hello = True
    """No headers here: a token goes in the connection's first frame, `hello`."""

    def __init__(self, url: str, send_stream: Any, receive_stream: Any, closer: Any) -> None:
        self.url = url
        self._send = send_stream
        self._receive = receive_stream
        self._closer = closer
        self._decoder = FrameDecoder(MAX_INCOMING)
        self._out: list[bytes] = []
        self._flushing = False
        self._broken: ConnectionLost | None = None

    @classmethod
    async def open(cls, url: str, connect_timeout: float) -> FramedAsyncChannel:
        try:
            with anyio.fail_after(connect_timeout):
                if url.startswith("stdio:"):
                    command = stdio_command(url)
                    process = await anyio.open_process(command, stderr=None)
                    assert process.stdin is not None and process.stdout is not None

                    async def close_process() -> None:
                        assert process.stdin is not None
                        await process.stdin.aclose()
                        with anyio.move_on_after(5):
                            await process.wait()
                        if process.returncode is None:
                            process.kill()
                            await process.wait()
                        await process.aclose()

                    return cls(url, process.stdin, process.stdout, close_process)
                family, address = _address(url)
                if family == socket.AF_UNIX:
                    stream: anyio.abc.ByteStream = await anyio.connect_unix(address)
                else:
                    tls = url.startswith("tcp+tls:")
                    stream = await connect_tcp(address[0], address[1], tls)
                return cls(url, stream, stream, stream.aclose)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {url}: {exc}") from exc

    async def send(self, data: bytes) -> None:
        """Queue a frame; frames queued together go out in one write (see WsAsyncChannel)."""
        if self._broken is not None:
            raise self._broken
        self._out.append(encode(data))
        if self._flushing:
            return
        self._flushing = True
        try:
            await anyio.lowlevel.checkpoint()
            with anyio.CancelScope(shield=True), anyio.move_on_after(SEND_TIMEOUT) as scope:
                while self._out:
                    chunk = b"".join(self._out)
                    self._out.clear()
                    await self._send.send(chunk)
            if scope.cancelled_caught:
                self._broken = ConnectionLost(f"{self.url} accepted no data for {SEND_TIMEOUT}s")
                raise self._broken
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._broken = ConnectionLost(f"connection to {self.url} lost while sending: {exc}")
            raise self._broken from exc
        finally:
            self._flushing = False

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while True:
            try:
                data = await self._receive.receive(RECEIVE_SIZE)
            except anyio.EndOfStream:
                raise ConnectionLost(f"{self.url} closed the connection") from None
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise ConnectionLost(f"connection to {self.url} lost: {exc}") from exc
            frames = [f for f in self._decoder.feed(data) if not isinstance(f, TooLarge)]
            if frames:
                return frames  # type: ignore[return-value]

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._closer()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
