"""WebSocket channels: ecotone's frames (or OpenEnv's messages) as WebSocket messages.

The blocking channel is a plain socket with ecotone's own framing (`ecotone.specs.wsframing`)
and h11 for the opening handshake (`_handshake.py`): no event loop, no thread, so a call costs
one `sendall` and one `recv`. The async one is an anyio stream (trio or asyncio). The
`websocket` transport's client end opens them for ws:// and wss://, the OpenEnv profile's for
openenv+ws:// (one per session).
"""

from __future__ import annotations

import socket
import time

import anyio
import anyio.abc
import anyio.lowlevel

from ecotone.client._blocking import DeadlineReceiver
from ecotone.client._handshake import WsClientProtocol
from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.client.tls import client_context, connect_tcp

RECEIVE_SIZE = 65536
SEND_TIMEOUT = 30.0


class WsSyncChannel:
    """A WebSocket over a plain blocking socket: no event loop, no background thread."""

    def __init__(
        self,
        host: str,
        port: int,
        path: str,
        codec: str,
        connect_timeout: float,
        *,
        negotiate: bool = True,
        token: str | None = None,
        tls: bool = False,
    ) -> None:
        self.proto = WsClientProtocol(host, port, path, codec, negotiate=negotiate, token=token)
        where = f"{'wss' if tls else 'ws'}://{host}:{port}{path}"
        try:
            self.sock = socket.create_connection((host, port), timeout=connect_timeout)
            if tls:  # the handshake, within the connect timeout still set on the socket
                self.sock = client_context().wrap_socket(self.sock, server_hostname=host)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {where}: {exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._receiver = DeadlineReceiver(self.sock)
        self._early: list[bytes | str] = []
        deadline = time.monotonic() + connect_timeout
        pending: list[bytes | str] = []
        try:
            self.sock.sendall(self.proto.opening())
            while not self.proto.accepted:
                pending += self.receive(deadline)
        except TimeoutError:
            self.sock.close()
            raise EcotoneError(
                f"{where} did not complete the WebSocket handshake within {connect_timeout}s"
            ) from None
        except OSError as exc:  # reset or closed while shaking hands (a server going away)
            self.sock.close()
            raise ConnectionLost(f"{where} dropped the handshake: {exc}") from exc
        except BaseException:
            self.sock.close()
            raise
        self._early = pending

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(self.proto.message(data))
        except OSError as exc:
            raise ConnectionLost(f"connection lost while sending: {exc}") from exc

    def receive(self, deadline: float | None) -> list[bytes | str]:
        if self._early:
            early, self._early = self._early, []
            return early
        try:
            data = self._receiver.recv(RECEIVE_SIZE, deadline)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionLost(f"connection lost: {exc}") from exc
        messages = self.proto.feed(data)
        out = self.proto.take_outgoing()
        if out:
            try:
                self.sock.sendall(out)
            except OSError:
                pass
        return messages

    def close(self) -> None:
        try:
            data = self.proto.close()
            if data:
                self.sock.settimeout(1.0)
                self.sock.sendall(data)
        except OSError:
            pass
        finally:
            self.sock.close()


class WsAsyncChannel:
    """A WebSocket over an anyio stream: runs under trio and asyncio alike."""

    def __init__(self, stream: anyio.abc.ByteStream, proto: WsClientProtocol) -> None:
        self.stream = stream
        self.proto = proto
        self._send_lock = anyio.Lock()
        self._early: list[bytes | str] = []
        self._out: list[bytes] = []
        self._flushing = False
        self._broken: ConnectionLost | None = None

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        path: str,
        codec: str,
        connect_timeout: float,
        *,
        negotiate: bool = True,
        token: str | None = None,
        tls: bool = False,
    ) -> WsAsyncChannel:
        proto = WsClientProtocol(host, port, path, codec, negotiate=negotiate, token=token)
        try:
            with anyio.fail_after(connect_timeout):
                stream = await connect_tcp(host, port, tls)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to ws://{host}:{port}{path}: {exc}") from exc
        channel = cls(stream, proto)
        await stream.send(proto.opening())
        try:
            with anyio.fail_after(connect_timeout):
                while not proto.accepted:
                    channel._early += await channel._receive_raw()
        except TimeoutError:
            await stream.aclose()
            raise EcotoneError(
                f"ws://{host}:{port}{path} did not complete the WebSocket handshake "
                f"within {connect_timeout}s"
            ) from None
        return channel

    async def send(self, data: bytes) -> None:
        """Queue one message and make sure it is written.

        Frames queued by tasks that become ready together go out in one write (the first of
        them flushes after one scheduling pass), which is what lets many sessions multiplexed
        on one connection cost one syscall instead of one each. Writes are shielded from
        cancellation: a frame cut in half would corrupt the stream for every other task.
        """
        if self._broken is not None:
            raise self._broken
        self._out.append(self.proto.message(data))
        if self._flushing:
            return
        self._flushing = True
        try:
            await anyio.lowlevel.checkpoint()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(SEND_TIMEOUT) as scope:
                    while self._out:
                        chunk = b"".join(self._out)
                        self._out.clear()
                        async with self._send_lock:
                            await self.stream.send(chunk)
                if scope.cancelled_caught:
                    self._broken = ConnectionLost(
                        f"the server accepted no data for {SEND_TIMEOUT}s: connection dropped"
                    )
                    await self.stream.aclose()
                    raise self._broken
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._broken = ConnectionLost(f"connection lost while sending: {exc}")
            raise self._broken from exc
        finally:
            self._flushing = False

    async def _receive_raw(self) -> list[bytes | str]:
        try:
            data = await self.stream.receive(RECEIVE_SIZE)
        except anyio.EndOfStream:
            data = b""
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLost(f"connection lost: {exc}") from exc
        messages = self.proto.feed(data)
        out = self.proto.take_outgoing()
        if out:
            async with self._send_lock:
                try:
                    await self.stream.send(out)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
        return messages

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        if self._early:
            early, self._early = self._early, []
            return early
        return await self._receive_raw()

    async def aclose(self) -> None:
        try:
            data = self.proto.close()
            if data:
                with anyio.move_on_after(1.0, shield=True):
                    await self.stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()
