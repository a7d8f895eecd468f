"""Loose sessions (kernel/leases.py, through the engine) and the rule for connections that
fall silent: the engine's, whichever face opened the session or carries the connection."""

from __future__ import annotations

import math

import pytest

from ecotone.kernel import Engine, EnvSpec, Limits, Registry, hookimpl
from ecotone.kernel.leases import LOOSE_KEPT
from ecotone.plugins.counter import CounterEnv
from tests.test_kernel import FakeClock, Peer


def _engine(clock: FakeClock, **limits: float) -> Engine:
    return Engine(
        EnvSpec.from_class(CounterEnv, "counter"),
        limits=Limits(lease=None, **limits),  # type: ignore[arg-type]
        clock=clock,
    )


async def _open_loose(peer: Peer, client: str) -> str:
    session = await peer.open()
    peer.kernel.lease(peer.conn.owner, session, client)
    return session


async def test_a_loose_session_closes_after_its_grace_unless_claimed() -> None:
    clock = FakeClock()
    engine = _engine(clock, stateless_grace=10.0)
    peer = Peer(engine)
    unclaimed = await _open_loose(peer, "10.0.0.1")
    claimed = await _open_loose(peer, "10.0.0.1")
    assert engine.claim(peer.conn.owner, claimed)
    clock.now = 9.9
    assert await peer.reap() == 0
    clock.now = 10.0
    assert await peer.reap() == 1
    assert engine.sessions.get(unclaimed, peer.conn.owner) is None
    assert engine.sessions.get(claimed, peer.conn.owner) is not None
    clock.now = 1e6  # a claimed session lives as any other: its lease (none here)
    assert await peer.reap() == 0
    assert engine.leases.held_by(peer.conn.owner, "10.0.0.1") == 1


async def test_a_client_keeps_its_last_few_loose_sessions_and_no_more() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    peer = Peer(engine)
    client = "10.0.0.2"
    made = []
    for _ in range(LOOSE_KEPT + 2):
        allowed, calls = engine.make_room(peer.conn.owner, client)
        assert allowed
        await peer.driver.run(calls)
        made.append(await _open_loose(peer, client))
    alive = [s for s in made if engine.sessions.get(s, peer.conn.owner) is not None]
    assert alive == made[-LOOSE_KEPT:]
    other = await _open_loose(peer, "10.0.0.3")  # another client's are its own
    engine.make_room(peer.conn.owner, client)
    assert engine.sessions.get(other, peer.conn.owner) is not None


async def test_a_client_holds_at_most_its_share_and_a_full_server_replaces_its_loose_ones() -> None:
    clock = FakeClock()
    engine = _engine(clock, max_http_sessions_per_client=2)
    peer = Peer(engine)
    client = "10.0.0.4"
    first, second = await _open_loose(peer, client), await _open_loose(peer, client)
    engine.claim(peer.conn.owner, first)
    engine.claim(peer.conn.owner, second)
    allowed, calls = engine.make_room(peer.conn.owner, client)
    assert not allowed and calls == []  # claimed sessions are never replaced
    assert (await peer.call("close", session=first))["op"] == "closed"
    allowed, _ = engine.make_room(peer.conn.owner, client)
    assert allowed  # a closed one no longer counts
    loose = await _open_loose(peer, client)
    allowed, calls = engine.make_room(peer.conn.owner, client, full=True)
    await peer.driver.run(calls)
    assert engine.sessions.get(loose, peer.conn.owner) is None  # the server was full
    assert engine.sessions.get(second, peer.conn.owner) is not None


async def test_loose_sessions_close_with_the_reasons_the_hooks_hear() -> None:
    clock = FakeClock()
    closed: list[str] = []

    class Recorder:
        @hookimpl
        def ecotone_session_closed(self, session_id: str, env: str, reason: str) -> None:
            closed.append(reason)

    registry = Registry()
    registry.register(Recorder(), "recorder")
    engine = Engine(
        EnvSpec.from_class(CounterEnv, "counter"),
        limits=Limits(lease=None, stateless_grace=1.0),
        hooks=registry.pm.hook,
        clock=clock,
    )
    peer = Peer(engine)
    for _ in range(LOOSE_KEPT):
        await _open_loose(peer, "c")
    _, calls = engine.make_room(peer.conn.owner, "c")
    await peer.driver.run(calls)
    clock.now = 5.0
    await peer.reap()
    assert closed == ["replaced"] + ["unclaimed"] * (LOOSE_KEPT - 1)


@pytest.mark.parametrize(("idle", "expected"), [(300.0, 300.0), (None, math.inf)])
def test_how_long_a_connection_may_stay_silent(idle: float | None, expected: float) -> None:
    engine = Engine(
        EnvSpec.from_class(CounterEnv, "counter"),
        limits=Limits(idle_connection_timeout=idle, message_timeout=30.0),
    )
    assert engine.silence_allowed(mid_frame=True) == 30.0
    assert engine.silence_allowed(mid_frame=False) == expected


async def test_a_silent_connection_is_dropped_unless_it_holds_sessions() -> None:
    engine = Engine(EnvSpec.from_class(CounterEnv, "counter"))
    peer = Peer(engine)
    owner = peer.conn.owner
    assert engine.drop_silent(owner, mid_frame=False) == "idle, holding no session"
    assert engine.drop_silent(None, mid_frame=False) == "idle, holding no session"
    session = await peer.open()
    assert engine.drop_silent(owner, mid_frame=False) is None
    assert engine.drop_silent(owner, mid_frame=True) == "stalled in the middle of a frame"
    assert (await peer.call("close", session=session))["op"] == "closed"
    assert engine.drop_silent(owner, mid_frame=False) == "idle, holding no session"


def test_expire_runs_often_enough_for_both_limits() -> None:
    spec = EnvSpec.from_class(CounterEnv, "counter")
    assert Engine(spec, limits=Limits(lease=None, stateless_grace=2.0)).expiring() == 0.5
    assert Engine(spec, limits=Limits(lease=100.0, stateless_grace=40.0)).expiring() == 5.0
    assert Engine(spec, limits=Limits(lease=0.1, stateless_grace=40.0)).expiring() == 0.05
