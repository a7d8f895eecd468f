"""Rules of the protocol engine that its drivers lean on, each pinned by hand (sans-IO, no
server): ordering around a close that takes time, hooks that raise, batches holding their
sessions, and the inproc async channel shared by tasks that give up."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import ecotone
from ecotone.kernel import Engine, EnvSpec, Limits, Mode
from ecotone.plugins.counter import CounterAction, CounterEnv, CounterObservation, CounterState
from ecotone.transports.inproc.client import InprocAsyncChannel
from tests.conftest import wait_until
from tests.engine_driver import Driver, decoded


class SlowCloseEnv(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
    """A counter whose close() blocks a while (a worker-thread env)."""

    closes = 0

    def __init__(self) -> None:
        self._state = CounterState()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id)
        return CounterObservation(count=0)

    def step(self, action: CounterAction) -> CounterObservation:
        time.sleep(0.05)
        self._state.count += action.delta
        return CounterObservation(count=self._state.count, reward=1.0)

    def state(self) -> CounterState:
        return self._state

    def close(self) -> None:
        time.sleep(0.05)
        SlowCloseEnv.closes += 1


class RaisingHooks:
    @ecotone.hookimpl
    def ecotone_step_completed(self, **kwargs: Any) -> None:
        raise RuntimeError("a recorder that breaks")

    @ecotone.hookimpl
    def ecotone_session_closed(self, **kwargs: Any) -> None:
        raise RuntimeError("a metrics plugin that breaks")


async def _started(driver: Driver, peer: Any, rid: int) -> str:
    session = (await driver.ask(peer, {"op": "open", "id": rid})).session
    await driver.ask(peer, {"op": "reset", "id": rid + 1000, "session": session})
    return str(session)


async def test_requests_after_a_close_in_progress_are_answered_after_it() -> None:
    driver = Driver(Engine(EnvSpec.from_class(SlowCloseEnv, "slow_close")))
    peer = driver.peer()
    session = await _started(driver, peer, 1)
    calls = list(peer.submit(ecotone.specs.Close(id=2, session=session)))
    assert [c.mode for c in calls] == [Mode.THREAD]  # close() is running
    # A step arrives while the close runs: it waits behind it, then learns the session is gone.
    assert not peer.receive(
        b'{"op": "step", "id": 3, "session": "%s", "action": {}}' % session.encode()
    )
    assert peer.take() == []
    await driver.run(calls)
    closed, unknown = peer.take()
    assert (type(closed).__name__, closed.id) == ("Closed", 2)
    assert (unknown.code, unknown.id) == ("unknown_session", 3)
    assert SlowCloseEnv.closes >= 1 and len(driver.engine.sessions) == 0


async def test_a_hook_that_raises_neither_fails_the_step_nor_strands_the_session() -> None:
    registry = ecotone.kernel.Registry()
    registry.register(RaisingHooks())
    engine = Engine(EnvSpec.from_class(CounterEnv, "counter"), hooks=registry.pm.hook)
    driver = Driver(engine)
    peer = driver.peer()
    a, b = await _started(driver, peer, 1), await _started(driver, peer, 2)
    step = await driver.ask(peer, {"op": "step", "id": 3, "session": a, "action": {"delta": 2}})
    assert type(step).__name__ == "ObservationFrame"
    items = [{"session": s, "action": {"delta": 1}} for s in (a, b)]
    batch = await driver.ask(peer, {"op": "step_many", "id": 4, "steps": items})
    assert [type(r).__name__ for r in batch.results] == ["ObservationFrame"] * 2
    after = await driver.ask(peer, {"op": "step", "id": 5, "session": a, "action": {"delta": 1}})
    assert decoded(peer, after)["observation"]["count"] == 4  # a is not held by the batch
    closed = await driver.ask(peer, {"op": "close", "id": 6, "session": b})
    assert type(closed).__name__ == "Closed"


async def test_a_batch_answered_late_leaves_its_sessions_fresh_for_the_idle_reaper() -> None:
    now = [0.0]
    engine = Engine(
        EnvSpec.from_class(SlowCloseEnv, "slow_close"),
        limits=Limits(lease=10.0),
        clock=lambda: now[0],
    )
    driver = Driver(engine)
    peer = driver.peer()
    a, b = await _started(driver, peer, 1), await _started(driver, peer, 2)
    calls = peer.submit(
        ecotone.specs.StepMany(
            id=3,
            steps=[
                ecotone.specs.StepItem(session=s, action=peer.codec.raw({"delta": 1}))
                for s in (a, b)
            ],
        )
    )
    now[0] = 50.0  # the batch takes long: both sessions were last used at 0
    await driver.run(calls)
    await driver.expire()
    assert len(engine.sessions) == 2  # the batch's answer is their last use, not 0


async def test_a_task_that_gives_up_on_inproc_never_abandons_another_tasks_request() -> None:
    engine = Engine(EnvSpec.from_class(SlowCloseEnv, "slow_close"))
    channel = InprocAsyncChannel(engine, "json")
    conn = ecotone.AsyncConnection("inproc://slow_close", channel=channel)
    env = await conn.open()
    await env.reset()
    results: dict[str, Any] = {}

    async def impatient() -> None:
        with pytest.raises(TimeoutError):
            await env.step({"delta": 1}, timeout=0.01)  # gives up while its step runs
        results["impatient"] = "timed out"

    async def patient() -> None:
        await anyio.sleep(0.001)  # queued behind the impatient step
        results["patient"] = (await env.step({"delta": 10})).observation["count"]

    async with anyio.create_task_group() as group:
        group.start_soon(impatient)
        group.start_soon(patient)
    assert results == {"impatient": "timed out", "patient": 11}
    await env.aclose()
    await conn.aclose()


def test_a_blocking_inproc_call_interrupted_leaves_the_session_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C in the caller's thread while it makes an env call (not the env raising: that is
    an env_error): the call is answered as abandoned, and the session goes on."""
    from ecotone.transports.inproc.client import InprocSyncChannel

    class Thready(CounterEnv):
        inline = False

    channel = InprocSyncChannel(Engine(EnvSpec.from_class(Thready, "x")), "json")
    real = channel._make
    armed = threading.Event()

    def interrupted(call: Any) -> None:
        if not armed.is_set():
            armed.set()
            raise KeyboardInterrupt  # the signal arrives as the call starts
        real(call)

    with ecotone.Connection("inproc://x", channel=channel) as conn:
        env = conn.open()
        monkeypatch.setattr(channel, "_make", interrupted)
        with pytest.raises(KeyboardInterrupt):
            env.reset()
        assert env.reset().observation["count"] == 0
        assert env.step({"delta": 5}).observation["count"] == 5


UNCLOSED_INPROC = """
import atexit, sys
# registered before ecotone's own hook (at its import), so it runs after it
atexit.register(lambda: print("closed", sys.modules["tests.envs"].AsyncCounterEnv.closes))
import ecotone
from ecotone.kernel import Engine, EnvSpec
from ecotone.transports.inproc.client import InprocSyncChannel
from tests.envs import AsyncCounterEnv

channel = InprocSyncChannel(Engine(EnvSpec.from_class(AsyncCounterEnv, "x")), "json")
env = ecotone.Connection("inproc://x", channel=channel).open()
env.reset(episode_id="e1")
print(env.step({"delta": 2}).observation["count"], flush=True)
"""


def test_a_program_that_never_closes_its_blocking_inproc_channel_exits_and_closes_its_env() -> None:
    # An async env's calls run on the channel's portal thread, which used to hang the exit.
    done = subprocess.run(
        [sys.executable, "-c", UNCLOSED_INPROC],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["2", "closed ['e1']"]


def test_blocking_inproc_channels_closed_or_dropped_leave_nothing_registered_for_exit() -> None:
    """Each channel to an async env registers its close for the program's end; closing it
    withdraws that, and one dropped unclosed is still collected (held weakly), its entry
    gone with it: a long-lived program opening many leaks nothing. A closed channel refuses
    a new call instead of starting a portal nothing would stop."""
    import gc
    import weakref

    from ecotone.kernel.exit import open_count
    from ecotone.transports.inproc.client import InprocSyncChannel
    from tests.envs import AsyncCounterEnv

    spec = EnvSpec.from_class(AsyncCounterEnv, "x")
    before = open_count()
    for _ in range(200):
        channel = InprocSyncChannel(Engine(spec), "json")
        with ecotone.Connection("inproc://x", channel=channel) as conn:
            conn.open().reset()
            assert open_count() == before + 1
    assert open_count() == before
    with pytest.raises(ConnectionError, match="closed"):
        channel.send(b"{}")

    dropped = InprocSyncChannel(Engine(spec), "json")
    ecotone.Connection("inproc://x", channel=dropped).open().reset()
    assert open_count() == before + 1
    gone = weakref.ref(dropped)
    del dropped
    gc.collect()
    assert wait_until(lambda: gone() is None and open_count() == before, 5)


async def test_env_code_raising_keyboard_interrupt_is_its_own_failure() -> None:
    class Raising(CounterEnv):
        inline = False

        def step(self, action: CounterAction) -> CounterObservation:
            raise KeyboardInterrupt

    driver = Driver(Engine(EnvSpec.from_class(Raising, "raising")))
    peer = driver.peer()
    session = await _started(driver, peer, 1)
    step = {"op": "step", "id": 2, "session": session, "action": {"delta": 1}}
    error = await driver.ask(peer, step)
    assert (error.code, error.details["type"]) == ("env_error", "KeyboardInterrupt")
