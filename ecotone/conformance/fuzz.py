"""Fuzz a running server: many malformed frames on one transport while a victim session steps
on another connection; every frame must get an answer (or, for a frame the wire itself
forbids, a close that says why), the victim must lose nothing, and the server must live.

    python -m ecotone.conformance.fuzz ws://127.0.0.1:8000 --frames 100000

Frames, in turn: valid frames with bytes flipped, inserted or cut; valid JSON with fields of
the wrong types; nesting too deep for the decoder; truncated MessagePack; random bytes. Over
WebSocket they go as text on a JSON connection (made valid UTF-8: invalid UTF-8 text is a
close 1007 by RFC 6455, not the engine's business) and as binary on a MessagePack one; over
tcp as length-prefixed bodies; over http as `POST /v1/frames` bodies. The env served must be
`counter` (the victim steps it).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import msgspec

import ecotone
from ecotone.client.channels import open_sync_channel
from ecotone.client.errors import ConnectionLost

VALID: list[dict[str, Any]] = [
    {"op": "hello", "id": 1, "version": 1},
    {"op": "open", "id": 2},
    {"op": "reset", "id": 3, "session": "0123456789abcdef", "seed": 4},
    {"op": "step", "id": 4, "session": "0123456789abcdef", "action": {"delta": 1}},
    {"op": "state", "id": 5, "session": "0123456789abcdef"},
    {"op": "step_many", "id": 6, "steps": [{"session": "s", "action": {"delta": 2}}]},
    {"op": "close", "id": 7, "session": "0123456789abcdef"},
    {"op": "describe", "id": 8},
    {"op": "ping", "id": 9},
    {"op": "list_tasks", "id": 10, "split": "train", "offset": 0, "limit": 5},
    {"op": "get_task", "id": 11, "split": "train", "index": 0},
    {
        "op": "step_columns",
        "id": 12,
        "sessions": ["0123456789abcdef", "s"],
        "actions": [{"delta": 1}, None],
        "resets": [1],
        "reset": {"seed": 3},
    },
]
WRONG: list[Any] = [None, True, -1, 1.5, "x", [], {}, [1, [2]], {"a": {"b": []}}, 2**70]
KINDS = ("mutated", "wrong_types", "deep", "truncated_msgpack", "random")
_CLOSE_WITH_CODE = re.compile(r"closed the connection \((\d{4})")


def frames(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Malformed frames, forever, one kind after another."""
    while True:
        for kind in KINDS:
            yield kind, _make(kind, rng)


def _make(kind: str, rng: random.Random) -> bytes:
    base = rng.choice(VALID)
    if kind == "mutated":
        data = bytearray(msgspec.json.encode(base))
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(data))
            action = rng.random()
            if action < 0.4:
                data[where] = rng.randrange(256)
            elif action < 0.7:
                data.insert(where, rng.randrange(256))
            else:
                del data[where : where + rng.randint(1, 3)]
        return bytes(data)
    if kind == "wrong_types":
        frame = dict(base)
        for key in rng.sample(sorted(frame), rng.randint(1, len(frame))):
            frame[key] = rng.choice(WRONG)
        if rng.random() < 0.3:
            frame[rng.choice(["extra", "session", "action", "steps"])] = rng.choice(WRONG)
        return msgspec.json.encode(frame)
    if kind == "deep":
        depth = rng.randint(900, 5000)
        opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
        return (opener * depth + "1" + closer * depth).encode()
    if kind == "truncated_msgpack":
        packed = msgspec.msgpack.encode(base)
        return packed[: rng.randrange(1, len(packed))]
    return rng.randbytes(rng.randint(1, 512))


@attrs.define
class Report:
    transport: str
    frames: int = 0
    answered: int = 0
    """Frames answered by a frame (an error, or an answer when the bytes happened to be a
    valid request)."""
    closed_with_reason: int = 0
    """Frames the wire forbids, answered by a WebSocket close with its code."""
    unanswered: int = 0
    """Frames that got neither: the failures this fuzzer looks for."""
    codes: collections.Counter[str] = attrs.field(factory=collections.Counter)
    """The answers, by error code (or `op:` for other answers, `close:` for closes)."""
    kinds: collections.Counter[str] = attrs.field(factory=collections.Counter)
    reconnects: int = 0
    """Connections the server closed (after a close frame, or without an answer)."""
    connections: int = 0
    victim_steps: int = 0
    victim_lost: int = 0
    victim_error: str = ""
    seconds: float = 0.0

    def ok(self) -> bool:
        return self.unanswered == 0 and self.victim_lost == 0 and self.victim_steps > 0

    def as_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["codes"] = dict(sorted(self.codes.items()))
        data["kinds"] = dict(sorted(self.kinds.items()))
        data["ok"] = self.ok()
        return data


class _Victim(threading.Thread):
    """A session stepping `counter` throughout; at the end its count must be its steps."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.steps = 0
        self.lost = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with ecotone.connect(self.url) as env:
                env.reset()
                while not self.stop.is_set():
                    count = env.step({"delta": 1}).observation["count"]
                    self.steps += 1
                    if count != self.steps:
                        self.lost += 1
                    time.sleep(0.001)
        except BaseException as exc:  # reported, and counted as a loss
            self.error = exc
            self.lost += 1


def _decode(message: bytes | str, codec: str) -> Any:
    first, second = (
        (msgspec.json, msgspec.msgpack)
        if codec == "json"
        else (
            msgspec.msgpack,
            msgspec.json,
        )
    )
    try:
        return first.decode(message)
    except msgspec.DecodeError:
        return second.decode(message)


def _channel(url: str, codec: str) -> Any:
    """A blocking channel to the server (no connection around it: frames go out as they are)."""
    if url.split(":", 1)[0] not in ("ws", "http", "tcp"):
        raise ValueError(f"cannot fuzz {url!r}: ws://, http:// or tcp:// (serving counter)")
    return open_sync_channel(url, codec, 10.0)


def fuzz(url: str, count: int, seed: int = 0, timeout: float = 10.0) -> Report:
    """Send `count` malformed frames to the server at `url`; see the module docstring."""
    rng = random.Random(seed)
    transport = url.split(":", 1)[0]
    report = Report(transport=transport)
    victim = _Victim(url)
    victim.start()
    started = time.monotonic()
    codecs = ("json", "msgpack") if transport == "ws" else ("json",)
    source = frames(rng)
    channel = None
    codec = codecs[0]
    try:
        for n in range(count):
            kind, data = next(source)
            report.kinds[kind] += 1
            if channel is None:
                codec = codecs[report.connections % len(codecs)]
                channel = _channel(url, codec)
                report.connections += 1
            if transport == "ws" and codec == "json":
                data = data.decode("utf-8", "replace").encode()
            report.frames += 1
            try:
                channel.send(data)
                got = channel.receive(time.monotonic() + timeout)
                while not got:
                    got = channel.receive(time.monotonic() + timeout)
            except ConnectionLost as exc:
                if _CLOSE_WITH_CODE.search(str(exc)):  # a WebSocket close that says why
                    report.closed_with_reason += 1
                    report.codes[f"close:{_CLOSE_WITH_CODE.search(str(exc)).group(1)}"] += 1  # type: ignore[union-attr]
                else:
                    report.unanswered += 1
                channel = None
                report.reconnects += 1
                continue
            except TimeoutError:
                report.unanswered += 1
                channel.close()
                channel = None
                report.reconnects += 1
                continue
            report.answered += 1
            for message in got:
                try:  # tcp answers in the codec its first frame looked like
                    answer = _decode(message, codec)
                except msgspec.DecodeError:
                    report.codes["<undecodable answer>"] += 1
                    continue
                op = answer.get("op") if isinstance(answer, dict) else None
                report.codes[str(answer.get("code")) if op == "error" else f"op:{op}"] += 1
            if n % 1000 == 999 and channel is not None:  # fresh connections now and then
                channel.close()
                channel = None
    finally:
        if channel is not None:
            channel.close()
        victim.stop.set()
        victim.join(30)
    report.seconds = round(time.monotonic() - started, 2)
    report.victim_steps = victim.steps
    report.victim_lost = victim.lost
    if victim.error is not None:
        report.victim_error = f"{type(victim.error).__name__}: {victim.error}"
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("url", help="a server serving counter: ws://, http:// or tcp://")
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = fuzz(args.url, args.frames, args.seed)
    print(json.dumps(report.as_dict()))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
