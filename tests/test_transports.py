"""Transports are swapped by configuration: the same episode over each gives the same results.
Plus the length-prefixed transports (tcp, unix, stdio) at the byte level, and the sans-IO
frame decoder behind them."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

import ecotone
from ecotone.kernel import Limits
from ecotone.server.sockets import SendLock
from ecotone.specs.framing import FrameDecoder, TooLarge, detect_codec, encode
from tests.conftest import RunningServer, ecotone_serving, run_server, wait_until

# --- one episode, every transport ------------------------------------------------------------

DELTAS = (2, 3, -1, 6)
EXPECTED_STEPS = [
    # (count, reward, done, truncated) after reset(start=1, target=10) and each delta
    (1, None, False, False),
    (3, 2.0, False, False),
    (6, 3.0, False, False),
    (5, -1.0, False, False),
    (11, 6.0, True, False),
]
EXPECTED_STATE = {
    "episode_id": "ep-swap",
    "step_count": 4,
    "count": 11,
    "target": 10,
    "max_steps": None,
}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """counter served over every network transport; name -> client URL."""
    with contextlib.ExitStack() as stack:
        sock_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="eco"))
        ws = stack.enter_context(run_server("counter"))
        http = stack.enter_context(run_server("counter", transport="http"))
        tcp = stack.enter_context(run_server("counter", transport="tcp"))
        unix = stack.enter_context(
            run_server("counter", transport="unix", host=os.path.join(sock_dir, "c.sock"))
        )
        yield {
            "websocket": ws.url,
            "http-ws": http.ws_url,
            "http": http.url,
            "tcp": tcp.url,
            "unix": unix.url,
            "stdio": "stdio:counter",
            "inproc": "inproc://counter",
        }


ROUTES = ["websocket", "http-ws", "http", "tcp", "unix", "stdio", "inproc"]


def summary(result: ecotone.StepResult[Any]) -> tuple[Any, ...]:
    assert set(result.observation) == {"count", "reward", "done", "truncated", "metadata"}
    return (result.observation["count"], result.reward, result.done, result.truncated)


def test_server_urls_name_their_transport(servers: dict[str, str]) -> None:
    assert servers["websocket"].startswith("ws://127.0.0.1:")
    assert servers["http"].startswith("http://127.0.0.1:")
    assert servers["tcp"].startswith("tcp://127.0.0.1:")
    assert re.fullmatch(r"unix:///.+/c\.sock", servers["unix"])


@pytest.mark.parametrize("codec", ["json", "msgpack"])
@pytest.mark.parametrize("route", ROUTES)
def test_the_same_episode_over_every_transport(
    servers: dict[str, str], route: str, codec: str
) -> None:
    with ecotone.connect(servers[route], codec=codec) as env:
        got = [summary(env.reset(seed=5, episode_id="ep-swap", start=1, target=10))]
        with pytest.raises(ecotone.InvalidActionError) as invalid:
            env.step({"delta": "two"})  # refused, and the episode is unchanged
        got += [summary(env.step({"delta": d})) for d in DELTAS]
        state = env.state()
    assert got == EXPECTED_STEPS
    assert state == EXPECTED_STATE
    assert invalid.value.field == "delta"


@pytest.mark.parametrize("route", ROUTES)
async def test_the_same_episode_over_every_transport_async(
    servers: dict[str, str], route: str
) -> None:
    async with ecotone.aconnect(servers[route]) as env:
        got = [summary(await env.reset(seed=5, episode_id="ep-swap", start=1, target=10))]
        for d in DELTAS:
            got.append(summary(await env.step({"delta": d})))
        state = await env.state()
    assert got == EXPECTED_STEPS
    assert state == EXPECTED_STATE


def test_serve_over_tcp_prints_its_url_and_serves(tmp_path: Path) -> None:
    with ecotone_serving("counter", "--transport", "tcp", "--port", "0", cwd=tmp_path) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.fullmatch(
            r"ecotone: serving 'counter' over tcp at (tcp://127\.0\.0\.1:\d+)\n", line
        )
        assert match, line
        with ecotone.connect(match[1]) as client:
            client.reset(start=40)
            assert client.step({"delta": 2}).observation["count"] == 42
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


# --- length-prefixed frames at the byte level ------------------------------------------------


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


class FramedSocket:
    """Raw length-prefixed frames over a TCP socket, sent exactly as given."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("tcp://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder(1 << 30)
        self.frames: list[bytes] = []

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, value: dict[str, Any]) -> None:
        self.sock.sendall(frame(msgspec.json.encode(value)))

    def recv(self) -> dict[str, Any]:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            for item in self.decoder.feed(data):
                assert isinstance(item, bytes)
                self.frames.append(item)
        reply: dict[str, Any] = msgspec.json.decode(self.frames.pop(0))
        return reply

    def call(self, value: dict[str, Any]) -> dict[str, Any]:
        self.send(value)
        reply = self.recv()
        assert reply["id"] == value["id"], reply
        return reply

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def small_frames_tcp() -> Iterator[RunningServer]:
    with run_server("counter", transport="tcp", limits=Limits(max_frame_bytes=1000)) as server:
        yield server


def started(peer: FramedSocket) -> str:
    session = str(peer.call({"op": "open", "id": "o"})["session"])
    peer.call({"op": "reset", "id": "r", "session": session})
    return session


def test_an_oversized_frame_over_tcp_is_too_large_and_the_stream_stays_in_sync(
    small_frames_tcp: RunningServer,
) -> None:
    peer = FramedSocket(small_frames_tcp.url)
    session = started(peer)
    big = msgspec.json.encode(
        {"op": "step", "id": 1, "session": session, "action": {"delta": 1, "pad": "x" * 5000}}
    )
    assert len(big) > 5000
    peer.send_raw(frame(big))
    error = peer.recv()
    assert (error["op"], error["code"]) == ("error", "too_large")
    assert error["details"] == {"size": len(big), "limit": 1000}
    step = peer.call({"op": "step", "id": 2, "session": session, "action": {"delta": 3}})
    assert step["observation"]["count"] == 3
    peer.close()


def test_an_oversized_frame_trickled_in_pieces_is_skipped(small_frames_tcp: RunningServer) -> None:
    peer = FramedSocket(small_frames_tcp.url)
    session = started(peer)
    big = frame(b"{" + b" " * 4998 + b"}")
    after = frame(
        msgspec.json.encode({"op": "step", "id": 9, "session": session, "action": {"delta": 4}})
    )
    pieces = [big[:2], big[2:7], big[7:3000], big[3000:] + after[:3], after[3:]]
    for piece in pieces:
        peer.send_raw(piece)
        time.sleep(0.01)  # separate TCP segments, so the server sees separate chunks
    assert peer.recv()["code"] == "too_large"
    step = peer.recv()
    assert (step["id"], step["observation"]["count"]) == (9, 4)
    peer.close()


def test_a_pipeline_of_100_steps_in_one_write_is_answered_in_order(
    servers: dict[str, str],
) -> None:
    peer = FramedSocket(servers["tcp"])
    session = started(peer)
    burst = b"".join(
        frame(
            msgspec.json.encode({"op": "step", "id": i, "session": session, "action": {"delta": 1}})
        )
        for i in range(100)
    )
    peer.send_raw(burst)
    replies = [peer.recv() for _ in range(100)]
    assert [r["id"] for r in replies] == list(range(100))
    assert [r["observation"]["count"] for r in replies] == list(range(1, 101))
    peer.close()


def test_bad_frames_over_tcp_get_errors_and_the_connection_goes_on(
    servers: dict[str, str],
) -> None:
    peer = FramedSocket(servers["tcp"])
    session = started(peer)
    peer.send_raw(frame(b'{"op": "step", "id": 1'))
    assert peer.recv()["code"] == "invalid_frame"
    peer.send({"op": "teleport", "id": 2})
    assert peer.recv()["code"] == "unknown_op"
    step = peer.call({"op": "step", "id": 3, "session": session, "action": {"delta": 7}})
    assert step["observation"]["count"] == 7
    peer.close()


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_dropped_connection_closes_its_sessions(transport: str) -> None:
    with contextlib.ExitStack() as stack:
        sock_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="eco"))
        host = os.path.join(sock_dir, "s.sock") if transport == "unix" else "127.0.0.1"
        server = stack.enter_context(run_server("counter", transport=transport, host=host))
        client = ecotone.connect(server.url)
        other = ecotone.connect(server.url)
        client.reset()
        assert server.recorder.open_sessions == {client.session_id, other.session_id}
        client.connection.channel.close()  # gone without closing its session
        assert wait_until(lambda: server.recorder.close_reason(client.session_id) == "disconnect")
        assert other.reset().observation["count"] == 0  # the other connection is untouched
        other.close()


def test_a_unix_server_replaces_a_stale_socket_and_removes_its_own() -> None:
    with tempfile.TemporaryDirectory(prefix="eco") as sock_dir:
        path = os.path.join(sock_dir, "stale.sock")
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)  # left behind, as by a server that died
        stale.close()
        with run_server("counter", transport="unix", host=path) as server:
            assert server.url == f"unix://{path}"
            with ecotone.connect(server.url) as env:
                assert env.reset(start=3).observation["count"] == 3
        assert not os.path.exists(path)


# --- stdio: a server on a child's stdin/stdout -----------------------------------------------


class StdioServer:
    """`python -m ecotone serve counter --transport stdio` driven with raw frames."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ecotone", "serve", "counter", "--transport", "stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.decoder = FrameDecoder(1 << 30)
        self.frames: list[bytes] = []
        self.stdout = b""

    def send(self, payload: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame(payload))
        self.proc.stdin.flush()

    def _read(self, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError("no output from the stdio server in time")
        data = os.read(self.proc.stdout.fileno(), 65536)
        self.stdout += data
        return data

    def recv(self, timeout: float = 10.0) -> bytes:
        while not self.frames:
            data = self._read(timeout)
            if not data:
                raise ConnectionError(f"the stdio server closed its stdout: {self._exit()}")
            for item in self.decoder.feed(data):
                assert isinstance(item, bytes)
                self.frames.append(item)
        return self.frames.pop(0)

    def _exit(self) -> str:
        assert self.proc.stderr is not None
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"exit status {code}, stderr {self.proc.stderr.read()!r}"

    def finish(self, timeout: float = 10.0) -> tuple[int, bytes, bytes]:
        """Close stdin; return the exit status, the rest of stdout and stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        rest = b""
        while True:
            data = self._read(timeout)
            if not data:
                break
            rest += data
        code = self.proc.wait(timeout=timeout)
        return code, rest, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def stdio_server() -> Iterator[StdioServer]:
    server = StdioServer()
    try:
        yield server
    finally:
        server.kill()


def only_frames(data: bytes) -> list[bytes]:
    """Every byte of `data` belongs to a complete frame: nothing else was written."""
    decoder = FrameDecoder(1 << 30)
    frames = decoder.feed(data)
    assert decoder.buffered == 0, f"stray bytes on stdout: {data[-decoder.buffered :]!r}"
    return [f for f in frames if isinstance(f, bytes)]


def stdio_episode(
    server: StdioServer,
    encode_: Callable[[Any], bytes],
    decode: Callable[[bytes], Any],
) -> list[Any]:
    def call(value: dict[str, Any]) -> Any:
        server.send(encode_(value))
        raw = server.recv()
        reply = decode(raw)
        assert reply["id"] == value["id"], reply
        return raw, reply

    _, opened = call({"op": "open", "id": 1})
    session = opened["session"]
    out: list[Any] = [call({"op": "reset", "id": 2, "session": session, "seed": 1})]
    for rid, delta in ((3, 4), (4, -2)):
        out.append(call({"op": "step", "id": rid, "session": session, "action": {"delta": delta}}))
    out.append(call({"op": "state", "id": 5, "session": session}))
    out.append(call({"op": "close", "id": 6, "session": session}))
    return out


def test_stdio_with_json_frames(stdio_server: StdioServer) -> None:
    exchanges = stdio_episode(stdio_server, msgspec.json.encode, msgspec.json.decode)
    raws = [raw for raw, _ in exchanges]
    replies = [reply for _, reply in exchanges]
    assert all(raw.startswith(b"{") for raw in raws)  # answered in the codec it was spoken to
    assert [r["observation"]["count"] for r in replies[:3]] == [0, 4, 2]
    assert replies[3]["state"]["count"] == 2
    assert replies[4]["op"] == "closed"
    code, rest, stderr = stdio_server.finish()
    assert code == 0, stderr
    assert rest == b""
    assert len(only_frames(stdio_server.stdout)) == len(raws) + 1  # + the `opened` answer
    assert b"Traceback" not in stderr


def test_stdio_with_msgpack_frames(stdio_server: StdioServer) -> None:
    exchanges = stdio_episode(stdio_server, msgspec.msgpack.encode, msgspec.msgpack.decode)
    raws = [raw for raw, _ in exchanges]
    replies = [reply for _, reply in exchanges]
    assert all(0x80 <= raw[0] <= 0x8F or raw[0] in (0xDE, 0xDF) for raw in raws)  # maps
    assert [r["observation"]["count"] for r in replies[:3]] == [0, 4, 2]
    assert replies[3]["state"]["step_count"] == 2
    code, _, stderr = stdio_server.finish()
    assert code == 0, stderr
    only_frames(stdio_server.stdout)


def test_stdio_exits_0_when_stdin_closes_with_a_session_open(
    stdio_server: StdioServer,
) -> None:
    stdio_server.send(msgspec.json.encode({"op": "open", "id": 1}))
    assert msgspec.json.decode(stdio_server.recv())["op"] == "opened"
    code, rest, stderr = stdio_server.finish()
    assert code == 0, stderr
    assert rest == b""


def test_stdio_answers_an_oversized_frame_with_too_large() -> None:
    # The default limit is 4 MiB: announce more than that and send none of it.
    server = StdioServer()
    try:
        server.send(b"{" + b" " * 10 + b"}")  # first frame fixes the codec: JSON
        assert msgspec.json.decode(server.recv())["code"] == "invalid_frame"
        assert server.proc.stdin is not None
        server.proc.stdin.write(struct.pack(">I", 5 * 1024 * 1024) + b"x" * 100)
        server.proc.stdin.flush()
        assert msgspec.json.decode(server.recv())["code"] == "too_large"
    finally:
        server.kill()


# --- FrameDecoder (sans-IO) ------------------------------------------------------------------


def test_decoder_reassembles_a_frame_fed_one_byte_at_a_time() -> None:
    decoder = FrameDecoder(100)
    data = encode(b'{"op":"ping","id":1}')
    out: list[bytes | TooLarge] = []
    for i in range(len(data)):
        got = decoder.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert got == []
        out += got
    assert out == [b'{"op":"ping","id":1}']
    assert decoder.buffered == 0


def test_decoder_handles_a_header_split_across_chunks() -> None:
    decoder = FrameDecoder(100)
    data = encode(b"abc") + encode(b"defg")
    assert decoder.feed(data[:2]) == []
    assert decoder.feed(data[2:9]) == [b"abc"]  # second header split after its first 2 bytes
    assert decoder.buffered == 2
    assert decoder.feed(data[9:]) == [b"defg"]


def test_decoder_returns_many_frames_from_one_chunk_in_order() -> None:
    decoder = FrameDecoder(100)
    payloads = [str(i).encode() * (i % 7) for i in range(50)]
    assert decoder.feed(b"".join(encode(p) for p in payloads)) == payloads


def test_decoder_keeps_a_partial_tail_for_the_next_chunk() -> None:
    decoder = FrameDecoder(100)
    data = encode(b"one") + encode(b"two")
    assert decoder.feed(data[:-1]) == [b"one"]
    assert decoder.feed(data[-1:]) == [b"two"]


def test_decoder_accepts_a_frame_exactly_at_the_limit_and_empty_frames() -> None:
    decoder = FrameDecoder(10)
    assert decoder.feed(encode(b"x" * 10) + encode(b"")) == [b"x" * 10, b""]


def test_decoder_skips_an_oversized_frame_within_one_chunk() -> None:
    decoder = FrameDecoder(10)
    data = encode(b"a") + encode(b"x" * 11) + encode(b"b")
    assert decoder.feed(data) == [b"a", TooLarge(11), b"b"]
    assert decoder.buffered == 0


def test_decoder_skips_an_oversized_frame_across_chunks_without_buffering_it() -> None:
    decoder = FrameDecoder(10)
    big = encode(b"x" * 1000)
    assert decoder.feed(big[:50]) == [TooLarge(1000)]
    assert decoder.buffered == 0  # the skipped payload is never held
    assert decoder.feed(big[50:500]) == []
    assert decoder.buffered == 0
    assert decoder.feed(big[500:] + encode(b"next")[:3]) == []
    assert decoder.feed(encode(b"next")[3:]) == [b"next"]


def test_decoder_reports_an_oversized_header_split_across_chunks_once() -> None:
    decoder = FrameDecoder(10)
    big = encode(b"y" * 20)
    assert decoder.feed(big[:3]) == []
    assert decoder.feed(big[3:10]) == [TooLarge(20)]
    assert decoder.feed(big[10:] + encode(b"ok")) == [b"ok"]


def test_detect_codec_reads_the_first_byte() -> None:
    assert detect_codec(b'{"op":"ping"}') == "json"
    assert detect_codec(b'  \n{"op":"ping"}') == "json"
    assert detect_codec(msgspec.msgpack.encode({"op": "ping", "id": 1})) == "msgpack"
    big_map = msgspec.msgpack.encode({str(i): i for i in range(20)})
    assert big_map[0] == 0xDE
    assert detect_codec(big_map) == "msgpack"


# --- the writers' lock ------------------------------------------------------------------------


def test_the_send_lock_keeps_writers_apart_in_turn_and_survives_a_cancelled_waiter() -> None:
    async def main() -> None:
        lock = SendLock()
        order: list[str] = []
        async with lock:  # uncontended: taken at once, no scheduler pass
            assert lock.locked()
        assert not lock.locked()

        async def writer(name: str, hold: float) -> None:
            async with lock:
                order.append(name + "+")
                await trio.sleep(hold)
                order.append(name + "-")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, "a", 0.05)
            await trio.sleep(0.01)
            for name in "bcd":
                nursery.start_soon(writer, name, 0.0)
                await trio.sleep(0.005)  # each parks before the next comes
            await trio.sleep(0.01)
            with trio.CancelScope() as doomed:  # a waiter cancelled while it waits
                doomed.cancel()
                async with lock:
                    order.append("never")
        assert order == ["a+", "a-", "b+", "b-", "c+", "c-", "d+", "d-"]
        assert not lock.locked()

    trio.run(main)
