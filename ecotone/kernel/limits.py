"""Server limits, shared by the kernel and every transport."""

from __future__ import annotations

from typing import Any

import attrs


def _positive(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen(slots=True, kw_only=True)
class Limits:
    """How much a server accepts before it says no (always with an error frame)."""

    max_sessions: int = attrs.field(default=256, validator=_positive)
    """Open sessions across all connections; one more gets a `capacity` error."""
    idle_timeout: float | None = attrs.field(default=300.0, validator=_positive)
    """Seconds without a request after which a session is closed (None: never)."""
    max_frame_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    """Largest frame read; a larger one gets `too_large` and is discarded."""
    ping_interval: float | None = attrs.field(default=20.0, validator=_positive)
    """Seconds of silence after which the server pings the peer (None: never ping, and no
    dead-peer detection)."""
    ping_timeout: float = attrs.field(default=20.0, validator=_positive)
    """Seconds the peer's TCP stack has to acknowledge what the server sends (a ping
    included) before the connection is dropped as dead (TCP_USER_TIMEOUT)."""
    call_timeout: float | None = attrs.field(default=120.0, validator=_positive)
    """Seconds an env call (reset, step, state, a tool, render, the env's constructor) may take
    before it is answered `timeout` and the session's env is set aside (None: no deadline). An
    env class may set its own (`call_timeout`); a request may ask for less. Inline envs run on
    the event loop and cannot be interrupted: they must be fast."""
    max_hung_calls: int = attrs.field(default=64, validator=_positive)
    """Worker-thread calls past their deadline that may still be running (a thread cannot be
    stopped, only abandoned); at this many, new thread calls are refused with `env_error`
    until some end."""
    shutdown_timeout: float = attrs.field(default=10.0, validator=_positive)
    """Seconds the server gives its sessions' closes when it stops; then it exits anyway."""
