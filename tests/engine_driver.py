"""An engine driven by hand in tests (under trio): frames in, every answer out.

The calls the engine hands out run to completion one after the other (worker threads through
trio, coroutines awaited), as a driver must run them; nothing else of the server is involved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import trio

from ecotone.kernel import Call, Engine, Mode, Owner, Peer
from ecotone.specs import Request, codec_for


class Driver:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def peer(self, codec: str = "json", owner: Owner | None = None, frames: bool = True) -> Peer:
        return self.engine.peer(codec_for(codec), owner, frames=frames)

    async def run(self, calls: Sequence[Call]) -> int:
        """Run `calls` and everything they lead to; returns how many calls ran."""
        pending = list(calls)
        ran = 0
        while pending:
            call = pending.pop(0)
            if call.mode is Mode.THREAD:
                await trio.to_thread.run_sync(call.run)
            else:
                await call.arun()
            ran += 1
            pending.extend(self.engine.complete(call))
        return ran

    async def send(self, peer: Peer, frame: Request | Mapping[str, Any] | bytes | str) -> list[Any]:
        """Feed one frame (a request, a dict encoded with the peer's codec, or raw bytes);
        return every answer it produced."""
        if isinstance(frame, Mapping):
            frame = peer.codec.encode(dict(frame))
        if isinstance(frame, bytes | str):
            calls = peer.receive(frame)
        else:
            calls = peer.submit(frame)
        await self.run(calls)
        return peer.take()

    async def ask(self, peer: Peer, frame: Request | Mapping[str, Any] | bytes | str) -> Any:
        """`send`, expecting exactly one answer."""
        answers = await self.send(peer, frame)
        assert len(answers) == 1, answers
        return answers[0]

    async def expire(self) -> None:
        await self.run(self.engine.expire())

    async def disconnect(self, owner: Owner, reason: str = "disconnect") -> None:
        await self.run(self.engine.disconnect(owner, reason))

    async def shutdown(self) -> None:
        await self.run(self.engine.shutdown())


def decoded(peer: Peer, answer: Any) -> dict[str, Any]:
    """An answer (bytes or frame) as plain data."""
    if not isinstance(answer, bytes | str):
        answer = peer.codec.encode(answer)
    return peer.codec.decode_as(answer, dict[str, Any])


__all__ = ["Driver", "decoded", "msgspec"]
