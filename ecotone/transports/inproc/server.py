"""The `inproc` transport's server end: there is none to run. An in-process engine is built by
its client end (`client.py`) in the caller's process; `ecotone serve --transport inproc` says
so instead of serving.
"""

from __future__ import annotations

from typing import Any


class InprocTransport:
    """Embeds the engine in the client's process."""

    name = "inproc"
    description = "the engine in your own process, no socket (inproc://ENV)"
    listens = False

    async def serve(self, runner: Any, host: str, port: int, *, task_status: Any) -> None:
        raise RuntimeError(
            "the inproc transport serves no socket: embed the engine with "
            "ecotone.connect('inproc://ENV') or ecotone.aconnect('inproc://ENV')"
        )
