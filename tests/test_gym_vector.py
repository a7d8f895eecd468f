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
            assert infos["error_code"][0] == "invalid_action" and not infos["episode_lost"][0]
        finally:
            envs.close()
