"""`ecotone.gym.make_vec`: remote sub-envs as a `gymnasium.vector.VectorEnv` that behaves like
Gymnasium's own vector env of the same env, step for step, in each autoreset mode."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import ecotone.gym
from tests.conftest import RunningServer, run_server

ENV_ID = "CartPole-v1"
N = 4


@pytest.fixture(scope="module")
def cartpole() -> Iterator[RunningServer]:
    with run_server(f"gymnasium:{ENV_ID}") as server:
        yield server


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_make_vec_matches_gymnasiums_sync_vector_env(
    cartpole: RunningServer, mode: AutoresetMode
) -> None:
    local = gymnasium.make_vec(
        ENV_ID, num_envs=N, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )
    remote = ecotone.gym.make_vec(cartpole.url, N, autoreset_mode=mode)
    try:
        assert remote.single_observation_space == local.single_observation_space
        assert remote.single_action_space == local.single_action_space
        assert remote.observation_space == local.observation_space
        assert remote.metadata["autoreset_mode"] == mode
        assert remote.vector._core._codec.name == "msgpack"  # make_vec's default
        obs_l, _ = local.reset(seed=11)
        obs_r, _ = remote.reset(seed=11)
        np.testing.assert_allclose(obs_r, obs_l, rtol=1e-6)
        rng = np.random.default_rng(5)
        ended = 0
        for _ in range(80):
            actions = rng.integers(0, 2, size=N)
            obs_l, rew_l, term_l, trunc_l, info_l = local.step(actions)
            obs_r, rew_r, term_r, trunc_r, info_r = remote.step(actions)
            assert obs_r.dtype == obs_l.dtype
            np.testing.assert_allclose(obs_r, obs_l, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(rew_r, rew_l)
            np.testing.assert_array_equal(term_r, term_l)
            np.testing.assert_array_equal(trunc_r, trunc_l)
            if mode is AutoresetMode.SAME_STEP and "final_obs" in info_l:
                for i in np.flatnonzero(info_l["_final_obs"]):
                    np.testing.assert_allclose(info_r["final_obs"][i], info_l["final_obs"][i],
                                               rtol=1e-5, atol=1e-6)  # fmt: skip
            ended += int(np.sum(term_l | trunc_l))
        assert ended > 0  # episodes ended and were reset along the way
    finally:
        local.close()
        remote.close()


def test_with_errors_info_a_rejected_action_changes_nothing_in_its_sub_env() -> None:
    with run_server("wordle") as server:
        envs = ecotone.gym.make_vec(server.url, 2, errors="info")
        try:
            first, _ = envs.reset(seed=0)
            obs, rewards, terminated, truncated, infos = envs.step(("zzzzz", "crane"))
            assert obs["text"][0] == first["text"][0] and obs["guess"][1] == "crane"
            assert rewards[0] == 0.0 and not terminated[0] and not truncated[0]
            assert "not in the word list" in infos["error"][0]
            assert infos["error"][0].startswith("[invalid_action] invalid action")  # code once
            assert infos["error_code"][0] == "invalid_action" and not infos["episode_lost"][0]
        finally:
            envs.close()


@pytest.mark.parametrize("folds", [True, False])
def test_autoresets_folded_into_step_many_or_not_match_gymnasium(
    cartpole: RunningServer, folds: bool
) -> None:
    """Servers that take resets inside `step_many` (ecotone's) get a finished sub-env's
    autoreset there; others (`folds_resets` off) as a `reset` frame. Both are Gymnasium's
    NEXT_STEP autoreset, step for step."""
    local = gymnasium.make_vec(ENV_ID, num_envs=N, vectorization_mode="sync")
    remote = ecotone.gym.make_vec(cartpole.url, N)
    try:
        local.reset(seed=3)
        remote.reset(seed=3)
        (link,) = remote.vector._core.links
        assert link.folds_resets  # the server's welcome listed the feature
        link.folds_resets = folds
        ended = 0
        for _ in range(60):
            actions = np.ones(N, dtype=np.int64)  # always right: episodes end fast
            obs_l, rew_l, term_l, trunc_l, _ = local.step(actions)
            obs_r, rew_r, term_r, trunc_r, _ = remote.step(actions)
            np.testing.assert_allclose(obs_r, obs_l, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(rew_r, rew_l)
            np.testing.assert_array_equal(term_r | trunc_r, term_l | trunc_l)
            ended += int(np.sum(term_l | trunc_l))
        assert ended >= N
    finally:
        local.close()
        remote.close()


def test_send_and_recv_over_two_servers_match_gymnasium(cartpole: RunningServer) -> None:
    """EnvPool's loop: each server's batch is sent back as soon as it answers. Every sub-env
    takes the same steps as in Gymnasium's SyncVectorEnv, whatever order they answer in."""
    n = 6
    rng = np.random.default_rng(9)
    plan = rng.integers(0, 2, size=(40, n))  # the action of each sub-env at each of its steps
    local = gymnasium.make_vec(ENV_ID, num_envs=n, vectorization_mode="sync")
    local.reset(seed=21)
    expected = [local.step(plan[t]) for t in range(len(plan))]
    local.close()
    with run_server(f"gymnasium:{ENV_ID}") as other:
        remote = ecotone.gym.make_vec([cartpole.url, other.url], n)
        try:
            remote.reset(seed=21)
            taken = np.zeros(n, dtype=np.int64)  # steps each sub-env took so far
            half = [np.arange(0, n, 2), np.arange(1, n, 2)]  # sub-env i is on server i % 2
            for ids in half:
                remote.send(plan[0, ids], ids)
            while taken.min() < len(plan):
                obs, rewards, terminated, truncated, infos = remote.recv(min_ready=n // 2)
                ids = infos["env_id"]
                assert obs.shape == (len(ids), 4) and rewards.shape == (len(ids),)
                for j, i in enumerate(ids):
                    t = taken[i]
                    obs_l, rew_l, term_l, trunc_l, _ = expected[t]
                    np.testing.assert_allclose(obs[j], obs_l[i], rtol=1e-5, atol=1e-6)
                    assert rewards[j] == rew_l[i] and terminated[j] == term_l[i]
                    assert truncated[j] == trunc_l[i]
                    taken[i] += 1
                again = ids[taken[ids] < len(plan)]
                if len(again):
                    remote.send(plan[taken[again], again], again)
        finally:
            remote.close()


@pytest.mark.parametrize("codec", ["msgpack", "json"])
@pytest.mark.parametrize("gym_id", ["FrozenLake-v1", "Blackjack-v1", "Taxi-v4"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_make_vec_over_the_bridge_reads_every_kind_of_space_as_gymnasium(
    gym_id: str, mode: AutoresetMode, codec: str
) -> None:
    """The bridge's observations decode as structs and are read whole from their `obs`
    fields: a Discrete observation (FrozenLake, Taxi) and a Tuple of them (Blackjack) give
    Gymnasium's batches, final observations included, over two servers."""
    if gym_id not in gymnasium.registry:
        pytest.skip(f"{gym_id} is not in this Gymnasium")
    n = 5
    local = gymnasium.make_vec(
        gym_id, num_envs=n, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )
    with run_server(f"gymnasium:{gym_id}") as one, run_server(f"gymnasium:{gym_id}") as two:
        remote = ecotone.gym.make_vec([one.url, two.url], n, autoreset_mode=mode, codec=codec)
        try:
            assert remote.vector._core.types.observation is ecotone.gym.vector.BridgedObservation
            assert remote.vector._core._codec.name == codec
            assert remote.single_observation_space == local.single_observation_space
            want, _ = local.reset(seed=3)
            got, _ = remote.reset(seed=3)
            np.testing.assert_equal(got, want)
            rng = np.random.default_rng(7)
            ended = 0
            for t in range(220 if gym_id.startswith("Taxi") else 60):  # Taxi: its time limit
                actions = rng.integers(0, local.single_action_space.n, size=n)  # type: ignore[attr-defined]
                want_step = local.step(actions)
                got_step = remote.step(actions)
                np.testing.assert_equal(got_step[0], want_step[0], err_msg=f"step {t}")
                for k in (1, 2, 3):
                    np.testing.assert_array_equal(got_step[k], want_step[k], err_msg=f"step {t}")
                if mode is AutoresetMode.SAME_STEP and "final_obs" in want_step[4]:
                    for i in np.flatnonzero(want_step[4]["_final_obs"]):
                        np.testing.assert_equal(
                            got_step[4]["final_obs"][i], want_step[4]["final_obs"][i]
                        )
                ended += int(np.sum(want_step[2] | want_step[3]))
            assert ended > 0
        finally:
            remote.close()
            local.close()
