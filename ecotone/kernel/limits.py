"""Server limits, shared by the kernel and every transport."""

from __future__ import annotations

import warnings
from typing import Any, Final

import attrs

from ecotone.kernel.polling import DEFAULT_US, check_budget


def _positive(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _not_negative(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _share(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be in (0, 1], got {value!r}")


def _budget(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_budget(value, attribute.name)


@attrs.frozen(slots=True, kw_only=True)
class Limits:
    """How much a server accepts before it says no (always with an error frame)."""

    max_sessions: int = attrs.field(default=1024, validator=_positive)
    """Open sessions across all connections; one more gets a `capacity` error."""
    lease: float | None = attrs.field(default=300.0, validator=_positive)
    """Seconds a session, and a seat taken with `join`, stays its client's with nothing from
    it: every request about it (or a `keepalive` naming it) renews the lease, and one that
    ran out while idle is reclaimed at the next sweep (`ecotone.kernel.leases`); a client
    that was killed, froze or was cut off loses its sessions so. The clients renew the
    leases of what they hold on their own (`keepalive=False` to not). None: never.
    Formerly `idle_timeout`, still taken (deprecated)."""
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
    worker_threads: int = attrs.field(default=40, validator=_positive)
    """Env calls of worker-thread envs (steps, resets, snapshots...) run at once; more wait
    for a thread. Opening and closing sessions run on threads of their own, as many again,
    so they never wait behind steps."""
    max_thread_share: float = attrs.field(default=0.5, validator=_share)
    """The share of `worker_threads` one connection's (and one token's) env calls may hold
    at once (at least one thread); its further calls wait for its own, so a peer whose
    steps hang cannot starve the others. 1: no cap but `worker_threads`."""
    max_hung_calls: int = attrs.field(default=64, validator=_positive)
    """Worker-thread calls past their deadline that may still be running (a thread cannot be
    stopped, only abandoned); at this many, new thread calls are refused with `env_error`
    until some end."""
    shutdown_timeout: float = attrs.field(default=10.0, validator=_positive)
    """Seconds the server gives its sessions' checkpoints, and then their closes, when it
    stops; then it exits anyway."""
    drain_timeout: float = attrs.field(default=0.0, validator=_not_negative)
    """Seconds running episodes get to end on SIGTERM before the sessions left are
    checkpointed and closed. Meanwhile the server admits no new session or episode
    (`shutting_down`) and `/ready` says `draining`. 0 (the default): checkpoint and close at
    once; the Deployment form of `ecotone export k8s` sets 30."""
    max_sessions_per_connection: int | None = attrs.field(default=256, validator=_positive)
    """Sessions one connection (one owner: all HTTP requests of a server share one) may hold;
    one more gets a `capacity` error naming this limit, so no one connection takes every
    session (None: only `max_sessions`). 256 lets one VectorEnv of 256 sub-envs in."""
    max_sessions_per_token: int | None = attrs.field(default=None, validator=_positive)
    """Sessions the holders of one token (a line of `[auth] token_file`) may hold across all
    their connections and requests (None: no limit but the others)."""
    max_pending_requests: int = attrs.field(default=1024, validator=_positive)
    """Requests of one connection received and not yet answered; at this many the server
    stops reading from it until answers go out (backpressure: a peer that sends and never
    reads holds this much, not the server's memory)."""
    max_connections: int = attrs.field(default=4096, validator=_positive)
    """Connections open at once; one more is refused at once (HTTP 503, or an error frame)."""
    max_connections_per_ip: int = attrs.field(default=512, validator=_positive)
    """Connections open at once from one address; one more is refused likewise."""
    write_timeout: float = attrs.field(default=30.0, validator=_positive)
    """Seconds a write to a peer may stay blocked (the peer stopped reading) before the
    connection is dropped and its sessions closed."""
    message_timeout: float = attrs.field(default=30.0, validator=_positive)
    """Seconds a frame whose first bytes arrived has to arrive whole; a peer that stalls in
    the middle of one is dropped."""
    idle_connection_timeout: float | None = attrs.field(default=300.0, validator=_positive)
    """Seconds a connection that holds no session may stay silent before it is closed
    (None: never). With `lease`, a peer that vanished or froze leaves nothing behind."""
    stateless_grace: float = attrs.field(default=10.0, validator=_positive)
    """Seconds a session made by an OpenEnv HTTP `/reset` without a session id lives unless
    a request names it (OpenEnv's HTTP routes hold nothing between requests; most of its
    clients never send the id back). Named once, it lives as any session (`lease`)."""
    max_http_sessions_per_client: int = attrs.field(default=64, validator=_positive)
    """Sessions one client address may hold through OpenEnv's HTTP routes (`capacity`, 503,
    past it)."""
    max_snapshots: int = attrs.field(default=64, validator=_positive)
    """Snapshots one owner (a token, or a connection on a server without tokens) may keep on
    the server at once; one more gets `capacity` (scope `owner`) until it drops some."""
    max_snapshot_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_positive)
    """Bytes one snapshot may take (the env's state, its last observation, a rubric's turns);
    a larger one gets `capacity` (scope `size`)."""
    max_snapshot_store_bytes: int = attrs.field(default=512 * 1024 * 1024, validator=_positive)
    """Bytes all snapshots kept on the server may take together (`capacity`, scope `store`)."""
    busy_poll_us: float = attrs.field(default=DEFAULT_US, validator=_budget)
    """Microseconds a connection's reader polls for the next request without blocking
    before it sleeps (0: never; at most 1 s). Adaptive: a poll that runs out stops it for a
    while, so an idle or slow peer costs next to nothing (`ecotone.kernel.polling`)."""

    @property
    def idle_timeout(self) -> float | None:
        """Deprecated: `lease`, by its former name."""
        return self.lease


IDLE_TIMEOUT_DEPRECATED: Final = (
    "`idle_timeout` is deprecated: it is now the session lease, `lease` in [limits] "
    "(ECOTONE_LIMITS_LEASE, `ecotone serve --lease`); the value given is used as the lease"
)
"""What a server says when given `idle_timeout` (in Python, a file, a variable or a flag)."""


def lease_from_alias(given: dict[str, Any], where: str = "") -> dict[str, Any]:
    """`given` (limits by name) with a deprecated `idle_timeout` renamed `lease`, with a
    FutureWarning; a ValueError when both are given, different (`where`: the table's path,
    for the message)."""
    if "idle_timeout" not in given:
        return given
    out = dict(given)
    old = out.pop("idle_timeout")
    if "lease" in out and out["lease"] != old:
        raise ValueError(
            f"both {where}lease ({out['lease']!r}) and its deprecated alias {where}idle_timeout "
            f"({old!r}) are given: keep {where}lease"
        )
    out["lease"] = old
    warnings.warn(IDLE_TIMEOUT_DEPRECATED, FutureWarning, stacklevel=3)
    return out


_attrs_init = Limits.__init__


def _init(self: Limits, **given: Any) -> None:
    _attrs_init(self, **lease_from_alias(given))


_init.__doc__ = _attrs_init.__doc__
Limits.__init__ = _init  # type: ignore[method-assign]
