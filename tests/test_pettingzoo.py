"""PettingZoo both ways, on real servers: PettingZoo envs served with a seat per agent
(`pettingzoo:` names, action masks), and ecotone's multi-agent envs as PettingZoo envs
(`ecotone.pettingzoo.env`, `parallel_env`) passing PettingZoo's own `api_test`,
`parallel_api_test`, `seed_test` and `parallel_seed_test` over WebSocket."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import chess_v6, connect_four_v3
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import ecotone
import ecotone.pettingzoo
from ecotone.kernel import Registry
from ecotone.plugins.pettingzoo import PettingZooBridgeError, parse
from tests.conftest import ecotone_serving, run_server

CONNECT_FOUR = "pettingzoo:classic/connect_four_v3"
TICTACTOE = "pettingzoo:classic/tictactoe_v3"
RPS = "pettingzoo:classic/rps_v2:parallel_env"
CHESS = "pettingzoo:classic/chess_v6"
DUEL = "chess-duel-indexed"
AEC_ENVS = ["dilemma", DUEL, CONNECT_FOUR, TICTACTOE, CHESS]
"""Every bundled multi-agent env whose moves a finite space holds: `chess-duel`'s are free
text (UCI or SAN), so it is played here in its indexed form, `chess-duel-indexed` (a
Discrete(4672) move with an action mask, as PettingZoo's own chess, which is served through
the bridge too)."""
PARALLEL_ENVS = ["dilemma", RPS]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """A WebSocket server per env these tests play (each serves one env)."""
    with contextlib.ExitStack() as stack:
        names = sorted({*AEC_ENVS, *PARALLEL_ENVS, "counter"})
        yield {name: stack.enter_context(run_server(name)).url for name in names}


# --- serving PettingZoo envs ----------------------------------------------------------------


def test_names_pick_a_module_a_constructor_and_its_keyword_arguments() -> None:
    assert parse(CONNECT_FOUR) == ("classic.connect_four_v3", None, {})
    assert parse("pettingzoo:classic/rps_v2:parallel_env?num_actions=5&max_cycles=3") == (
        "classic.rps_v2",
        "parallel_env",
        {"num_actions": 5, "max_cycles": 3},
    )
    assert parse("pettingzoo:mypkg.envs.tag_v1") == ("mypkg.envs.tag_v1", None, {})
    for bad, why in [
        ("pettingzoo:", "names no env"),
        ("pettingzoo:classic/connect four", "not a module path"),
        ("pettingzoo:classic/rps_v2:parallel-env", "not a constructor"),
    ]:
        with pytest.raises(PettingZooBridgeError, match=why):
            parse(bad)


def test_unservable_names_say_why() -> None:
    registry = Registry.discover()
    for name, why in [
        ("pettingzoo:classic/no_such_game_v0", r"no module pettingzoo\.classic\.no_such_game_v0"),
        ("pettingzoo:classic/rps_v2:nope", r"has no nope\(\)"),
        ("pettingzoo:classic/rps_v2?num_actions=x", r"env\(num_actions='x'\) failed"),
        ("pettingzoo:json:loads", r"not a PettingZoo AECEnv or ParallelEnv|failed"),
    ]:
        with pytest.raises(PettingZooBridgeError, match=why):
            registry.env_spec(name)


def test_serving_connect_four_from_the_command_line_and_a_bad_name_exits_2(
    tmp_path: Path,
) -> None:
    with ecotone_serving(CONNECT_FOUR, "--port", "0", cwd=tmp_path) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"at (ws://127\.0\.0\.1:\d+)$", line.strip())
        assert match, line
        with ecotone.connect(match[1]) as owner:
            info = owner.describe()
            assert info.seats == ["player_0", "player_1"] and not info.simultaneous
            owner.reset(seed=0)
            assert owner.play({"action": 3}).turn == "player_1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "pettingzoo:classic/nope_v1", "--port", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "no module pettingzoo.classic.nope_v1" in done.stderr
    assert "Traceback" not in done.stderr


def _legal(view: Any) -> list[int]:
    mask = view.result.observation["obs"]["action_mask"]
    return [i for i, allowed in enumerate(mask) if allowed]


def test_two_seats_play_connect_four_with_action_masks_as_pettingzoo_does(
    servers: dict[str, str],
) -> None:
    url = servers[CONNECT_FOUR]
    local = connect_four_v3.env()
    local.reset(seed=3)
    with (
        ecotone.Connection.open_url(url) as first,
        ecotone.Connection.open_url(url) as second,
        ecotone.Connection.open_url(url) as third,
    ):
        owner = first.open(CONNECT_FOUR)
        keys = owner.seat_keys()
        owner.reset(seed=3)
        seats = {
            "player_0": second.join(keys.keys["player_0"]),
            "player_1": third.join(keys.keys["player_1"]),
        }
        rng = np.random.default_rng(0)
        turn: str | None = "player_0"
        while turn is not None:
            view = seats[turn].observe()
            mine = local.observe(turn)
            assert view.result.observation["obs"]["observation"] == mine["observation"].tolist()
            assert _legal(view) == np.flatnonzero(mine["action_mask"]).tolist()
            move = int(rng.choice(_legal(view)))
            answer = seats[turn].play({"action": move})
            local.step(move)
            turn = answer.turn
            assert turn == (
                local.agent_selection
                if local.agents and not any(local.terminations.values())
                else None
            )
        for seat, holder in seats.items():
            final = holder.observe().result
            assert final.done and final.reward == local._cumulative_rewards[seat]
        assert owner.observe().result.observation["agents"] == []  # the public view


def test_a_masked_or_out_of_range_move_is_refused_and_changes_nothing(
    servers: dict[str, str],
) -> None:
    with ecotone.connect(servers[CONNECT_FOUR]) as owner:
        owner.reset(seed=0)
        for _ in range(6):  # fill column 0: player_0, player_1, ...
            owner.play({"action": 0})
        with pytest.raises(ecotone.InvalidActionError) as caught:
            owner.play({"action": 0})
        assert caught.value.field == "action" and caught.value.details["legal"] == [
            1,
            2,
            3,
            4,
            5,
            6,
        ]
        with pytest.raises(ecotone.InvalidActionError):
            owner.play({"action": 7})
        assert owner.state()["step_count"] == 6
        assert owner.play({"action": 1}).turn == "player_1"  # the game goes on


def test_a_parallel_env_is_served_as_simultaneous_moves(servers: dict[str, str]) -> None:
    with (
        ecotone.Connection.open_url(servers[RPS]) as first,
        ecotone.Connection.open_url(servers[RPS]) as second,
    ):
        owner = first.open(RPS)
        assert first.describe(RPS).simultaneous
        rival = second.join(owner.seat_keys().keys["player_1"])
        owner.reset(seed=0)
        answers: dict[str, Any] = {}
        waiting = threading.Thread(target=lambda: answers.update(p1=rival.play({"action": 1})))
        waiting.start()  # player_1 shows paper; its answer waits for player_0
        while owner.observe().acting != ["player_0"]:
            pass
        mine = owner.play({"action": 0}, seat="player_0")  # rock
        waiting.join(10)
        assert mine.result.reward == -1.0 and answers["p1"].result.reward == 1.0
        assert mine.result.observation["obs"] == 1  # what the other seat showed


# --- ecotone's envs as PettingZoo envs ------------------------------------------------------


@pytest.mark.parametrize("name", AEC_ENVS)
def test_api_test_and_seed_test_pass_on_the_remote_aec_form(
    name: str, servers: dict[str, str]
) -> None:
    url = servers[name]
    with pytest.warns(UserWarning):  # PettingZoo's advice (no render, ...), never an error
        env = ecotone.pettingzoo.env(url)
        try:
            api_test(env, num_cycles=200)
        finally:
            env.close()
    seed_test(lambda: ecotone.pettingzoo.env(url), num_cycles=50)


@pytest.mark.parametrize("name", [*PARALLEL_ENVS, CONNECT_FOUR])
def test_parallel_api_test_passes_on_the_remote_parallel_form(
    name: str, servers: dict[str, str]
) -> None:
    env = ecotone.pettingzoo.parallel_env(servers[name])
    try:
        parallel_api_test(env, num_cycles=200)
    finally:
        env.close()


@pytest.mark.parametrize("name", PARALLEL_ENVS)
def test_parallel_seed_test_passes_on_the_remote_parallel_form(
    name: str, servers: dict[str, str]
) -> None:
    parallel_seed_test(lambda: ecotone.pettingzoo.parallel_env(servers[name]), num_cycles=50)


def test_the_remote_aec_form_plays_what_pettingzoo_plays_in_process(
    servers: dict[str, str],
) -> None:
    remote = ecotone.pettingzoo.env(servers[CONNECT_FOUR])
    local = connect_four_v3.env()
    try:
        remote.reset(seed=7)
        local.reset(seed=7)
        assert remote.observation_space("player_0") == local.observation_space("player_0")
        assert remote.action_space("player_1") == local.action_space("player_1")
        space = local.action_space("player_0")
        space.seed(1)
        for agent in local.agent_iter():
            assert agent == remote.agent_selection
            mine, theirs = local.last(), remote.last()
            for a, b in zip(mine[1:], theirs[1:], strict=True):
                assert a == b
            assert np.array_equal(mine[0]["observation"], theirs[0]["observation"])
            assert theirs[0]["observation"].dtype == mine[0]["observation"].dtype
            done = mine[2] or mine[3]
            action = None if done else int(space.sample(mine[0]["action_mask"]))
            local.step(action)
            remote.step(action)
        assert remote.agents == []
    finally:
        remote.close()
        local.close()


def test_chess_duel_indexed_plays_what_pettingzoos_chess_plays_in_process(
    servers: dict[str, str],
) -> None:
    remote = ecotone.pettingzoo.env(servers[DUEL])
    local = chess_v6.env()
    agents = dict(zip(local.possible_agents, remote.possible_agents, strict=True))
    try:
        remote.reset(seed=5)
        local.reset(seed=5)
        for mine, theirs in agents.items():
            assert remote.observation_space(theirs) == local.observation_space(mine)
            assert remote.action_space(theirs) == local.action_space(mine)
        space = local.action_space("player_0")
        space.seed(5)
        for ply, agent in enumerate(local.agent_iter(max_iter=120)):
            assert agents[agent] == remote.agent_selection
            mine, theirs = local.last(), remote.last()
            if mine[2] or theirs[2]:  # PettingZoo claims some draws a move early: stop there
                break
            for key in ("observation", "action_mask"):
                assert np.array_equal(mine[0][key], theirs[0][key]), (ply, key)
                assert mine[0][key].dtype == theirs[0][key].dtype
            action = int(space.sample(mine[0]["action_mask"]))
            local.step(action)
            remote.step(action)
        assert ply > 100
    finally:
        remote.close()
        local.close()


def test_a_simultaneous_env_in_the_aec_form_plays_a_round_when_its_last_agent_acts(
    servers: dict[str, str],
) -> None:
    env = ecotone.pettingzoo.env(servers["dilemma"], reset_options={"rounds": 2})
    try:
        env.reset(seed=0)
        assert env.metadata["is_parallelizable"] is True
        env.step(1)  # player_0 defects: kept until player_1 acts
        assert env.agent_selection == "player_1" and env.rewards == {"player_0": 0, "player_1": 0}
        env.step(0)  # player_1 cooperates: the round is played
        assert env.rewards == {"player_0": 5.0, "player_1": 0.0}
        # both moves shown, in seat order, as indexes into the schema's enum (sorted)
        assert env.observe("player_1")["last"] == (1, 0)  # defect, cooperate
        env.step(1)
        env.step(1)
        assert env.terminations == {"player_0": True, "player_1": True}
        with pytest.raises(ValueError, match="only action is None"):
            env.step(0)
        env.step(None)
        env.step(None)
        assert env.agents == []
    finally:
        env.close()


def test_misuse_is_a_clear_error(servers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="single-agent env"):
        ecotone.pettingzoo.env(servers["counter"])
    par = ecotone.pettingzoo.parallel_env(servers["dilemma"])
    try:
        par.reset(seed=0)
        with pytest.raises(ValueError, match="no action for player_1"):
            par.step({"player_0": 0})
    finally:
        par.close()
    aec = ecotone.pettingzoo.env(servers[CONNECT_FOUR])
    try:
        aec.reset(seed=0)
        for _ in range(6):
            aec.step(0)
        with pytest.raises(ecotone.InvalidActionError):
            aec.step(0)  # column 0 is full: outside the action mask
        assert aec.agent_selection == "player_0"
        aec.step(1)  # nothing changed: the game goes on
    finally:
        aec.close()
