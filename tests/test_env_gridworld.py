"""The bundled `gridworld` env: movement and rewards on a fixed layout, seeded layouts that are
always solvable, and episodes through the real client over a real server."""

from __future__ import annotations

import random
from typing import Any

import pytest

import ecotone
from ecotone.plugins.gridworld import (
    GridworldAction,
    GridworldEnv,
    GridworldObservation,
    GridworldState,
    shortest_path,
)
from tests.conftest import run_server

LAYOUT = [
    "S.G",
    "#X.",
    "...",
]


# --- rules on a fixed layout -----------------------------------------------------------------


def test_walking_to_the_goal_costs_a_little_per_step_and_pays_one_at_the_goal() -> None:
    env = GridworldEnv()
    first = env.reset(layout=LAYOUT, episode_id="g-1")
    assert first.grid == "A.G\n#X.\n..."
    assert (first.position, first.reward, first.steps_left) == ((0, 0), None, 36)

    step = env.step(GridworldAction(move="right"))
    assert (step.position, step.reward, step.done, step.bumped) == ((0, 1), -0.01, False, False)
    assert step.grid == ".AG\n#X.\n..."
    goal = env.step(GridworldAction(move="right"))
    assert (goal.position, goal.reward, goal.done, goal.truncated) == ((0, 2), 1.0, True, False)
    state = env.state()
    assert (state.episode_id, state.step_count, state.position) == ("g-1", 2, (0, 2))
    assert (state.layout, state.start, state.goal) == (["..G", "#X.", "..."], (0, 0), (0, 2))


def test_walls_and_edges_bump_the_agent_back_and_still_cost_a_step() -> None:
    env = GridworldEnv()
    env.reset(layout=LAYOUT)
    for move in ("up", "left", "down"):  # the edge, the edge, a wall
        obs = env.step(GridworldAction(move=move))
        assert (obs.position, obs.bumped, obs.reward) == ((0, 0), True, -0.01)
    assert env.state().step_count == 3


def test_a_pit_ends_the_episode_with_minus_one() -> None:
    env = GridworldEnv()
    env.reset(layout=LAYOUT)
    env.step(GridworldAction(move="right"))
    pit = env.step(GridworldAction(move="down"))
    assert (pit.position, pit.reward, pit.done, pit.truncated) == ((1, 1), -1.0, True, False)


def test_max_steps_truncates_the_episode() -> None:
    env = GridworldEnv()
    env.reset(layout=LAYOUT, max_steps=2)
    assert not env.step(GridworldAction(move="up")).truncated
    last = env.step(GridworldAction(move="up"))
    assert (last.truncated, last.done, last.steps_left) == (True, False, 0)


def test_a_move_that_is_not_one_of_the_four_is_invalid_action_naming_move() -> None:
    with ecotone.connect("inproc://gridworld") as env:
        env.reset(seed=0)
        for bad in ({"move": "north"}, {"move": 1}, {}):
            with pytest.raises(ecotone.InvalidActionError) as refused:
                env.step(bad)
            assert refused.value.field == "move"
        assert env.state()["step_count"] == 0
        assert env.step({"move": "up"}).reward in (-0.01, 1.0, -1.0)


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        (["S..", "..."], "one S"),
        (["S.G", ".."], "equal length"),
        (["S.G", ".?."], "'?'"),
    ],
)
def test_a_malformed_layout_is_refused_saying_why(layout: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        GridworldEnv().reset(layout=layout)


# --- seeded layouts --------------------------------------------------------------------------


def test_seeded_layouts_are_reproducible_and_vary_with_the_seed() -> None:
    env = GridworldEnv()
    layouts = []
    for seed in [*range(8), 5]:
        env.reset(seed=seed, size=6, pits=2)
        st = env.state()
        layouts.append((tuple(st.layout), st.start, st.goal))
    assert layouts[5] == layouts[-1]
    assert len(set(layouts)) == 8
    rows = layouts[0][0]
    assert len(rows) == 6 and all(len(r) == 6 for r in rows)
    assert sum(r.count("X") for r in rows) == 2


@pytest.mark.parametrize("seed", range(30))
def test_every_seeded_layout_can_be_solved_along_its_shortest_path(seed: int) -> None:
    env = GridworldEnv()
    env.reset(seed=seed, size=4 + seed % 5, wall_density=0.4, pits=seed % 4)
    st = env.state()
    path = shortest_path(st.layout, st.start, st.goal)
    assert path, st.layout
    rewards = [env.step(GridworldAction(move=move)).reward for move in path]
    assert rewards == [-0.01] * (len(path) - 1) + [1.0]
    assert env.state().position == st.goal


def test_sample_actions_are_always_valid_moves() -> None:
    env = GridworldEnv()
    rng = random.Random(1)
    for seed in range(5):
        obs = env.reset(seed=seed, pits=3, max_steps=50)
        while not (obs.done or obs.truncated):
            obs = env.step(env.sample_action(rng))
        assert obs.done or env.state().step_count == 50


# --- the real client over a real server ------------------------------------------------------


def _episode(env: ecotone.EnvClient[Any, Any], seed: int) -> list[Any]:
    pick = random.Random(99)
    out = [env.reset(seed=seed, pits=2, max_steps=40).observation]
    while True:
        result = env.step({"move": pick.choice(["up", "down", "left", "right"])})
        out.append(result.observation)
        if result.finished:
            return out


def test_the_same_seed_and_moves_give_the_same_episode_over_a_server() -> None:
    with run_server("gridworld") as server:
        with ecotone.connect(server.url) as one, ecotone.connect(server.url) as two:
            first, second = _episode(one, 8), _episode(two, 8)
            assert first == second
            assert one.state()["layout"] == two.state()["layout"]
            assert one.state()["episode_id"] != two.state()["episode_id"]  # fresh per reset


def test_an_episode_through_the_client_decodes_into_the_env_types() -> None:
    with (
        run_server("gridworld") as server,
        ecotone.connect(
            server.url, observation_type=GridworldObservation, state_type=GridworldState
        ) as env,
    ):
        env.reset(seed=4, size=5)
        state = env.state()
        assert isinstance(state, GridworldState)
        path = shortest_path(state.layout, state.start, state.goal)
        assert path
        result = None
        for move in path:
            result = env.step({"move": move})
        assert result is not None and result.done and result.reward == 1.0
        assert isinstance(result.observation, GridworldObservation)
        assert result.observation.position == state.goal
        assert env.state().step_count == len(path)
