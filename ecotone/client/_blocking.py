"""Blocking receive with a deadline in one system call.

Python's `socket.settimeout` makes every `recv` a `poll` followed by a `recv`. Here the
socket stays in blocking mode and the kernel enforces the deadline (SO_RCVTIMEO), so a
receive that finds its answer costs a single `recv`. The option is only rewritten when the
time left is shorter than what is set, which on the hot path is never.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time

from ecotone.kernel.polling import BusyPoll, client_budget_us

_TIMEVAL = struct.Struct("@ll")


class DeadlineReceiver:
    """`recv(deadline)` on a blocking socket: bytes, `b""` at EOF, TimeoutError past it.

    On a plain socket a receive first polls without blocking for a while (busy polling,
    `ecotone.kernel.polling`; `$ECOTONE_BUSY_POLL_US`), yielding the CPU between tries."""

    __slots__ = ("_pending", "_poll", "_set", "sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(None)
        self.sock = sock
        self._set: float | None = None  # seconds currently in SO_RCVTIMEO (None: forever)
        self._pending = getattr(sock, "pending", None)
        """An SSLSocket's `pending`: bytes TLS has decrypted but not handed over yet."""
        budget = client_budget_us()
        self._poll = BusyPoll(budget) if budget and self._pending is None else None
        """Spin-then-block (not under TLS, whose socket takes no MSG_DONTWAIT)."""

    def _arm(self, seconds: float | None) -> None:
        if seconds is None:
            value = _TIMEVAL.pack(0, 0)
        else:
            seconds = max(seconds, 0.001)
            value = _TIMEVAL.pack(int(seconds), int((seconds % 1) * 1_000_000))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        self._set = seconds

    def recv(self, size: int, deadline: float | None) -> bytes:
        poll = self._poll
        if poll is None:
            return self._recv(size, deadline)
        sock = self.sock

        def attempt() -> bytes | None:
            try:
                return sock.recv(size, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return None

        data = poll.spin(attempt, deadline)
        if data is not None:
            return data
        began = time.monotonic()
        data = self._recv(size, deadline)
        poll.blocked(time.monotonic() - began)
        return data

    def _recv(self, size: int, deadline: float | None) -> bytes:
        while True:
            if deadline is None:
                if self._set is not None:
                    self._arm(None)
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                if self._set is None or remaining < self._set:
                    self._arm(remaining)
            try:
                data = self.sock.recv(size)
            except (BlockingIOError, ssl.SSLWantReadError):  # SO_RCVTIMEO expired: maybe
                continue  # only the armed slice (under TLS the same, said by OpenSSL)
            except InterruptedError:
                continue
            pending = self._pending
            if pending is not None and data:
                # Under TLS, bytes already decrypted are not on the socket any more: take
                # them now, or a select() on the socket would wait for them in vain.
                while left := pending():
                    data += self.sock.recv(left)
            return data
