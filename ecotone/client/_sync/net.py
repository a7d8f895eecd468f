"""The blocking face's streams: plain sockets and pipes, no event loop, no thread.

The async face's twin is `ecotone/client/_async/net.py`, which states the contract both keep;
the channels, written once as async source and generated for this face by scripts/unasync.py,
call these by the same names. Here a send is one `sendall` (no deadline: as before, a blocking
client waits for its server to take the bytes), a receive one `recv` under a deadline the
kernel keeps (SO_RCVTIMEO, `DeadlineReceiver`, spinning first) that raises TimeoutError once
`deadline` passes, and closing gives a farewell `CLOSE_GRACE` seconds.
"""

from __future__ import annotations

import os
import select
import shlex
import socket
import subprocess
import time
from typing import Protocol

from ecotone.client._blocking import DeadlineReceiver
from ecotone.client.errors import ConnectionLost
from ecotone.client.tls import client_context

CLOSE_GRACE = 1.0
"""Seconds a closing stream gives its last bytes (a WebSocket close frame)."""
PROCESS_GRACE = 5.0
"""Seconds a server process has to exit once its stdin is closed, before it is killed."""


class Stream(Protocol):
    """Bytes to and from a server (see the async face's module for the contract)."""

    label: str
    """What the stream reaches (a URL), for messages."""

    def send(self, data: bytes) -> None: ...
    def receive(self, size: int, deadline: float | None = None) -> bytes: ...
    def fileno(self) -> int | None:
        """A descriptor to `select` on, or None (then the stream is read in turn)."""
        ...

    def gone(self) -> str:
        """Why `receive` returned `b""`: the message for the ConnectionLost to raise."""
        ...

    def close(self, farewell: bytes = b"") -> None: ...


class SocketStream(DeadlineReceiver):
    """A connected socket in blocking mode (TLS or not): one `sendall`, one `recv`."""

    __slots__ = ("label",)

    def __init__(self, sock: socket.socket, label: str) -> None:
        super().__init__(sock)
        self.label = label

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.label} lost while sending: {exc}") from exc

    def receive(self, size: int, deadline: float | None = None) -> bytes:
        try:
            return self.recv(size, deadline)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.label} lost: {exc}") from exc

    def fileno(self) -> int | None:
        return self.sock.fileno()

    def gone(self) -> str:
        return f"the server at {self.label} closed the connection"

    def close(self, farewell: bytes = b"") -> None:
        """Idempotent (a closed socket's descriptor is -1, and closing it again is nothing)."""
        try:
            if farewell and self.sock.fileno() != -1:
                self.sock.settimeout(CLOSE_GRACE)
                self.sock.sendall(farewell)
        except OSError:
            pass
        finally:
            self.sock.close()


class PipeStream:
    """A server process's stdin and stdout (`stdio:`): `os.write`, `select` and `os.read`."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.label = label
        self._out = proc.stdin.fileno()
        self._in = proc.stdout.fileno()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._out, view) :]
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.label} lost while sending: {exc}") from exc

    def receive(self, size: int, deadline: float | None = None) -> bytes:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise TimeoutError
        try:
            ready, _, _ = select.select([self._in], [], [], timeout)
            if not ready:
                raise TimeoutError
            return os.read(self._in, size)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.label} lost: {exc}") from exc

    def fileno(self) -> int | None:
        return None  # several stdio links are read in turn, not selected on

    def gone(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "the server process closed its output"
        return f"the server process ended (exit status {code})"

    def close(self, farewell: bytes = b"") -> None:
        """Close its stdin (a server exits then), wait `PROCESS_GRACE` seconds, then kill it.
        Idempotent."""
        proc = self.proc
        if proc.stdin is not None:
            proc.stdin.close()  # the server exits when its stdin closes
        try:
            proc.wait(timeout=PROCESS_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def connect_tcp(host: str, port: int, *, tls: bool, timeout: float, label: str) -> Stream:
    """A TCP connection to host:port within `timeout` seconds (the TLS handshake included, the
    server's certificate checked, when `tls`), with TCP_NODELAY."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ConnectionLost(f"cannot connect to {label}: {exc}") from exc
    if tls:
        try:  # the handshake, within the connect timeout still set on the socket
            sock = client_context().wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            sock.close()
            raise ConnectionLost(f"cannot connect to {label}: {exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return SocketStream(sock, label)


def connect_unix(path: str, *, timeout: float, label: str) -> Stream:
    """A connection to the unix socket at `path` within `timeout` seconds."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise ConnectionLost(f"cannot connect to {label}: {exc}") from exc
    return SocketStream(sock, label)


def open_process(command: list[str], *, timeout: float, label: str) -> Stream:
    """`command` started, its stdin and stdout the stream (`timeout` is the async face's:
    starting a process here does not wait)."""
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    except OSError as exc:
        raise ConnectionLost(f"cannot start {shlex.join(command)}: {exc}") from exc
    return PipeStream(proc, label)
