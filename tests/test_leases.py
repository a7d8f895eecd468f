"""The lease rule (kernel/leases.py, applied by kernel/leasing.py): sessions and seats
reclaimed once nothing renewed them for a lease, `keepalive`, loose sessions, and the rule for
connections that fall silent: the engine's, whichever face opened the session or carries the
connection. Driven by hand, with a clock of the test's."""

from __future__ import annotations

import math

import pytest

from ecotone.kernel import Engine, EnvSpec, Limits, Registry, hookimpl
from ecotone.kernel.leases import LOOSE_KEPT, sweep_period
from ecotone.plugins.counter import CounterEnv
from tests import envs
from tests.engine_driver import decoded
from tests.test_kernel import FakeClock, Peer, assert_error, make_kernel


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


def test_the_sweep_runs_often_enough_for_both_leases() -> None:
    spec = EnvSpec.from_class(CounterEnv, "counter")
    assert Engine(spec, limits=Limits(lease=None, stateless_grace=2.0)).expiring() == 0.5
    assert Engine(spec, limits=Limits(lease=100.0, stateless_grace=40.0)).expiring() == 5.0
    assert Engine(spec, limits=Limits(lease=0.1, stateless_grace=40.0)).expiring() == 0.05
    assert Engine(spec, limits=Limits(lease=2.0)).expiring() == 0.5
    assert sweep_period(None, None) is None


# --- the lease rule -------------------------------------------------------------------------


async def test_a_lease_runs_from_the_last_request_and_is_reclaimed_at_its_end() -> None:
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock)
    peer = Peer(engine)
    session = await peer.open()
    await peer.reset(session)
    clock.now = 6.0
    await peer.step(session, {"delta": 1})  # renewed: its lease now ends at 16
    clock.now = 15.9
    assert await peer.reap() == 0
    clock.now = 16.0
    assert await peer.reap() == 1
    assert engine.leases.reclaimed == 1
    reply = await peer.call("step", session=session, action={"delta": 1})
    assert_error(reply, "unknown_session", reclaimed="lease")
    assert "was reclaimed" in reply["message"] and "10 s (limits.lease)" in reply["message"]
    assert_error(await peer.call("close", session=session), "unknown_session")


async def test_a_busy_session_is_never_reclaimed_and_its_answer_renews_the_lease() -> None:
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock)
    peer = Peer(engine)
    session = await peer.open("slow")
    await peer.reset(session)
    step = peer.encode({"op": "step", "id": 99, "session": session, "action": {"sleep": 0}})
    calls = peer.conn.receive(step)  # in flight: a worker thread's step, not yet run
    assert len(calls) == 1
    clock.now = 50.0  # the lease ran out long ago, but the server works for the client
    assert await peer.reap() == 0
    await peer.driver.run(calls)  # answered at t=50: the lease runs from here
    assert decoded(peer.conn, peer.conn.take()[0])["op"] == "observation"
    clock.now = 59.9
    assert await peer.reap() == 0
    clock.now = 60.0
    assert await peer.reap() == 1


async def test_keepalive_renews_what_it_names_and_lists_what_it_cannot() -> None:
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock)
    peer = Peer(engine)
    kept, lost = await peer.open(), await peer.open()
    clock.now = 8.0
    reply = await peer.call("keepalive", sessions=[kept, "never-opened"], seats=["no-such-key"])
    assert reply == {
        "op": "kept",
        "id": reply["id"],
        "unknown": ["never-opened", "no-such-key"],
        "lease": 10.0,
    }
    clock.now = 10.0
    assert await peer.reap() == 1  # `lost`, whose lease ran from t=0
    clock.now = 17.9
    assert await peer.reap() == 0
    assert engine.sessions.get(kept, peer.conn.owner) is not None
    reply = await peer.call("keepalive", sessions=[kept, lost])
    assert reply["unknown"] == [lost]
    opened = await peer.call("open")
    assert opened["lease"] == 10.0  # `opened` says how long a lease lasts


async def test_keepalive_from_another_connection_renews_by_id_without_a_token() -> None:
    """The clients' lease keeper sends its keepalives on a connection of its own."""
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock)
    owner, keeper = Peer(engine), Peer(engine)
    session = await owner.open()
    clock.now = 9.0
    assert (await keeper.call("keepalive", sessions=[session])).get("unknown", []) == []
    clock.now = 18.0
    assert await owner.reap() == 0
    assert_error(await keeper.call("step", session=session, action={"delta": 1}), "unknown_session")


async def test_with_tokens_keepalive_renews_the_same_tokens_sessions_only() -> None:
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock, tokens=["alpha", "beta"])
    owner, same, other = Peer(engine), Peer(engine), Peer(engine)
    for peer, token in ((owner, "alpha"), (same, "alpha"), (other, "beta")):
        assert (await peer.call("hello", token=token))["op"] == "welcome"
    session = await owner.open()
    clock.now = 9.0
    assert (await other.call("keepalive", sessions=[session]))["unknown"] == [session]
    clock.now = 10.0
    assert await owner.reap() == 1  # the other token's keepalive renewed nothing


async def test_with_tokens_a_connection_of_the_same_token_renews() -> None:
    clock = FakeClock()
    engine = make_kernel(limits=Limits(lease=10.0), clock=clock, tokens=["alpha", "beta"])
    owner, same = Peer(engine), Peer(engine)
    for peer in (owner, same):
        assert (await peer.call("hello", token="alpha"))["op"] == "welcome"
    session = await owner.open()
    clock.now = 9.0
    assert (await same.call("keepalive", sessions=[session])).get("unknown", []) == []
    clock.now = 18.0
    assert await owner.reap() == 0


# --- seats: the same lease -------------------------------------------------------------------


class _Cards(envs.CardsEnv):
    seat_lost = "truncate"


async def _table(clock: FakeClock) -> tuple[Engine, Peer, str, dict[str, str]]:
    engine = Engine(EnvSpec.from_class(_Cards, "cards"), limits=Limits(lease=10.0), clock=clock)
    owner = Peer(engine)
    session = await owner.open()
    keys = await owner.call("seats", session=session)
    assert (await owner.call("reset", session=session, seed=3))["op"] == "observation"
    return engine, owner, session, keys["keys"]


async def test_a_seat_whose_holder_goes_silent_is_released_after_its_lease() -> None:
    """A frozen holder's connection stays open (its kernel still acknowledges): the lease
    alone takes its seat back, and the env's rule ends the episode."""
    clock = FakeClock()
    engine, owner, session, keys = await _table(clock)
    north, south = Peer(engine), Peer(engine)
    assert (await north.call("join", key=keys["north"]))["lease"] == 10.0
    await south.call("join", key=keys["south"])
    hand = (await north.call("observe", session=session))["observation"]["hand"]
    clock.now = 5.0
    assert (await north.call("play", session=session, action={"card": hand[0]}))[
        "op"
    ] == "seat_view"
    clock.now = 9.9  # south's lease (from its join at 0) still runs; the owner keeps the session
    await owner.call("state", session=session)
    assert await owner.reap() == 0
    clock.now = 10.0
    await owner.reap()
    assert engine.leases.seats_reclaimed == 1
    view = await owner.call("observe", session=session)
    assert view["lost"] == ["south"] and view.get("turn") is None  # truncated
    reply = await south.call("play", session=session, action={"card": 1})
    assert_error(reply, "unknown_session")  # no longer seated there
    clock.now = 15.0  # north's lease ran from its play at 5
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 2


async def test_a_seats_lease_is_renewed_by_keepalive_and_kept_while_its_holder_waits() -> None:
    clock = FakeClock()
    engine, owner, session, keys = await _table(clock)
    north, south = Peer(engine), Peer(engine)
    await north.call("join", key=keys["north"])
    await south.call("join", key=keys["south"])
    # south waits for its turn (north's move): the server holds its request
    waiting = south.conn.receive(
        south.encode({"op": "observe", "id": 50, "session": session, "wait": True})
    )
    assert waiting == () or list(waiting) == []
    clock.now = 8.0
    kept = await north.call("keepalive", seats=[keys["north"]])  # by key, as the keeper does
    assert kept.get("unknown", []) == []
    await owner.call("state", session=session)
    clock.now = 30.0  # south has waited past its lease; north renewed at 8 only
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 1  # north's; south is waited for
    answered = [decoded(south.conn, f) for f in south.conn.take()]
    assert answered[0]["op"] == "seat_view" and answered[0]["lost"] == ["north"]
    # the answer to the wait renewed south's lease: from 30, not from its join
    clock.now = 39.0
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 1
    clock.now = 40.0
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 2


async def test_a_dropped_seat_is_held_for_the_rest_of_its_lease_and_its_key_takes_it_back() -> None:
    clock = FakeClock()
    engine, owner, session, keys = await _table(clock)
    gone = Peer(engine)
    await gone.call("join", key=keys["south"])
    clock.now = 4.0
    await gone.disconnect()  # its seat is held: the lease runs on from the join at 0
    back = Peer(engine)
    clock.now = 9.0
    assert (await back.call("join", key=keys["south"]))["seat"] == "south"  # renewed at 9
    await back.disconnect()
    clock.now = 18.9
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 0
    clock.now = 19.0
    await owner.call("state", session=session)
    await owner.reap()
    assert engine.leases.seats_reclaimed == 1
    assert (await owner.call("observe", session=session))["lost"] == ["south"]
