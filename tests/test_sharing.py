"""A session shared with another connection (`share`): the guest steps it, reads its state,
calls its tools, in order with the owner; reset, close and share stay the owner's; the
session lives and dies with its owner, never with a guest."""

from __future__ import annotations

import ecotone
from ecotone.kernel import Engine
from ecotone.plugins.counter import CounterEnv
from tests.conftest import run_server
from tests.engine_driver import Driver, decoded


async def test_a_guest_steps_a_shared_session_but_cannot_reset_close_or_share_it() -> None:
    engine = Engine(ecotone.kernel.EnvSpec.from_class(CounterEnv))
    driver = Driver(engine)
    owner = driver.peer()
    session = (await driver.ask(owner, {"op": "open", "id": 1})).session
    await driver.ask(owner, {"op": "reset", "id": 2, "session": session})
    shared = await driver.ask(owner, {"op": "share", "id": 3, "session": session})
    assert shared.session == session and len(shared.key) >= 32
    again = await driver.ask(owner, {"op": "share", "id": 4, "session": session})
    assert again.key == shared.key

    guest = driver.peer()
    step = {"op": "step", "id": 5, "session": session, "action": {"delta": 2}}
    assert decoded(guest, await driver.ask(guest, step))["code"] == "unknown_session"
    assert engine.attach(guest.owner, "not-a-key") is None
    assert engine.attach(guest.owner, shared.key) == session
    assert decoded(guest, await driver.ask(guest, step))["op"] == "observation"
    for op in ("reset", "close", "share"):
        answer = decoded(guest, await driver.ask(guest, {"op": op, "id": 6, "session": session}))
        assert answer["code"] == "forbidden", answer
        assert "its owner" in answer["message"]
    state = decoded(guest, await driver.ask(guest, {"op": "state", "id": 7, "session": session}))
    assert state["state"]["count"] == 2
    many = {"op": "step_many", "id": 8, "steps": [{"session": session, "action": {"delta": 1}}]}
    assert decoded(guest, await driver.ask(guest, many))["results"][0]["op"] == "observation"

    await driver.disconnect(guest.owner)  # a guest leaving closes nothing
    got = decoded(owner, await driver.ask(owner, {"op": "state", "id": 9, "session": session}))
    assert got["state"]["count"] == 3
    await driver.disconnect(owner.owner)  # the owner leaving closes it, and the key dies
    assert engine.attach(driver.peer().owner, shared.key) is None


def test_the_clients_share_method_returns_the_key() -> None:
    with run_server("counter") as server, ecotone.connect(server.url) as env:
        env.reset()
        key = env.share()
        assert key == env.share()


async def test_the_owner_reads_what_its_guests_steps_observed_and_guests_cannot() -> None:
    engine = Engine(ecotone.kernel.EnvSpec.from_class(CounterEnv))
    driver = Driver(engine)
    owner, guest = driver.peer(), driver.peer("msgpack")
    session = (await driver.ask(owner, {"op": "open", "id": 1})).session
    await driver.ask(owner, {"op": "reset", "id": 2, "session": session})
    key = (await driver.ask(owner, {"op": "share", "id": 3, "session": session})).key
    engine.attach(guest.owner, key)
    for delta in (1, 2, 3):
        step = {"op": "step", "id": 4, "session": session, "action": {"delta": delta}}
        await driver.ask(guest, step)
    await driver.ask(owner, {"op": "step", "id": 5, "session": session, "action": {"delta": 10}})
    ask = {"op": "shared_steps", "id": 6, "session": session}
    got = decoded(owner, await driver.ask(owner, ask))
    assert [o["reward"] for o in got["observations"]] == [1.0, 2.0, 3.0]  # the owner's not
    assert got["next"] == 3 and got.get("dropped", 0) == 0
    later = decoded(owner, await driver.ask(owner, {**ask, "since": 2}))
    assert [o["count"] for o in later["observations"]] == [6]
    refused = decoded(guest, await driver.ask(guest, ask))
    assert refused["code"] == "forbidden"


def test_an_orchestrator_shares_a_session_and_reads_the_rewards_of_its_guest() -> None:
    with run_server("counter") as server, ecotone.connect(server.url) as env:
        env.reset()
        env.share()
        steps, following = env.shared_steps()
        assert (steps, following) == ([], 0)
