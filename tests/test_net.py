"""The client faces' streams (`ecotone/client/{_async,_sync}/net.py`), on real sockets: the
contract the channels written once rely on, kept by both faces."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import trio

from ecotone.client._async import net as anet
from ecotone.client._sync import net as snet
from ecotone.client.errors import ConnectionLost


@pytest.fixture
def server() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener


def _port(listener: socket.socket) -> int:
    return int(listener.getsockname()[1])


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return _port(listener)


def _read_to_end(peer: socket.socket) -> bytes:
    data = bytearray()
    while chunk := peer.recv(1 << 20):
        data += chunk
    return bytes(data)


def test_blocking_stream_receives_within_its_deadline_and_sees_the_end(
    server: socket.socket,
) -> None:
    stream = snet.connect_tcp("127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x")
    peer, _ = server.accept()
    with peer:
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            stream.receive(100, time.monotonic() + 0.05)
        assert time.monotonic() - began < 1
        stream.send(b"ping")
        assert peer.recv(4) == b"ping"
        peer.sendall(b"pong")
        assert stream.receive(100, time.monotonic() + 5) == b"pong"
        assert stream.fileno() is not None
    assert stream.receive(100, time.monotonic() + 5) == b""  # the peer closed
    assert "closed the connection" in stream.gone()
    stream.close(b"bye")
    stream.close(b"bye")  # idempotent, and a farewell to a gone peer is no error


def test_blocking_stream_gives_its_farewell_then_closes(server: socket.socket) -> None:
    stream = snet.connect_tcp("127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x")
    peer, _ = server.accept()
    with peer:
        stream.send(b"last ")
        stream.close(b"words")
        assert _read_to_end(peer) == b"last words"


def test_blocking_connect_to_nothing_is_connection_lost() -> None:
    port = _closed_port()
    with pytest.raises(ConnectionLost, match=f"cannot connect to tcp://127.0.0.1:{port}"):
        snet.connect_tcp("127.0.0.1", port, tls=False, timeout=5, label=f"tcp://127.0.0.1:{port}")
    with pytest.raises(ConnectionLost, match="cannot connect to unix:///nowhere"):
        snet.connect_unix("/nonexistent/ecotone.sock", timeout=5, label="unix:///nowhere")


def test_blocking_send_to_a_reset_peer_is_connection_lost(server: socket.socket) -> None:
    stream = snet.connect_tcp("127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x")
    peer, _ = server.accept()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.close()  # with SO_LINGER 0: a reset
    with pytest.raises(ConnectionLost, match="connection to tcp://x lost"):
        for _ in range(100):
            stream.send(b"x" * 65536)
    stream.close()


async def test_async_stream_sends_receives_and_sees_the_end(server: socket.socket) -> None:
    stream = await anet.connect_tcp(
        "127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x"
    )
    peer, _ = server.accept()
    with peer:
        async with trio.open_nursery() as nursery:  # writes in one pass go out in one write
            for part in (b"a", b"b", b"c"):
                nursery.start_soon(stream.send, part)
        assert sorted(await trio.to_thread.run_sync(peer.recv, 10)) == sorted(b"abc")
        peer.sendall(b"pong")
        assert await stream.receive(100) == b"pong"
    assert await stream.receive(100) == b""
    await stream.aclose(b"bye")
    await stream.aclose(b"bye")


async def test_async_farewell_waits_behind_a_write_in_progress(server: socket.socket) -> None:
    """A close frame is queued behind what another task is writing, never written beside it
    (two writers on one stream: anyio's BusyResourceError, or bytes interleaved)."""
    stream = await anet.connect_tcp(
        "127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x"
    )
    peer, _ = server.accept()
    big = b"x" * (16 << 20)  # more than the socket buffers hold: the flush has to wait
    peer.settimeout(10)  # a close that never comes fails the test, not hangs it
    with peer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send, big)
            await trio.sleep(0.05)  # the send is flushing, blocked on the full buffers
            nursery.start_soon(stream.aclose, b"BYE")
            received = await trio.to_thread.run_sync(_read_to_end, peer)
    assert received == big + b"BYE"


async def test_async_connect_to_nothing_and_a_broken_send_are_connection_lost(
    server: socket.socket,
) -> None:
    port = _closed_port()
    with pytest.raises(ConnectionLost, match=f"cannot connect to tcp://127.0.0.1:{port}"):
        await anet.connect_tcp(
            "127.0.0.1", port, tls=False, timeout=5, label=f"tcp://127.0.0.1:{port}"
        )
    stream = await anet.connect_tcp(
        "127.0.0.1", _port(server), tls=False, timeout=5, label="tcp://x"
    )
    peer, _ = server.accept()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.close()
    with pytest.raises(ConnectionLost, match="connection to tcp://x lost") as first:
        for _ in range(100):
            await stream.send(b"x" * 65536)
            await trio.sleep(0.01)
    with pytest.raises(ConnectionLost) as again:  # every later send: the same error
        await stream.send(b"x")
    assert again.value is first.value
    await stream.aclose()


def test_a_process_stream_says_how_the_process_ended() -> None:
    stream = snet.open_process(["python3", "-c", "exit(3)"], timeout=5, label="stdio:x")
    assert stream.fileno() is None  # read in turn, not selected on
    assert stream.receive(10, time.monotonic() + 5) == b""
    assert isinstance(stream, snet.PipeStream)
    stream.proc.wait(5)
    assert stream.gone() == "the server process ended (exit status 3)"
    stream.close()
    stream.close()


async def test_an_async_process_stream_ends_with_its_process() -> None:
    stream = await anet.open_process(["python3", "-c", "print('hi')"], timeout=5, label="stdio:x")
    received = b""
    while chunk := await stream.receive(10):
        received += chunk
    assert received == b"hi\n"
    await stream.aclose()
    await stream.aclose()
