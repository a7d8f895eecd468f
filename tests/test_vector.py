"""Vector envs (`ecotone.VectorEnv`, `ecotone.AsyncVectorEnv`) against real servers: Gymnasium's
own SyncVectorEnv as the reference for every autoreset mode, EnvPool-style send/recv with a
sub-env held back, failures (env errors, deadlines, a killed server process) and restart, and
256 sub-envs on one server."""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import ecotone
from ecotone.client import vector
from ecotone.client.vector import split_actions, stack
from ecotone.plugins.counter import CounterObservation
from ecotone.recording import read_episodes
from tests.conftest import RunningServer, run_server, wait_until

# --- a seeded Gymnasium env, and the same logic served as an ecotone env ----------------------


class Walk(gymnasium.Env[np.int64, np.int64]):
    """A random walk: action 0/1/2 moves -1/0/+1; the reward is the position plus noise from
    the env's seeded generator. Terminates when |position| reaches a limit drawn at reset,
    truncates after a step budget drawn at reset, so episode ends vary with the seed."""

    def __init__(self, **kwargs: Any) -> None:
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Discrete(41, start=-20)
        self._pos = self._steps = self._limit = self._budget = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._pos = 0
        self._steps = 0
        self._limit = int(self.np_random.integers(2, 5))
        self._budget = int(self.np_random.integers(3, 8))
        return self._pos, {"limit": self._limit}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._pos += int(action) - 1
        self._steps += 1
        reward = float(self._pos) + float(self.np_random.random())
        terminated = abs(self._pos) >= self._limit
        truncated = not terminated and self._steps >= self._budget
        return self._pos, reward, terminated, truncated, {"steps": self._steps}


WALK_ID = "ecotone-tests/Walk-v0"
if WALK_ID not in gymnasium.registry:
    gymnasium.register(WALK_ID, entry_point=Walk)


class WalkAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    move: int


class WalkObservation(ecotone.Observation, kw_only=True):
    pos: int


class WalkEnv(ecotone.Environment[WalkAction, WalkObservation, ecotone.State]):
    """`Walk` served by ecotone: the gymnasium env inside, its info as the metadata."""

    name = "walk"
    inline = True

    def __init__(self) -> None:
        self._env = Walk()
        self._state = ecotone.State()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> WalkObservation:
        pos, info = self._env.reset(seed=seed)
        self._state = ecotone.State(episode_id=episode_id)
        return WalkObservation(pos=pos, metadata=info)

    def step(self, action: WalkAction) -> WalkObservation:
        pos, reward, terminated, truncated, info = self._env.step(action.move)
        self._state.step_count += 1
        return WalkObservation(
            pos=pos, reward=reward, done=terminated, truncated=truncated, metadata=info
        )

    def state(self) -> ecotone.State:
        return self._state


# --- gate: a blocking env whose step waits until the test opens the gate ----------------------


class GateAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    hold: bool = False


class GateObservation(ecotone.Observation, kw_only=True):
    steps: int = 0


class GateEnv(ecotone.Environment[GateAction, GateObservation, ecotone.State]):
    """A sync env (its steps run in server worker threads): a step with `hold` blocks until
    `GateEnv.gate` is set, so the test decides when the slow sub-env answers."""

    name = "gate"
    gate = threading.Event()

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> GateObservation:
        self._state = ecotone.State(episode_id=episode_id)
        return GateObservation()

    def step(self, action: GateAction) -> GateObservation:
        if action.hold:
            GateEnv.gate.wait(30)
        self._state.step_count += 1
        return GateObservation(steps=self._state.step_count, reward=1.0)

    def state(self) -> ecotone.State:
        return self._state


class VectorTestEnvs:
    @ecotone.hookimpl
    def ecotone_environments(self) -> dict[str, type]:
        return {"walk": WalkEnv, "gate": GateEnv}


PLUGINS = [VectorTestEnvs()]


@pytest.fixture
def walk_server() -> Iterator[RunningServer]:
    with run_server("walk", plugins=PLUGINS) as server:
        yield server


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    GateEnv.gate.clear()
    yield GateEnv.gate
    GateEnv.gate.set()  # never leave a server worker thread blocked


@pytest.fixture
def gate_servers(gate: threading.Event) -> Iterator[tuple[str, str]]:
    with run_server("gate", plugins=PLUGINS) as a, run_server("gate", plugins=PLUGINS) as b:
        try:
            yield a.url, b.url
        finally:
            gate.set()  # before the servers stop: they wait for their worker threads


# --- running the same scenario through the sync and the async vector env --------------------


class Blocking:
    """A `VectorEnv` behind `await`, so one scenario drives both kinds of vector env."""

    def __init__(self, venv: ecotone.VectorEnv) -> None:
        self.venv = venv

    async def reset(self, **kwargs: Any) -> Any:
        return self.venv.reset(**kwargs)

    async def step(self, actions: Any) -> Any:
        return self.venv.step(actions)

    async def send(self, actions: Any, env_ids: Any = None, *, batched: bool = False) -> None:
        self.venv.send(actions, env_ids, batched=batched)

    async def recv(self, min_ready: int | None = None) -> ecotone.StepBatch:
        return self.venv.recv(min_ready)

    async def aclose(self) -> None:
        self.venv.close()


Scenario = Callable[[Any], Awaitable[None]]
KINDS = [("sync", "trio"), ("async", "trio"), ("async", "asyncio")]


def run_with(kind: str, backend: str, scenario: Scenario, *args: Any, **kwargs: Any) -> None:
    """Open a vector env of `kind` (args as VectorEnv's) and run `scenario` on it."""

    async def main() -> None:
        venv: Any
        if kind == "sync":
            venv = Blocking(ecotone.VectorEnv(*args, **kwargs))
        else:
            venv = await ecotone.AsyncVectorEnv(*args, **kwargs).aopen()
        try:
            await scenario(venv)
        finally:
            await venv.aclose()

    anyio.run(main, backend=backend)


def plain(value: Any) -> Any:
    """Batched infos and observations as comparable plain data (typed observations by pos)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, WalkObservation):
        return value.pos
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()] if value.dtype == object else value.tolist()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# --- autoreset modes, step for step against Gymnasium's SyncVectorEnv -----------------------


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_every_autoreset_mode_matches_gymnasiums_sync_vector_env_step_for_step(
    walk_server: RunningServer, mode: str, kind: str, backend: str
) -> None:
    n, steps = 4, 50
    reference = gymnasium.make_vec(
        WALK_ID,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode[mode.upper()]},
    )
    rng = np.random.default_rng(1)
    plan = [rng.integers(0, 3, size=n) for _ in range(steps)]
    ended_episodes = 0

    async def scenario(venv: Any) -> None:
        nonlocal ended_episodes
        want_obs, want_infos = reference.reset(seed=7)  # sub-env i gets seed 7 + i
        obs, infos = await venv.reset(seed=7)
        assert [o.pos for o in obs] == want_obs.tolist()
        assert plain(infos) == plain(want_infos)
        for t, actions in enumerate(plan):
            want = reference.step(actions)
            got = await venv.step({"move": actions})  # numpy values, one dict per sub-env
            assert [o.pos for o in got[0]] == want[0].tolist(), f"step {t}"
            assert got[1].tolist() == want[1].tolist(), f"step {t}"
            assert got[2].tolist() == want[2].tolist(), f"step {t}"
            assert got[3].tolist() == want[3].tolist(), f"step {t}"
            assert plain(got[4]) == plain(want[4]), f"step {t}"
            assert got[1].dtype == np.float64 and got[2].dtype == got[3].dtype == np.bool_
            ended = want[2] | want[3]
            ended_episodes += int(ended.sum())
            if mode == "disabled" and ended.any():
                with pytest.raises(ValueError, match="episode is over"):
                    await venv.step({"move": actions})
                want_obs, want_infos = reference.reset(options={"reset_mask": ended})
                obs, infos = await venv.reset(options={"reset_mask": ended})
                assert [o.pos for o in obs] == want_obs.tolist(), f"reset after {t}"
                assert plain(infos) == plain(want_infos), f"reset after {t}"

    try:
        run_with(
            kind, backend, scenario, walk_server.url, n, observation_type=WalkObservation,
            autoreset_mode=mode,
        )  # fmt: skip
    finally:
        reference.close()
    assert ended_episodes >= 10  # the comparison went through many autoresets


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("layout", ["two servers", "a server named twice"])
def test_sub_envs_spread_over_servers_match_gymnasiums_sync_vector_env(
    walk_server: RunningServer, mode: str, layout: str
) -> None:
    """Taken by columns, a link's answer at a time (round robin over two servers, or over a
    URL list that names one server twice), every autoreset mode still gives Gymnasium's
    results, infos included, in sub-env order."""
    n, steps = 5, 60
    reference = gymnasium.make_vec(
        WALK_ID,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode[mode.upper()]},
    )
    rng = np.random.default_rng(3)
    ended_episodes = 0
    with run_server("walk", plugins=PLUGINS) as other:
        urls = [walk_server.url, other.url]
        if layout != "two servers":
            urls = [walk_server.url, other.url, walk_server.url]
        venv = ecotone.VectorEnv(
            urls, n, observation_type=WalkObservation, autoreset_mode=mode, codec="msgpack"
        )
        try:
            want_obs, want_infos = reference.reset(seed=7)
            obs, infos = venv.reset(seed=7)
            assert [o.pos for o in obs] == want_obs.tolist()
            assert plain(infos) == plain(want_infos)
            for t in range(steps):
                actions = rng.integers(0, 3, size=n)
                want = reference.step(actions)
                got = venv.step({"move": actions})
                assert [o.pos for o in got[0]] == want[0].tolist(), f"step {t}"
                assert got[1].tolist() == want[1].tolist(), f"step {t}"
                assert got[2].tolist() == want[2].tolist(), f"step {t}"
                assert got[3].tolist() == want[3].tolist(), f"step {t}"
                assert plain(got[4]) == plain(want[4]), f"step {t}"
                ended = want[2] | want[3]
                ended_episodes += int(ended.sum())
                if mode == "disabled" and ended.any():
                    want_obs, _ = reference.reset(options={"reset_mask": ended})
                    obs, _ = venv.reset(options={"reset_mask": ended})
                    assert [o.pos for o in obs] == want_obs.tolist(), f"reset after {t}"
        finally:
            venv.close()
            reference.close()
    assert ended_episodes >= 10


def test_a_seed_list_gives_each_sub_env_its_own_seed(walk_server: RunningServer) -> None:
    with ecotone.VectorEnv(walk_server.url, 3, observation_type=WalkObservation) as venv:
        _, by_int = venv.reset(seed=20)
        _, by_list = venv.reset(seed=[20, 21, 22])
        _, shuffled = venv.reset(seed=[22, 21, 20])
    assert by_int["limit"].tolist() == by_list["limit"].tolist()
    assert shuffled["limit"].tolist() == by_list["limit"].tolist()[::-1]


# --- keyword options ---------------------------------------------------------------------------


@pytest.mark.parametrize("face", [ecotone.VectorEnv, ecotone.AsyncVectorEnv])
def test_an_unknown_keyword_is_a_type_error_naming_it_before_any_connection(face: Any) -> None:
    with pytest.raises(TypeError, match=r"\.__init__\(\) got an unexpected keyword argument "
                       "'step_timout'") as caught:  # fmt: skip
        face("ws://127.0.0.1:9", 2, step_timout=1.0)
    assert str(caught.value).startswith(f"{face.__name__}.__init__()")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"autoreset_mode": "sometimes"},
         "autoreset_mode 'sometimes' is not one of next_step, same_step, disabled"),
        ({"errors": "ignore"}, "errors 'ignore' is not one of raise, info"),
    ],
)  # fmt: skip
def test_a_mode_or_policy_that_is_not_one_is_a_value_error_listing_them(
    option: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ecotone.VectorEnv("ws://127.0.0.1:9", 2, **option)


@pytest.mark.parametrize(
    "given", ["same_step", "SameStep", AutoresetMode.SAME_STEP, vector.AutoresetMode.SAME_STEP]
)
def test_gymnasiums_autoreset_modes_are_taken_and_ours_compare_as_strings(
    counter_url: str, given: Any
) -> None:
    with ecotone.VectorEnv(counter_url, 1, autoreset_mode=given, errors="info") as venv:
        assert venv.autoreset_mode == "same_step"
        assert venv.autoreset_mode is vector.AutoresetMode.SAME_STEP
        assert f"{venv.autoreset_mode}" == "same_step"


# --- connections ------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_sub_envs_go_round_robin_over_urls_and_share_one_connection_per_url(
    kind: str, backend: str
) -> None:
    with run_server("counter") as a, run_server("counter") as b:

        async def scenario(venv: Any) -> None:
            inner = venv.venv if isinstance(venv, Blocking) else venv
            assert inner.env_urls == [a.url, b.url, a.url, b.url, a.url]
            assert len(inner.connections) == 2
            ids = inner.session_ids
            assert a.recorder.open_sessions == {ids[0], ids[2], ids[4]}
            assert b.recorder.open_sessions == {ids[1], ids[3]}
            await venv.reset()
            obs, rewards, *_ = await venv.step([{"delta": i} for i in range(5)])
            assert stack(obs, "count").tolist() == [0, 1, 2, 3, 4]
            assert rewards.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]

        run_with(kind, backend, scenario, [a.url, b.url], 5)
        assert wait_until(lambda: not a.recorder.open_sessions | b.recorder.open_sessions)


@pytest.mark.parametrize("columns", [True, False], ids=["step_columns", "step_many"])
def test_a_batched_step_goes_by_columns_where_the_server_takes_them(
    columns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not columns:  # a server from before `step_columns`: the same steps go as step_many
        monkeypatch.setattr("ecotone.kernel.operations.FEATURES", ("step_many.reset",))
    with (
        run_server("counter") as server,
        ecotone.VectorEnv(
            server.url, 4, reset_options={"max_steps": 2}, observation_type=CounterObservation
        ) as venv,
    ):
        venv.reset()
        assert [link.columns for link in venv._core.links] == [columns]
        deltas = [{"delta": d} for d in (1, 2, 3, 4)]
        # The third step is the autoreset (next_step): the resets ride in the batch.
        for counts, rewarded, ends in ((1, 1, 0), (2, 1, 1), (0, 0, 0), (1, 1, 0)):
            obs, rewards, terminated, truncated, _ = venv.step(deltas)
            assert [o.count for o in obs] == [counts * d for d in (1, 2, 3, 4)]
            assert rewards.tolist() == [float(rewarded * d) for d in (1, 2, 3, 4)]
            assert truncated.tolist() == [bool(ends)] * 4 and not terminated.any()
        venv.send([{"delta": 1}, {"delta": "bad"}, {"delta": 1}, {"delta": 1}], batched=True)
        with pytest.raises(ecotone.SubEnvError) as raised:
            venv.recv()
        assert list(raised.value.errors) == [1]


@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_a_vector_env_steps_and_receives_over_other_transports(transport: str) -> None:
    with run_server("counter", transport=transport) as server:
        url = server.url if transport == "http" else server.url.replace("ws://", "tcp://")
        with ecotone.VectorEnv(url, 3, reset_options={"max_steps": 2}) as venv:
            venv.reset()
            obs, *_ = venv.step([{"delta": 2}] * 3)
            assert stack(obs, "count").tolist() == [2, 2, 2]
            venv.send([{"delta": 1}] * 3)
            batch = venv.recv()
            assert sorted(batch.env_ids.tolist()) == [0, 1, 2]
            assert stack(batch.observations, "count").tolist() == [3, 3, 3]
            assert batch.truncated.all()


# --- EnvPool-style send / recv ------------------------------------------------------------------


@pytest.mark.parametrize("spread", ["one server", "two servers"])
@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_recv_returns_the_fast_sub_envs_while_a_slow_one_is_still_stepping(
    gate_servers: tuple[str, str], gate: threading.Event, kind: str, backend: str, spread: str
) -> None:
    urls = [gate_servers[0]] if spread == "one server" else list(gate_servers)

    async def scenario(venv: Any) -> None:
        await venv.reset()
        await venv.send([{"hold": i == 1} for i in range(4)])
        first = await venv.recv(min_ready=3)
        assert sorted(first.env_ids.tolist()) == [0, 2, 3]  # sub-env 1 is held at the gate
        assert [o.steps for o in first.observations] == [1, 1, 1]
        assert first.rewards.tolist() == [1.0, 1.0, 1.0]
        await venv.send([{}, {}], env_ids=[0, 3])  # the fast ones go on meanwhile
        second = await venv.recv(min_ready=2)
        assert sorted(second.env_ids.tolist()) == [0, 3]
        assert [o.steps for o in second.observations] == [2, 2]
        with pytest.raises(ValueError, match="in flight"):
            await venv.send([{}], env_ids=[1])
        gate.set()
        last = await venv.recv()
        assert last.env_ids.tolist() == [1]
        assert last.observations[0].steps == 1

    run_with(kind, backend, scenario, urls, 4, observation_type=GateObservation)


@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_batched_send_and_recv_match_gymnasiums_sync_vector_env(
    walk_server: RunningServer, kind: str, backend: str
) -> None:
    """`send(batched=True)`: one step_many per server, autoresets inside it; the sub-envs
    step as Gymnasium's do, answered a server at a time."""
    n, steps = 4, 40
    reference = gymnasium.make_vec(WALK_ID, num_envs=n, vectorization_mode="sync")
    rng = np.random.default_rng(4)
    plan = [rng.integers(0, 3, size=n) for _ in range(steps)]

    async def scenario(venv: Any) -> None:
        reference.reset(seed=2)
        await venv.reset(seed=2)
        ended = 0
        for t, actions in enumerate(plan):
            want = reference.step(actions)
            await venv.send({"move": actions}, batched=True)
            got = await venv.recv()
            order = np.argsort(got.env_ids)
            assert got.env_ids[order].tolist() == list(range(n))
            assert [got.observations[j].pos for j in order] == want[0].tolist(), f"step {t}"
            assert got.rewards[order].tolist() == want[1].tolist(), f"step {t}"
            assert got.terminated[order].tolist() == want[2].tolist(), f"step {t}"
            assert got.truncated[order].tolist() == want[3].tolist(), f"step {t}"
            ended += int(np.sum(want[2] | want[3]))
        assert ended > 0

    run_with(kind, backend, scenario, [walk_server.url] * 2, n, observation_type=WalkObservation)


@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_a_batched_send_answers_a_server_at_a_time(
    gate_servers: tuple[str, str], gate: threading.Event, kind: str, backend: str
) -> None:
    async def scenario(venv: Any) -> None:
        await venv.reset()
        # sub-envs 0 and 2 are on the first server, 1 and 3 on the second; 1 is held
        await venv.send([{"hold": i == 1} for i in range(4)], batched=True)
        first = await venv.recv(min_ready=1)
        assert sorted(first.env_ids.tolist()) == [0, 2]  # the first server's batch, whole
        await venv.send([{}, {}], env_ids=[0, 2], batched=True)
        again = await venv.recv(min_ready=2)
        assert sorted(again.env_ids.tolist()) == [0, 2]
        assert [o.steps for o in again.observations] == [2, 2]
        gate.set()
        last = await venv.recv()
        assert sorted(last.env_ids.tolist()) == [1, 3]
        assert [o.steps for o in last.observations] == [1, 1]

    run_with(kind, backend, scenario, list(gate_servers), 4, observation_type=GateObservation)


def test_a_batched_send_split_by_max_ready_comes_back_in_send_order(counter_url: str) -> None:
    with ecotone.VectorEnv(counter_url, 5) as venv:
        venv.reset()
        venv.send([{"delta": d} for d in (1, 2, 3)], env_ids=[4, 0, 2], batched=True)
        with pytest.raises(ValueError, match="in flight"):
            venv.send([{"delta": 1}], env_ids=[0], batched=True)
        venv.send([{"delta": 7}], env_ids=[1])  # one on its own, answered on its own
        got = [venv.recv(min_ready=4, max_ready=2), venv.recv(max_ready=1), venv.recv()]
        ids = [i for batch in got for i in batch.env_ids.tolist()]
        assert sorted(ids) == [0, 1, 2, 4]
        counts = {
            i: obs["count"]
            for batch in got
            for i, obs in zip(batch.env_ids.tolist(), batch.observations, strict=True)
        }
        assert counts == {4: 1, 0: 2, 2: 3, 1: 7}
        flat = [i for i in ids if i != 1]
        assert flat == [4, 0, 2]  # a batch keeps the order it was sent in, split or not
        rewards = {
            i: r
            for batch in got
            for i, r in zip(batch.env_ids.tolist(), batch.rewards.tolist(), strict=True)
        }
        assert rewards == {4: 1.0, 0: 2.0, 2: 3.0, 1: 7.0}
        obs, *_ = venv.step([{"delta": 1}] * 5)  # everything is back: a blocking step works
        assert stack(obs, "count").tolist() == [3, 8, 4, 1, 2]


def test_recv_after_step_many_results_and_min_ready_bounds(counter_url: str) -> None:
    with ecotone.VectorEnv(counter_url, 3) as venv:
        venv.reset()
        with pytest.raises(ValueError, match="send first"):
            venv.recv()
        venv.send([{"delta": 5}], env_ids=[2])
        with pytest.raises(ValueError, match="min_ready=2"):
            venv.recv(min_ready=2)
        with pytest.raises(ValueError, match="in flight"):
            venv.step([{"delta": 1}] * 3)
        batch = venv.recv()
        assert batch.env_ids.tolist() == [2] and batch.observations[0]["count"] == 5
        obs, *_ = venv.step([{"delta": 1}] * 3)
        assert stack(obs, "count").tolist() == [1, 1, 6]


# --- failures ------------------------------------------------------------------------------------


def test_an_env_error_is_reported_in_place_and_the_sub_env_is_reset_next_step() -> None:
    with run_server("failing") as server:
        with ecotone.VectorEnv(server.url, 3, errors="info") as venv:
            venv.reset()
            venv.step([{}] * 3)
            obs, rewards, terminated, truncated, infos = venv.step([{}, {"fail": True}, {}])
            assert stack(obs, "count").tolist() == [2, 1, 2]  # sub-env 1 keeps its last one
            assert rewards.tolist() == [1.0, 0.0, 1.0]
            assert terminated.tolist() == [False, False, False]
            assert truncated.tolist() == [False, True, False]
            assert infos["episode_lost"].tolist() == [False, True, False]
            assert infos["_episode_lost"].tolist() == [False, True, False]
            assert infos["error_code"][1] == "env_error"
            assert "step exploded" in infos["error"][1]
            obs, rewards, _, truncated, infos = venv.step([{}] * 3)
            assert stack(obs, "count").tolist() == [3, 0, 3]  # next_step: 1 was reset
            assert rewards.tolist() == [1.0, 0.0, 1.0] and not truncated.any()
            assert infos == {}


def test_same_step_resets_a_failed_sub_env_within_the_call() -> None:
    with run_server("failing") as server:
        with ecotone.VectorEnv(server.url, 2, errors="info", autoreset_mode="same_step") as venv:
            venv.reset()
            venv.step([{}] * 2)
            obs, _, _, truncated, infos = venv.step([{"fail": True}, {}])
            assert stack(obs, "count").tolist() == [0, 2]
            assert truncated.tolist() == [True, False]
            assert infos["final_obs"][0]["count"] == 1 and infos["final_obs"][1] is None
            assert infos["episode_lost"].tolist() == [True, False]


def test_errors_raise_names_the_sub_env_and_keeps_the_others_results() -> None:
    with run_server("failing") as server:
        with ecotone.VectorEnv(server.url, 3) as venv:
            venv.reset()
            with pytest.raises(ecotone.EpisodeLost) as lost:
                venv.step([{}, {}, {"fail": True}])
            assert lost.value.env_index == 2
            assert isinstance(lost.value.cause, ecotone.EnvError)
            assert "sub-env 2" in str(lost.value) and "step exploded" in str(lost.value)
            assert lost.value.result is not None
            assert stack(lost.value.result[0], "count").tolist() == [1, 1, 0]
            with pytest.raises(ecotone.SubEnvError) as bad:
                venv.step([{"fail": "yes"}, {}, {}])
            assert not isinstance(bad.value, ecotone.EpisodeLost)  # the episode goes on
            assert isinstance(bad.value.cause, ecotone.InvalidActionError)
            assert bad.value.cause.field == "fail"
            # 0 refused its action, 1 stepped, 2 was reset (its episode had been lost)
            assert stack(bad.value.result[0], "count").tolist() == [1, 2, 0]
            assert bad.value.result[4]["episode_lost"].tolist() == [False, False, False]
            obs, *_ = venv.step([{}] * 3)
            assert stack(obs, "count").tolist() == [2, 3, 1]


@pytest.mark.parametrize(("kind", "backend"), KINDS)
def test_a_step_past_the_deadline_is_an_episode_lost_and_its_late_answer_is_dropped(
    gate_servers: tuple[str, str], gate: threading.Event, kind: str, backend: str
) -> None:
    async def scenario(venv: Any) -> None:
        await venv.reset()
        obs, rewards, _, truncated, infos = await venv.step([{"hold": True}, {}])
        assert infos["error_code"].tolist() == ["timeout", None]
        assert infos["episode_lost"].tolist() == [True, False]
        assert truncated.tolist() == [True, False]
        assert [o.steps for o in obs] == [0, 1]
        gate.set()  # the held step completes on the server; its answer is stale
        obs, rewards, _, truncated, infos = await venv.step([{}, {}])
        assert [o.steps for o in obs] == [0, 2]  # sub-env 0 was reset, not fed the late answer
        assert rewards.tolist() == [0.0, 1.0] and infos == {}
        obs, *_ = await venv.step([{}, {}])
        assert [o.steps for o in obs] == [1, 3]

    run_with(
        kind, backend, scenario, list(gate_servers), 2, observation_type=GateObservation,
        errors="info", step_timeout=1.0,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_cancelled_step_loses_its_episodes_and_the_next_step_resets_them(
    gate_servers: tuple[str, str], gate: threading.Event, backend: str
) -> None:
    async def scenario(venv: Any) -> None:
        await venv.reset()
        with anyio.move_on_after(0.2) as scope:  # the gate holds the step until set
            await venv.step([{"hold": True}, {}])
        assert scope.cancelled_caught
        gate.set()  # the step completes on the server; nobody wants its answer now
        obs, rewards, _, truncated, infos = await venv.step([{}, {}])
        assert [o.steps for o in obs] == [0, 0]  # both were reset: their episodes were lost
        assert rewards.tolist() == [0.0, 0.0] and not truncated.any() and infos == {}
        obs, *_ = await venv.step([{}, {}])
        assert [o.steps for o in obs] == [1, 1]

    run_with("async", backend, scenario, gate_servers[0], 2, observation_type=GateObservation)


def _start_server(port: int = 0) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--port", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the server names its URL on stderr once it listens
        found = re.search(r"(ws://\S+)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    raise AssertionError(f"the server exited (status {proc.wait()}) without naming its URL")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def test_a_killed_server_loses_its_sub_envs_episodes_and_restart_brings_them_back() -> None:
    a, url_a = _start_server()
    b, url_b = _start_server()
    try:
        port_a = int(url_a.rsplit(":", 1)[1])
        kw: dict[str, Any] = {"observation_type": CounterObservation}
        with (
            ecotone.VectorEnv([url_a, url_b], 4, errors="info", **kw) as venv,
            ecotone.VectorEnv([url_a, url_b], 2, errors="raise", **kw) as strict,
        ):
            venv.reset()
            strict.reset()
            obs, *_ = venv.step([{"delta": 1}] * 4)
            assert stack(obs, "count").tolist() == [1, 1, 1, 1]

            os.kill(a.pid, signal.SIGKILL)
            a.wait()

            with pytest.raises(ecotone.EpisodeLost) as lost:
                strict.step([{"delta": 1}] * 2)
            assert lost.value.env_index == 0 and list(lost.value.errors) == [0]
            assert isinstance(lost.value.cause, ecotone.ConnectionLost)
            assert stack(lost.value.result[0], "count").tolist() == [0, 1]  # 1 stepped

            for count in (2, 3, 4):  # the other server's sub-envs keep stepping
                obs, rewards, _, truncated, infos = venv.step([{"delta": 1}] * 4)
                assert stack(obs, "count").tolist() == [1, count, 1, count]
                assert rewards.tolist() == [0.0, 1.0, 0.0, 1.0]
                assert truncated.tolist() == [True, False, True, False]
                assert infos["episode_lost"].tolist() == [True, False, True, False]
                assert infos["error_code"].tolist() == ["connection_lost", None] * 2
            assert venv.lost.tolist() == [True, False, True, False]

            _, infos = venv.restart([0, 2])  # the server is still down: still lost
            assert infos["error_code"].tolist() == ["connection_lost", None] * 2
            assert venv.lost.tolist() == [True, False, True, False]

            a, _ = _start_server(port_a)  # back, on the same port
            obs, infos = venv.restart([0, 2], options={"start": 10})
            assert stack(obs, "count").tolist() == [10, 4, 10, 4]
            assert "error" not in infos
            assert venv.lost.tolist() == [False] * 4
            obs, *_ = venv.step([{"delta": 1}] * 4)
            assert stack(obs, "count").tolist() == [11, 5, 11, 5]
    finally:
        _stop(a)
        _stop(b)


def test_restart_reopens_a_healthy_sub_envs_session_and_leaves_the_others(
    counter_server: RunningServer,
) -> None:
    with ecotone.VectorEnv(counter_server.url, 3) as venv:
        venv.reset()
        venv.step([{"delta": 2}] * 3)
        before = venv.session_ids
        obs, infos = venv.restart([1], seed=5)
        assert infos == {}  # no error; the counter puts nothing in its metadata
        after = venv.session_ids
        assert (after[0], after[2]) == (before[0], before[2]) and after[1] != before[1]
        assert before[1] is not None
        closed = before[1]
        assert wait_until(lambda: counter_server.recorder.close_reason(closed) == "client")
        assert stack(obs, "count").tolist() == [2, 0, 2]
        obs, *_ = venv.step([{"delta": 1}] * 3)
        assert stack(obs, "count").tolist() == [3, 1, 3]


# --- scale and recording ------------------------------------------------------------------------


def test_256_sub_envs_on_one_server_reset_step_and_autoreset(
    counter_server: RunningServer,
) -> None:
    n = 256
    deltas = np.arange(n)
    with ecotone.VectorEnv(
        counter_server.url, n, observation_type=CounterObservation, reset_options={"max_steps": 2}
    ) as venv:
        assert len(venv.connections) == 1
        assert counter_server.recorder.open_sessions == set(venv.session_ids)
        obs, _ = venv.reset(seed=0, options={"start": 1})
        assert stack(obs, "count").tolist() == [1] * n
        obs, rewards, terminated, truncated, _ = venv.step({"delta": deltas})
        assert stack(obs, "count").tolist() == (deltas + 1).tolist()
        assert rewards.tolist() == deltas.astype(float).tolist()
        assert not terminated.any() and not truncated.any()
        obs, _, _, truncated, _ = venv.step({"delta": deltas})
        assert stack(obs, "count").tolist() == (2 * deltas + 1).tolist()
        assert truncated.all()
        obs, rewards, _, truncated, _ = venv.step({"delta": deltas})  # next_step autoreset
        assert stack(obs, "count").tolist() == [0] * n  # reset_options carry no start
        assert not rewards.any() and not truncated.any()


def test_actions_given_as_arrays_split_into_plain_values_one_per_sub_env() -> None:
    split = [{"delta": 0, "aim": [1.0, 1.0]}, {"delta": 1, "aim": [1.0, 1.0]}]
    assert split_actions({"delta": np.arange(2), "aim": np.ones((2, 2))}, 2) == split
    assert type(split_actions({"delta": np.arange(3)}, 3)[2]["delta"]) is int
    assert split_actions({"delta": [5, 6, 7]}, 2) == [{"delta": 5}, {"delta": 6}]
    assert (
        split_actions(np.arange(2), 2) == [0, 1] and type(split_actions(np.arange(2), 2)[0]) is int
    )
    assert split_actions(np.zeros((2, 3)), 2) == [[0.0] * 3] * 2
    with pytest.raises(ValueError, match="'delta' has 2 values for 3 sub-envs"):
        split_actions({"delta": np.arange(2)}, 3)
    assert split_actions({}, 2) == [{}, {}]
    for scalar in (1, np.array(1)):
        with pytest.raises(ValueError, match="'delta' is not one value per sub-env"):
            split_actions({"delta": scalar}, 3)
    with pytest.raises(ValueError, match="2 actions given for 3 sub-envs"):
        split_actions(np.arange(2), 3)


def test_stepping_256_sub_envs_sets_off_almost_no_garbage_collection() -> None:
    """Actions, observations and frames are acyclic wire data the cyclic collector does not
    track: a step of 256 sub-envs (256 actions decoded and 256 observations made on the
    server side, 256 observations decoded on the client's, all in this process over
    inproc://) stays below the 700 tracked allocations that start a collection. Tracked,
    they set off about one a step, and every tenth of those a walk of older objects (at 256
    sub-envs in one process that was 40% of the step's time)."""
    assert not gc.is_tracked(CounterObservation(count=1))
    # each holding a tracked value (a list), which would make a tracked struct tracked
    assert not gc.is_tracked(ecotone.specs.frames.ResetArgs(options={"a": [1]}))
    assert not gc.is_tracked(ecotone.specs.frames.StepItem(session="s")) and (
        ecotone.specs.frames.StepItem.__struct_config__.gc is False
    )

    class Cyclic(CounterObservation, gc=True):  # the way out for a type that must be tracked
        pass

    assert gc.is_tracked(Cyclic(count=1))
    n, steps = 256, 100
    with ecotone.VectorEnv("inproc://counter", n, observation_type=CounterObservation) as venv:
        venv.reset(seed=0)
        actions = [{"delta": 1} for _ in range(n)]
        venv.step(actions)
        runs: list[int] = []

        def count(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                runs.append(info["generation"])

        gc.collect()
        gc.callbacks.append(count)
        try:
            for _ in range(steps):
                obs, *_ = venv.step(actions)
        finally:
            gc.callbacks.remove(count)
        assert stack(obs, "count").tolist() == [steps + 1] * n
    assert len(runs) < steps // 5, f"{len(runs)} collections in {steps} steps: {runs[:20]}"


def test_record_to_writes_each_sub_env_episode_from_the_client(
    counter_url: str, tmp_path: Path
) -> None:
    with ecotone.VectorEnv(
        counter_url, 2, reset_options={"max_steps": 2}, record_to=tmp_path
    ) as venv:
        venv.reset(seed=3)
        for _ in range(3):  # two steps end the episodes, the third resets them
            venv.step([{"delta": 1}, {"delta": 2}])
    episodes = read_episodes(tmp_path, observation_type=CounterObservation)
    assert len(episodes) == 4
    assert {e.env for e in episodes} == {"counter"}  # the server's default env, by name
    done = sorted((e for e in episodes if e.length), key=lambda e: e.env_index or 0)
    assert [e.env_index for e in done] == [0, 1]
    assert [e.seed for e in done] == [3, 4]
    assert done[1].actions == [{"delta": 2}, {"delta": 2}]
    assert [o.count for o in done[1].observations] == [0, 2, 4]
    assert done[1].rewards == [2.0, 2.0] and done[1].truncateds == [False, True]
    assert all(e.end == "truncated" and e.source == "client" for e in done)
    assert all(d >= 0 for e in done for d in e.durations_s)
    fresh = [e for e in episodes if not e.length]
    assert sorted(e.env_index or 0 for e in fresh) == [0, 1]
    assert all(e.seed is None and e.end == "closed:client" for e in fresh)
