"""`gymnasium-vector:ID`, a batch of sub-envs per session, and `ecotone.gym.make_vec` over it:
Gymnasium's own SyncVectorEnv on each server, the same steps as in process."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import ecotone
import ecotone.gym
from ecotone.conformance import run
from ecotone.gym.batched import BatchedRemoteVectorEnv
from ecotone.plugins.gymnasium import GymnasiumBridgeError
from ecotone.plugins.gymnasium_vector import build_vector_env_class
from tests.arrays import same
from tests.conftest import RunningServer, run_server

ENV = "gymnasium-vector:CartPole-v1"


class Flaky(gymnasium.Env[np.ndarray, np.int64]):
    """Action 0 or 1: a step (observations count the episode's steps); 2: the env raises;
    3: the step takes `SLOW` seconds."""

    SLOW = 0.6
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(4)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == 2:
            raise RuntimeError("the env broke")
        if action == 3:
            time.sleep(self.SLOW)
        self.t += 1
        return np.full(4, self.t / 100, np.float32), 1.0, False, False, {}


FLAKY = "EcotoneTestFlaky-v0"
gymnasium.register(id=FLAKY, entry_point=f"{__name__}:Flaky")


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[RunningServer, RunningServer]]:
    with run_server(ENV) as a, run_server(ENV) as b:
        yield a, b


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_make_vec_over_batches_matches_gymnasiums_sync_vector_env(
    servers: tuple[RunningServer, RunningServer], codec: str
) -> None:
    n = 7  # 4 on one server, 3 on the other
    remote = ecotone.gym.make_vec([s.url for s in servers], n, codec=codec)
    local = gymnasium.make_vec("CartPole-v1", n, vectorization_mode="sync")
    try:
        assert isinstance(remote, BatchedRemoteVectorEnv)
        assert remote.bounds == [(0, 4), (4, 7)]
        assert remote.single_observation_space == local.single_observation_space
        assert remote.single_action_space == local.single_action_space
        assert remote.action_space == local.action_space
        obs_r, _ = remote.reset(seed=5)
        obs_l, _ = local.reset(seed=5)
        np.testing.assert_array_equal(obs_r, obs_l)
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(120):
            actions = rng.integers(0, 2, n)
            got, want = remote.step(actions), local.step(actions)
            for g, w in zip(got[:4], want[:4], strict=True):
                assert g.dtype == w.dtype
                np.testing.assert_array_equal(g, w)
            assert got[0].flags.writeable  # the caller's to keep and change
            ended += int(np.sum(want[2] | want[3]))
        assert ended > n  # episodes ended and were reset on the servers
        obs_r, _ = remote.reset(seed=[1, 2, 3, 4, 5, 6, 7])
        obs_l, _ = local.reset(seed=[1, 2, 3, 4, 5, 6, 7])  # type: ignore[arg-type]
        np.testing.assert_array_equal(obs_r, obs_l)
    finally:
        remote.close()
        local.close()


def test_send_and_recv_take_whole_batches(servers: tuple[RunningServer, RunningServer]) -> None:
    n = 6
    remote = ecotone.gym.make_vec([s.url for s in servers], n)
    local = gymnasium.make_vec("CartPole-v1", n, vectorization_mode="sync")
    try:
        assert isinstance(remote, BatchedRemoteVectorEnv)
        remote.reset(seed=3)
        local.reset(seed=3)
        with pytest.raises(ValueError, match="whole batches"):
            remote.send(np.ones(2, dtype=np.int64), [0, 1])
        with pytest.raises(ValueError, match="send first"):
            remote.recv()
        for _ in range(20):
            want = local.step(np.ones(n, dtype=np.int64))
            remote.send(np.ones(3, dtype=np.int64), [3, 4, 5])
            remote.send(np.ones(3, dtype=np.int64), [0, 1, 2])
            with pytest.raises(ValueError, match="in flight"):
                remote.send(np.ones(3, dtype=np.int64), [0, 1, 2])
            with pytest.raises(ValueError, match="max_ready=2"):
                remote.recv(max_ready=2)
            seen = 0
            while seen < n:
                obs, rewards, terminated, truncated, infos = remote.recv(min_ready=1, max_ready=3)
                ids = infos["env_id"]
                assert len(ids) == 3 and ids.tolist() in ([0, 1, 2], [3, 4, 5])
                np.testing.assert_array_equal(obs, want[0][ids])
                np.testing.assert_array_equal(rewards, want[1][ids])
                np.testing.assert_array_equal(terminated, want[2][ids])
                np.testing.assert_array_equal(truncated, want[3][ids])
                seen += len(ids)
    finally:
        remote.close()
        local.close()


def test_a_batch_with_a_wrong_action_is_refused_whole(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    with ecotone.connect(servers[0].url) as env:
        env.reset(num_envs=3)
        with pytest.raises(ecotone.InvalidActionError) as few:
            env.step({"actions": [1, 0]})
        assert few.value.field == "actions" and "2 actions for a batch of 3" in str(few.value)
        with pytest.raises(ecotone.InvalidActionError) as bad:
            env.step({"actions": [1, 5, 0]})
        assert bad.value.field == "actions.1"
        result = env.step({"actions": [1, 0, 1]})  # the batch goes on
        assert result.reward == 3.0 and not result.done


def test_spaces_and_modes_the_batch_form_does_not_take(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    with pytest.raises(GymnasiumBridgeError, match="does not batch into one array"):
        build_vector_env_class("gymnasium-vector:Blackjack-v1")  # a Tuple observation
    with pytest.raises(ValueError, match="NEXT_STEP"):
        ecotone.gym.make_vec(servers[0].url, 2, autoreset_mode=AutoresetMode.SAME_STEP)


def test_the_batch_form_passes_the_conformance_suite() -> None:
    report = run(ENV)
    assert report.ok, report.text()
    skipped = [r.name for r in report.results if r.status != "PASS"]
    assert skipped == ["step_after_done"], report.text()  # a session's episode never ends


def test_a_server_that_dies_loses_its_batch_and_the_others_go_on() -> None:
    with run_server(ENV) as a:
        second = run_server(ENV)
        b = second.__enter__()
        remote = ecotone.gym.make_vec([a.url, b.url], 4, errors="info")
        try:
            remote.reset(seed=0)
            remote.step(np.zeros(4, dtype=np.int64))
            second.__exit__(None, None, None)  # the second server stops: its sessions are gone
            obs, rewards, terminated, truncated, infos = remote.step(np.zeros(4, dtype=np.int64))
            assert obs.shape == (4, 4)
            assert truncated.tolist() == [False, False, True, True]
            assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0] and not terminated.any()
            assert infos["_episode_lost"].tolist() == [False, False, True, True]
            assert infos["error_code"][2] == "connection_lost"
            obs, rewards, *_ = remote.step(np.zeros(4, dtype=np.int64))  # the first goes on
            assert rewards[:2].tolist() == [1.0, 1.0]
        finally:
            remote.close()


def test_a_refused_batch_keeps_its_episodes_and_a_lost_one_is_reset_next_step(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    remote = ecotone.gym.make_vec([s.url for s in servers], 4, errors="info")
    local = gymnasium.make_vec("CartPole-v1", 4, vectorization_mode="sync")
    try:
        assert isinstance(remote, BatchedRemoteVectorEnv)
        first, _ = remote.reset(seed=8)
        local.reset(seed=8)
        obs, rewards, terminated, truncated, infos = remote.step(np.array([2, 0, 1, 1]))
        assert infos["error_code"][0] == "invalid_action" and not infos["_error"][2]
        assert rewards.tolist()[:2] == [0.0, 0.0] and not truncated[:2].any()
        np.testing.assert_array_equal(obs[:2], first[:2])  # nothing happened to that batch
        want = local.step(np.array([0, 0, 1, 1]))
        got = remote.step(np.array([0, 0, 1, 1]))  # the first batch's first real step
        np.testing.assert_array_equal(got[0][:2], want[0][:2])
        remote.vector.connections[1].close()  # the second batch's session is gone
        obs, rewards, _, truncated, infos = remote.step(np.ones(4, dtype=np.int64))
        assert truncated.tolist() == [False, False, True, True]
        assert infos["_episode_lost"].tolist() == [False, False, True, True]
        obs, rewards, terminated, truncated, infos = remote.step(np.ones(4, dtype=np.int64))
        assert rewards[2:].tolist() == [0.0, 0.0] and not (terminated | truncated)[2:].any()
        assert "_error" not in infos  # reopened and reset in place of a step: a new episode
        obs, rewards, *_ = remote.step(np.ones(4, dtype=np.int64))
        assert rewards.tolist() == [1.0, 1.0, 1.0, 1.0]
    finally:
        remote.close()
        local.close()


def test_with_errors_raise_a_dead_server_raises_and_leaves_nothing_in_flight() -> None:
    with run_server(ENV) as a:
        second = run_server(ENV)
        b = second.__enter__()
        remote = ecotone.gym.make_vec([a.url, b.url], 4)
        try:
            assert isinstance(remote, BatchedRemoteVectorEnv)
            remote.reset(seed=0)
            second.__exit__(None, None, None)
            for _ in range(2):  # and again: the batch cannot be reset, its server is gone
                with pytest.raises(ecotone.SubEnvError) as lost:
                    remote.step(np.zeros(4, dtype=np.int64))
                assert list(lost.value.errors) == [1]
                assert not remote._inflight
        finally:
            remote.close()


@pytest.mark.parametrize(
    "gym_id",
    [
        "CartPole-v1",  # Discrete actions, Box observations, episodes of about ten steps
        "FrozenLake-v1",  # infos (`prob`), Discrete observations, a slippery random walk
        "Taxi-v4",  # infos with arrays (`action_mask`), truncation at 200 steps
        "Pendulum-v1",  # Box actions, float32 rewards, truncation at 200
    ],
)
def test_the_batch_steps_as_gymnasiums_sync_vector_env(gym_id: str) -> None:
    """The lean step (`NextStepBatch`) against Gymnasium's own, the same actions: every
    observation, reward, flag and info alike, across autoresets and a reseeding reset."""
    from ecotone.plugins.gymnasium_batch import NextStepBatch

    n = 6
    fns = [lambda: gymnasium.make(gym_id)] * n
    lean = NextStepBatch(fns)
    own = gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    space = own.action_space
    space.seed(7)
    ended = 0
    try:
        for seed in (3, 11):
            same(lean.reset(seed=seed), own.reset(seed=seed), f"reset(seed={seed})")
            for t in range(450):
                actions = space.sample()
                if t % 2:  # as a list too: the sub-envs get the same items
                    actions = list(actions)
                want = own.step(actions)
                got = lean.step(actions)
                same(got, want, f"step {t}")
                ended += int(np.sum(want[2] | want[3]))
            # a partial reset after them leaves the rewards and flags the last step returned
            # as they were (its observations are the batch's buffer: taken at once, not kept)
            mask = np.arange(n) % 2 == 0
            same(lean.reset(options={"reset_mask": mask}), own.reset(options={"reset_mask": mask}),
                  "reset(reset_mask)")  # fmt: skip
            same(got[1:4], want[1:4], "the last step, after a partial reset")
    finally:
        lean.close()
        own.close()
    assert ended >= n  # autoresets were part of it


@contextlib.contextmanager
def flaky_pair(**vector_kwargs: Any) -> Iterator[Any]:
    """`make_vec` of 4 sub-envs over two `Flaky` servers of its own, closed on the way out."""
    with run_server("gymnasium-vector:" + FLAKY) as a, run_server("gymnasium-vector:" + FLAKY) as b:
        remote = ecotone.gym.make_vec([a.url, b.url], 4, **vector_kwargs)
        try:
            yield remote
        finally:
            remote.close()


@pytest.mark.parametrize("errors", ["info", "raise"])
def test_an_env_that_raises_fails_its_batch_alone_and_it_is_reset_next_step(
    errors: str,
) -> None:
    with flaky_pair(errors=errors) as remote:
        remote.reset(seed=0)
        remote.step(np.zeros(4, dtype=np.int64))
        actions = np.array([0, 0, 2, 0])  # the second batch's env raises
        if errors == "raise":
            with pytest.raises(ecotone.EpisodeLost) as lost:
                remote.step(actions)
            assert list(lost.value.errors) == [1]
            assert isinstance(lost.value.cause, ecotone.ServerError)
            assert lost.value.cause.code == "env_error"
            obs, rewards, terminated, truncated, infos = lost.value.result
        else:
            obs, rewards, terminated, truncated, infos = remote.step(actions)
        assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
        assert truncated.tolist() == [False, False, True, True] and not terminated.any()
        assert infos["error_code"][2] == "env_error" and "the env broke" in infos["error"][2]
        np.testing.assert_allclose(obs[:, 0], [0.02, 0.02, 0.01, 0.01])  # its last good one
        obs, rewards, terminated, truncated, infos = remote.step(np.zeros(4, dtype=np.int64))
        assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0]  # reset in place of a step
        np.testing.assert_allclose(obs[:, 0], [0.03, 0.03, 0.0, 0.0])
        assert not (terminated | truncated).any() and "_error" not in infos
        obs, *_ = remote.step(np.zeros(4, dtype=np.int64))
        np.testing.assert_allclose(obs[:, 0], [0.04, 0.04, 0.01, 0.01])


def test_a_step_past_step_timeout_fails_its_batch_and_its_late_answer_is_dropped() -> None:
    with flaky_pair(errors="info", step_timeout=0.25) as remote:
        remote.reset(seed=0)
        began = time.monotonic()
        obs, rewards, _, truncated, infos = remote.step(np.array([3, 0, 0, 0]))
        assert time.monotonic() - began < Flaky.SLOW  # the other batch did not wait
        assert infos["error_code"][0] == "timeout" and not infos["_error"][2]
        assert rewards.tolist() == [0.0, 0.0, 1.0, 1.0]
        assert truncated.tolist() == [True, True, False, False]
        time.sleep(Flaky.SLOW)  # the late answer comes in meanwhile
        obs, rewards, _, truncated, infos = remote.step(np.zeros(4, dtype=np.int64))
        assert "_error" not in infos and not truncated.any()
        np.testing.assert_allclose(obs[:, 0], [0.0, 0.0, 0.02, 0.02])  # a new episode
        for t in (1, 2):  # and the answers are each step's own, not the dropped one's
            obs, rewards, *_ = remote.step(np.zeros(4, dtype=np.int64))
            np.testing.assert_allclose(obs[:, 0], np.array([t, t, 2 + t, 2 + t]) / 100)
            assert rewards.tolist() == [1.0, 1.0, 1.0, 1.0]


@contextlib.contextmanager
def interrupted_after(seconds: float) -> Iterator[None]:
    """Ctrl-C `seconds` into the block, which is expected to be waiting then."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupted_step_loses_the_episodes_it_left_in_flight_and_nothing_else() -> None:
    with flaky_pair(errors="info") as remote:
        remote.reset(seed=0)
        with interrupted_after(Flaky.SLOW / 3):
            remote.step(np.array([3, 0, 0, 0]))  # the first batch is still stepping
        obs, rewards, _, truncated, infos = remote.step(np.zeros(4, dtype=np.int64))
        assert "_error" not in infos and not truncated.any()
        assert rewards.tolist() == [0.0, 0.0, 1.0, 1.0]  # reset, and a second step
        np.testing.assert_allclose(obs[:, 0], [0.0, 0.0, 0.02, 0.02])
        obs, rewards, *_ = remote.step(np.zeros(4, dtype=np.int64))  # no stale answer
        np.testing.assert_allclose(obs[:, 0], [0.01, 0.01, 0.03, 0.03])


def test_a_connection_closed_under_a_step_in_flight_loses_that_batch_only(
    servers: tuple[RunningServer, RunningServer],
) -> None:
    remote = ecotone.gym.make_vec([s.url for s in servers], 4, errors="info")
    try:
        assert isinstance(remote, BatchedRemoteVectorEnv)
        remote.reset(seed=0)
        remote.send(np.ones(4, dtype=np.int64))
        remote.vector.connections[1].close()  # with its batch's step in flight
        *_, truncated, infos = remote.recv()
        order = infos["env_id"].argsort()
        assert truncated[order].tolist() == [False, False, True, True]
        assert infos["error_code"][order][2] == "connection_lost"
        _, rewards, _, truncated, _ = remote.step(np.ones(4, dtype=np.int64))
        assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0] and not truncated.any()  # reopened
    finally:
        remote.close()


def test_one_server_twice_its_batches_share_a_connection_and_lose_no_answer() -> None:
    """Two batches on one connection (the same URL twice): the reset of one, made through
    the vector env underneath, does not swallow the other's answer in flight."""
    with run_server("gymnasium-vector:" + FLAKY) as a:
        remote = ecotone.gym.make_vec([a.url, a.url], 4, errors="info", step_timeout=2.0)
        try:
            assert isinstance(remote, BatchedRemoteVectorEnv)
            remote.reset(seed=0)
            *_, infos = remote.step(np.array([0, 0, 2, 0]))  # the second batch's env raises
            assert infos["error_code"][2] == "env_error"
            remote.send(np.array([0, 0]), env_ids=[0, 1])  # in flight on the shared connection
            remote.send(np.array([0, 0]), env_ids=[2, 3])  # reset there meanwhile
            began = time.monotonic()
            obs, rewards, *_, infos = remote.recv()
            assert time.monotonic() - began < 1.0 and "_error" not in infos
            order = infos["env_id"].argsort()
            assert rewards[order].tolist() == [1.0, 1.0, 0.0, 0.0]
            np.testing.assert_allclose(obs[order][:, 0], [0.02, 0.02, 0.0, 0.0])
        finally:
            remote.close()


def test_over_http_two_batches_on_one_connection_take_turns() -> None:
    """HTTP carries one request at a time: two batches on one connection step in turn."""
    env = "gymnasium-vector:" + FLAKY
    with run_server(env, transport="http") as a:
        remote = ecotone.gym.make_vec([a.url, a.url], 4, errors="info", step_timeout=2.0)
        try:
            remote.reset(seed=0)
            for t in range(1, 4):
                obs, rewards, *_, infos = remote.step(np.zeros(4, dtype=np.int64))
                assert "_error" not in infos and rewards.tolist() == [1.0] * 4
                np.testing.assert_allclose(obs[:, 0], [t / 100] * 4)
        finally:
            remote.close()


def test_an_interrupted_recv_gives_back_what_it_had_taken() -> None:
    with flaky_pair(errors="info") as remote:
        remote.reset(seed=0)
        remote.send(np.array([0, 0, 3, 0]))  # the second batch is slow
        with interrupted_after(Flaky.SLOW / 3):
            remote.recv()  # takes the first batch, then waits for the second
        _, rewards, _, truncated, infos = remote.recv()
        assert infos["env_id"].tolist() == [0, 1, 2, 3]
        assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0]  # the first batch's step, kept
        assert truncated.tolist() == [False, False, True, True]
        assert infos["error_code"][2] == "cancelled"
        with pytest.raises(ValueError, match="send first"):
            remote.recv()


@pytest.mark.parametrize("errors", ["info", "raise"])
def test_a_server_of_another_env_is_a_bad_observation_not_a_crash(errors: str) -> None:
    with run_server(ENV) as a, run_server("gymnasium-vector:Pendulum-v1") as b:
        remote = ecotone.gym.make_vec([a.url, b.url], 4, errors=errors)
        try:
            if errors == "raise":
                with pytest.raises(ecotone.EpisodeLost) as lost:
                    remote.reset(seed=0)
                assert list(lost.value.errors) == [1]
                assert "need (32, 16, 2, 2) bytes" in str(lost.value)
                return
            obs, infos = remote.reset(seed=0)
            assert infos["error_code"][2] == "bad_observation"
            assert "need (32, 16, 2, 2) bytes" in infos["error"][2]  # and what came: 24 for 2x3
            assert obs.shape == (4, 4) and not obs[2:].any()
            obs, rewards, _, truncated, infos = remote.step(np.zeros(4, dtype=np.int64))
            assert rewards.tolist() == [1.0, 1.0, 0.0, 0.0] and truncated[2:].all()
            assert infos["error_code"][3] == "bad_observation"  # reset again, refused again
        finally:
            remote.close()


class Misshapen(gymnasium.Env[np.ndarray, np.int64]):
    """Observations of Box(0, 9, (3,), int64); action 1 answers 4 of them, 2 floats, 3 two,
    4 three uint64."""

    observation_space = spaces.Box(0, 9, (3,), np.int64)
    action_space = spaces.Discrete(5)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(3, np.int64), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs = {0: np.ones(3, np.int64), 1: np.ones(4, np.int64), 2: np.ones(3), 3: np.ones(2)}
        obs[4] = np.ones(3, np.uint64)  # fits, but with int64 numpy would promote to float64
        return obs[int(action)], 0.0, False, False, {}


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        ([0, 1], ValueError),
        ([0, 2], TypeError),
        ([1, 3], ValueError),
        ([0, 0], None),
        ([0, 4], None),
    ],
    ids=["a longer one", "floats for ints", "4 and 2 for 2x3", "fits", "int64 and uint64"],
)
def test_the_lean_step_refuses_observations_as_gymnasium_does(
    actions: list[int], error: type[Exception] | None
) -> None:
    """Observations the batch cannot hold fail its step as they fail Gymnasium's own (the
    lean step stacks them in one C call where they fit: never silently otherwise)."""
    from ecotone.plugins.gymnasium_batch import NextStepBatch

    fns = [Misshapen] * 2
    lean = NextStepBatch(fns)
    own = gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    try:
        lean.reset(seed=0)
        own.reset(seed=0)
        if error is None:
            same(lean.step(np.array(actions)), own.step(np.array(actions)), "a step that fits")
            return
        with pytest.raises(error):
            own.step(np.array(actions))
        with pytest.raises(error):
            lean.step(np.array(actions))
    finally:
        lean.close()
        own.close()
