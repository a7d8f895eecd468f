"""Raw WebSocket transport floor for `make bench`: echo server and drivers, no env at all.

``serve --port P`` runs a trio-websocket echo server on 127.0.0.1: every message is sent
back unchanged (text stays text, bytes stay bytes).

``drive --url ws://127.0.0.1:P --steps N`` measures round trips of a text message with the
exact bytes of an ecotone step frame (``FRAME``):

* ``--sessions 1`` (default): a blocking client made of a plain ``socket`` and ``wsproto``
  (no asyncio, no trio, no threads), N sequential round trips: the floor under any
  blocking single-session client.
* ``--sessions K`` (K > 1): K trio-websocket connections driven concurrently from one
  trio process, each doing N round trips; the clock runs from the moment all are
  connected and warmed up until all are done: an aggregate floor.

Both warm up first (``--warmup``, 200 round trips in total) and print one JSON line,
``{"steps_per_s": float, "steps": int, "sessions": int, "elapsed_s": float}``, where
``steps`` is the total number of timed round trips.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from urllib.parse import urlsplit

import trio
import trio_websocket
import wsproto
import wsproto.events as ev

FRAME = '{"op":"step","id":1,"session":"0000000000000001","action":{"delta":1}}'
RECV_BYTES = 65536


# --------------------------------------------------------------------------- serve


async def _echo(request: trio_websocket.WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except trio_websocket.ConnectionClosed:
        pass


async def serve(host: str, port: int) -> None:
    await trio_websocket.serve_websocket(
        _echo, host, port, ssl_context=None, max_message_size=16 * 1024 * 1024
    )


# ------------------------------------------------------------ blocking wsproto client


class BlockingClient:
    """Minimal blocking WebSocket client: one socket, one wsproto state machine."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "ws" or parts.hostname is None:
            raise ValueError(f"need a ws:// URL, got {url!r}")
        port = parts.port or 80
        self._sock = socket.create_connection((parts.hostname, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        self._send(self._conn.send(ev.Request(host=f"{parts.hostname}:{port}", target=target)))
        self._text: list[str] = []
        while True:
            for event in self._read_events():
                if isinstance(event, ev.AcceptConnection):
                    return
                if isinstance(event, ev.RejectConnection):
                    raise ConnectionError(f"handshake rejected: {event.status_code}")

    def _send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def _read_events(self) -> list[ev.Event]:
        data = self._sock.recv(RECV_BYTES)
        if not data:
            raise ConnectionError("server closed the connection")
        self._conn.receive_data(data)
        return list(self._conn.events())

    def round_trip(self, message: str) -> str:
        self._send(self._conn.send(ev.TextMessage(data=message)))
        while True:
            for event in self._read_events():
                if isinstance(event, ev.TextMessage):
                    self._text.append(event.data)
                    if event.message_finished:
                        reply = "".join(self._text)
                        self._text.clear()
                        return reply
                elif isinstance(event, ev.Ping):
                    self._send(self._conn.send(event.response()))
                elif isinstance(event, ev.CloseConnection):
                    raise ConnectionError(f"server closed: {event.code} {event.reason}")

    def close(self) -> None:
        try:
            self._send(self._conn.send(ev.CloseConnection(code=1000)))
        except Exception:
            pass
        self._sock.close()


def drive_blocking(url: str, steps: int, warmup: int) -> float:
    client = BlockingClient(url)
    try:
        for _ in range(warmup):
            client.round_trip(FRAME)
        reply = ""
        t0 = time.perf_counter()
        for _ in range(steps):
            reply = client.round_trip(FRAME)
        elapsed = time.perf_counter() - t0
        assert reply == FRAME, f"echo mismatch: {reply!r}"
    finally:
        client.close()
    return elapsed


# ------------------------------------------------------------ concurrent trio client


async def drive_trio(url: str, steps: int, sessions: int, warmup: int) -> float:
    per_session_warmup = max(1, warmup // sessions) if warmup > 0 else 0
    ready = 0
    all_ready = trio.Event()
    go = trio.Event()
    bad: list[str] = []
    t0 = 0.0

    async def session() -> None:
        nonlocal ready
        async with trio_websocket.open_websocket_url(url) as ws:
            for _ in range(per_session_warmup):
                await ws.send_message(FRAME)
                await ws.get_message()
            ready += 1
            if ready == sessions:
                all_ready.set()
            await go.wait()
            reply: str | bytes = ""
            for _ in range(steps):
                await ws.send_message(FRAME)
                reply = await ws.get_message()
            if reply != FRAME:
                bad.append(repr(reply))

    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(session)
        await all_ready.wait()
        t0 = time.perf_counter()
        go.set()
    elapsed = time.perf_counter() - t0
    assert not bad, f"{len(bad)} sessions got a wrong echo: {bad[:3]}"
    return elapsed


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="run the echo server")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, required=True)
    p_drive = sub.add_parser("drive", help="measure round trips against the echo server")
    p_drive.add_argument("--url", required=True, help="ws://127.0.0.1:PORT")
    p_drive.add_argument("--steps", type=int, default=3000, help="round trips per session")
    p_drive.add_argument("--sessions", type=int, default=1)
    p_drive.add_argument("--warmup", type=int, default=200, help="warm-up round trips (total)")
    p_drive.add_argument(
        "--client",
        choices=("auto", "blocking", "trio"),
        default="auto",
        help="auto: blocking wsproto for 1 session, trio-websocket for more",
    )
    args = parser.parse_args(argv)

    if args.cmd == "serve":
        try:
            trio.run(serve, args.host, args.port)
        except KeyboardInterrupt:
            pass
        return

    if args.steps < 1 or args.sessions < 1:
        parser.error("--steps and --sessions must be >= 1")
    client = args.client
    if client == "auto":
        client = "blocking" if args.sessions == 1 else "trio"
    if client == "blocking":
        if args.sessions != 1:
            parser.error("the blocking client drives one session")
        elapsed = drive_blocking(args.url, args.steps, args.warmup)
    else:
        elapsed = trio.run(drive_trio, args.url, args.steps, args.sessions, args.warmup)
    total = args.steps * args.sessions
    line = {
        "steps_per_s": total / elapsed,
        "steps": total,
        "sessions": args.sessions,
        "elapsed_s": elapsed,
    }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
