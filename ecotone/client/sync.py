"""The blocking client: `ecotone.connect(url)`.

Calls go straight through a blocking socket (no event loop, no background thread), which is
what makes one-session stepping fast. The code is generated from the async client's
(`ecotone/client/_sync/connection.py`, from `_async/connection.py`); this module is its
public face.
"""

from __future__ import annotations

from typing import Any

from ecotone.client._sync.connection import (
    CLOSE_TIMEOUT,
    DEFAULT_TIMEOUT,
    Connection,
    EnvClient,
    open_session,
)


def connect(
    url: str,
    env: str | None = None,
    *,
    observation_type: Any = None,
    state_type: Any = None,
    codec: str = "json",
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float = 10.0,
    token: str | None = None,
) -> EnvClient[Any, Any]:
    """Connect to a server and open one session. Blocking.

    `url`: `ws://HOST:PORT`, `http://`, `tcp://`, `unix://`, `stdio:ENV`, `inproc://ENV`,
    `openenv+http://`... `env`: which env when the server serves several. Given
    `observation_type` / `state_type` the client decodes into them; otherwise into dicts.
    `codec`: `json` or `msgpack`. `timeout`: default per-call timeout in seconds. `token`:
    for a server that requires one (else `?token=` in the URL, else `$ECOTONE_TOKEN`).
    Close the session (and its connection) with `close()`, or use it as `with`.
    """
    return open_session(
        url,
        env,
        observation_type=observation_type,
        state_type=state_type,
        codec=codec,
        timeout=timeout,
        connect_timeout=connect_timeout,
        token=token,
    )


__all__ = ["CLOSE_TIMEOUT", "DEFAULT_TIMEOUT", "Connection", "EnvClient", "connect"]
