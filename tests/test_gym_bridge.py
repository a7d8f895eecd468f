"""Gymnasium both ways: Gymnasium envs served by ecotone (`gymnasium:ID`), and any ecotone env
as a `gymnasium.Env` (`ecotone.gym.make`), against real servers and real Gymnasium envs."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import gymnasium
import msgspec
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

import ecotone
import ecotone.gym
from ecotone.kernel import Registry
from ecotone.plugins.counter import CounterEnv
from ecotone.plugins.gymnasium import GymnasiumBridgeError, env_class, parse_name
from tests.conftest import RunningServer, ecotone_serving, run_server

# --- test-only Gymnasium envs ---------------------------------------------------------------


class MixedEnv(gymnasium.Env[dict[str, Any], dict[str, Any]]):
    """Dict, Tuple, Text, MultiBinary and MultiDiscrete spaces; deterministic given the seed."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "flags": spaces.MultiBinary(3),
                "word": spaces.Text(4, min_length=1, charset="abc"),
                "grid": spaces.MultiDiscrete(np.array([[2, 3], [4, 5]])),
                "pair": spaces.Tuple(
                    (spaces.Discrete(3, start=-1), spaces.Box(0, 10, (), np.int64))
                ),
            }
        )
        self.action_space = spaces.Dict(
            {
                "move": spaces.Discrete(4),
                "force": spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), dtype=np.float64),
                "fire-mode": spaces.Discrete(2),
                "say": spaces.Text(3, min_length=0, charset="xy-"),
            }
        )
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        return {
            "position": rng.uniform(-1, 1, 2).astype(np.float32),
            "flags": rng.integers(0, 2, 3, dtype=np.int8),
            "word": "".join(rng.choice(list("abc"), size=int(rng.integers(1, 5)))),
            "grid": rng.integers(0, [[2, 3], [4, 5]]).astype(np.int64),
            "pair": (np.int64(rng.integers(-1, 2)), np.asarray(rng.integers(0, 11), np.int64)),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {"t": np.int64(0), "options": options or {}}

    def step(
        self, action: dict[str, Any]
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), action
        self._t += 1
        reward = float(action["move"]) - float(np.sum(action["force"])) + int(action["fire-mode"])
        info = {"t": np.int64(self._t), "force": np.asarray(action["force"])}
        return self._obs(), reward, self._t >= 5, False, info


class SequenceEnv(gymnasium.Env[Any, Any]):
    """An observation space the bridge cannot map (Sequence)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space: spaces.Space[Any] = spaces.Sequence(spaces.Discrete(3))
        self.action_space = spaces.Discrete(2)


MIXED_ID = "EcotoneBridgeTest/Mixed-v0"
SEQUENCE_ID = "EcotoneBridgeTest/Sequence-v0"
if MIXED_ID not in gymnasium.registry:
    gymnasium.register(id=MIXED_ID, entry_point=f"{__name__}:MixedEnv")
if SEQUENCE_ID not in gymnasium.registry:
    gymnasium.register(id=SEQUENCE_ID, entry_point=f"{__name__}:SequenceEnv")


# --- a native ecotone env whose fields cover the schema -> space table ---------------------


class SteerAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    direction: Literal["n", "s", "e", "w"]
    speed: Annotated[int, msgspec.Meta(ge=0, le=3)]
    boost: bool
    aim: Annotated[list[float], msgspec.Meta(min_length=2, max_length=2)]


class SteerObservation(ecotone.Observation, kw_only=True):
    pos: tuple[int, int]


class SteerState(ecotone.State, kw_only=True):
    pos: tuple[int, int] = (0, 0)


class SteerEnv(ecotone.Environment[SteerAction, SteerObservation, SteerState]):
    """Moves a point by `speed` (doubled with `boost`) in a compass direction."""

    name = "steer"
    inline = True
    MOVES: dict[str, tuple[int, int]] = {"n": (0, 1), "s": (0, -1), "e": (1, 0), "w": (-1, 0)}

    def __init__(self) -> None:
        self._state = SteerState()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> SteerObservation:
        self._state = SteerState(episode_id=episode_id)
        return SteerObservation(pos=(0, 0))

    def step(self, action: SteerAction) -> SteerObservation:
        dx, dy = self.MOVES[action.direction]
        k = action.speed * (2 if action.boost else 1)
        x, y = self._state.pos
        self._state.pos = (x + k * dx, y + k * dy)
        self._state.step_count += 1
        return SteerObservation(pos=self._state.pos, reward=float(sum(action.aim)))

    def state(self) -> SteerState:
        return self._state


class SteerPlugin:
    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return {"steer": SteerEnv}


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole() -> Iterator[RunningServer]:
    with run_server("gymnasium:CartPole-v1") as server:
        yield server


@pytest.fixture(scope="module")
def mixed() -> Iterator[RunningServer]:
    with run_server(f"gymnasium:{MIXED_ID}") as server:
        yield server


def jsonable(value: Any) -> Any:
    return ecotone.gym.to_jsonable(value)


def check_env_warnings(env: gymnasium.Env[Any, Any]) -> list[str]:
    """Run Gymnasium's checker (failures raise) and return the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [re.sub(r"\x1b\[\d+m", "", str(w.message)) for w in caught]


# --- serving Gymnasium envs ----------------------------------------------------------------


def test_remote_cartpole_has_the_spaces_of_a_local_one(cartpole: RunningServer) -> None:
    local = gymnasium.make("CartPole-v1")
    with ecotone.gym.make(cartpole.url) as remote:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        assert remote.observation_space.dtype == np.float32
        assert isinstance(remote.action_space, spaces.Discrete)
        bounded = remote.observation_space.bounded_below  # type: ignore[attr-defined]
        assert bounded.tolist() == [True, False, True, False]
    local.close()


def test_remote_cartpole_replays_a_local_episode_step_for_step(cartpole: RunningServer) -> None:
    local = gymnasium.make("CartPole-v1")
    actions = spaces.Discrete(2, seed=7)
    with ecotone.gym.make(cartpole.url) as remote:
        obs_r, info_r = remote.reset(seed=42)
        obs_l, info_l = local.reset(seed=42)
        assert obs_r.dtype == obs_l.dtype and np.array_equal(obs_r, obs_l)
        assert info_r == info_l
        steps = 0
        while True:
            action = actions.sample()
            obs_r, rew_r, term_r, trunc_r, info_r = remote.step(action)
            obs_l, rew_l, term_l, trunc_l, info_l = local.step(action)
            steps += 1
            assert np.allclose(obs_r, obs_l, rtol=0, atol=0), steps
            assert (rew_r, term_r, trunc_r, info_r) == (rew_l, term_l, trunc_l, info_l)
            assert isinstance(rew_r, float) and obs_r.dtype == np.float32
            if term_l or trunc_l:
                break
        assert steps > 5 and term_r
    local.close()


def test_check_env_passes_on_the_remote_cartpole(cartpole: RunningServer) -> None:
    with ecotone.gym.make(cartpole.url) as remote:
        caught = check_env_warnings(remote.unwrapped)
    # CartPole's own observation space has infinite bounds; nothing else may be reported
    assert caught and all("infinity" in w for w in caught), caught


def test_the_remote_state_holds_the_episode_and_the_last_observation(
    cartpole: RunningServer,
) -> None:
    with ecotone.connect(cartpole.url) as client:
        first = client.reset(seed=1, episode_id="ep-1")
        assert first.reward is None and not first.done
        result = client.step({"action": 1})
        state = client.state()
        assert state["episode_id"] == "ep-1" and state["step_count"] == 1
        assert state["obs"] == result.observation["obs"]
        assert result.reward == 1.0 and result.observation["info"] == {}


def test_reset_options_reach_gymnasium_reset(cartpole: RunningServer) -> None:
    local = gymnasium.make("CartPole-v1")
    with ecotone.gym.make(cartpole.url) as remote:
        obs_r, _ = remote.reset(seed=3, options={"low": -0.001, "high": 0.001})
    obs_l, _ = local.reset(seed=3, options={"low": -0.001, "high": 0.001})
    assert np.array_equal(obs_r, obs_l)
    assert np.all(np.abs(obs_r) <= 0.001)
    local.close()


def test_an_out_of_range_discrete_action_is_an_invalid_action_naming_the_field(
    cartpole: RunningServer,
) -> None:
    with ecotone.connect(cartpole.url) as client:
        client.reset(seed=0)
        with pytest.raises(ecotone.InvalidActionError) as caught:
            client.step({"action": 2})
        assert caught.value.field == "action"
        assert "<= 1" in caught.value.message
        assert client.step({"action": 0}).observation["obs"]  # the session goes on
    with ecotone.gym.make(cartpole.url) as remote:
        remote.reset(seed=0)
        with pytest.raises(ecotone.InvalidActionError) as caught:
            remote.step(-1)
        assert caught.value.field == "action"


def test_make_kwargs_come_from_the_name_query_with_json_values() -> None:
    name = "gymnasium:FrozenLake-v1?is_slippery=false&map_name=8x8"
    assert parse_name(name) == ("FrozenLake-v1", {"is_slippery": False, "map_name": "8x8"})
    assert parse_name("gymnasium:X-v0?n=3&d=%5B1%2C2%5D&s=null") == (
        "X-v0",
        {"n": 3, "d": [1, 2], "s": None},
    )
    with pytest.raises(GymnasiumBridgeError, match="given twice"):
        parse_name("gymnasium:X-v0?n=1&n=2")
    with pytest.raises(GymnasiumBridgeError, match="names no Gymnasium env"):
        parse_name("gymnasium:?n=1")


def test_frozenlake_not_slippery_walks_the_same_path_as_a_local_one() -> None:
    # 8x8 map: right along the top row, then down the last column, is free of holes
    name = "gymnasium:FrozenLake-v1?is_slippery=false&map_name=8x8"
    local = gymnasium.make("FrozenLake-v1", is_slippery=False, map_name="8x8")
    with run_server(name, transport="tcp") as server:
        with ecotone.gym.make(server.url) as remote:
            assert remote.observation_space == local.observation_space == spaces.Discrete(64)
            assert remote.action_space == local.action_space
            assert remote.reset(seed=5) == local.reset(seed=5)
            seen = []
            for action in [2] * 7 + [1] * 7:
                step_r, step_l = remote.step(action), local.step(action)
                assert step_r == step_l
                assert isinstance(step_r[0], np.int64)
                seen.append(int(step_r[0]))
    assert seen == [1, 2, 3, 4, 5, 6, 7, 15, 23, 31, 39, 47, 55, 63]
    assert step_r[1:4] == (1.0, True, False)  # reached the goal: terminated
    local.close()


def test_truncation_from_a_query_max_episode_steps_is_kept_apart_from_termination() -> None:
    with ecotone.connect("inproc://gymnasium:CartPole-v1?max_episode_steps=3") as client:
        client.reset(seed=0)
        results = [client.step({"action": i % 2}) for i in range(3)]
        assert [(r.done, r.truncated) for r in results] == [(False, False)] * 2 + [(False, True)]
        with pytest.raises(ecotone.ServerError) as caught:
            client.step({"action": 0})
        assert caught.value.code == "episode_done"


@pytest.mark.parametrize(
    "gym_id", ["Blackjack-v1", "Pendulum-v1", "MountainCarContinuous-v0", "Acrobot-v1"]
)
def test_spaces_of_builtin_envs_survive_the_round_trip(gym_id: str) -> None:
    local = gymnasium.make(gym_id)
    with ecotone.gym.make(f"inproc://gymnasium:{gym_id}") as remote:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        assert jsonable(remote.reset(seed=11)) == jsonable(local.reset(seed=11))
        remote.action_space.seed(0)
        action = remote.action_space.sample()
        assert jsonable(remote.step(action)) == jsonable(local.step(action))
    local.close()


def test_dict_tuple_and_text_spaces_are_served_and_rebuilt(mixed: RunningServer) -> None:
    local = gymnasium.make(MIXED_ID)
    with ecotone.gym.make(mixed.url) as remote:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        obs_r, info_r = remote.reset(seed=9, options={"level": 2})
        obs_l, info_l = local.reset(seed=9, options={"level": 2})
        assert jsonable(obs_r) == jsonable(obs_l) and obs_r in remote.observation_space
        assert info_r == {"t": 0, "options": {"level": 2}} == jsonable(info_l)
        assert obs_r["position"].dtype == np.float32 and obs_r["flags"].dtype == np.int8
        assert isinstance(obs_r["pair"], tuple) and isinstance(obs_r["word"], str)
        remote.action_space.seed(4)
        for _ in range(5):
            action = remote.action_space.sample()
            step_r, step_l = remote.step(action), local.step(action)
            assert jsonable(step_r) == jsonable(step_l)
        assert step_r[2] is True and isinstance(step_r[4]["force"], list)
    local.close()


def test_check_env_passes_on_a_remote_dict_space_env_as_on_the_local_one(
    mixed: RunningServer,
) -> None:
    local = gymnasium.make(MIXED_ID)
    with ecotone.gym.make(mixed.url) as remote:
        assert check_env_warnings(remote.unwrapped) == check_env_warnings(local.unwrapped)
    local.close()


def test_box_actions_out_of_bounds_or_shape_are_invalid_actions_naming_the_item(
    mixed: RunningServer,
) -> None:
    good = {"move": 1, "force": [0.5, 1.5], "fire-mode": 0, "say": "x-y"}
    with ecotone.connect(mixed.url) as client:
        client.reset(seed=0)
        for bad, field in [
            ({**good, "force": [0.5, 2.5]}, "action.force.1"),
            ({**good, "force": [1.5, 1.0]}, "action.force.0"),  # each item has its own bounds
            ({**good, "force": [0.5, -0.5]}, "action.force.1"),
            ({**good, "force": [0.5]}, "action.force"),
            ({**good, "move": 4}, "action.move"),
            ({**good, "fire-mode": 2}, "action.fire-mode"),
            ({**good, "extra": 1}, "action.extra"),
            ({**good, "say": "xz"}, "action.say"),
            ({**good, "say": "xy\n"}, "action.say"),
            ({**good, "say": "xyxy"}, "action.say"),
        ]:
            with pytest.raises(ecotone.InvalidActionError) as caught:
                client.step({"action": bad})
            assert caught.value.field == field, (bad, caught.value)
        assert client.step({"action": good}).reward == 1.0 - 2.0 + 0


def test_sampled_actions_are_valid_and_follow_the_rng() -> None:
    env_cls = env_class(f"gymnasium:{MIXED_ID}")
    env = env_cls()
    try:
        rng_a, rng_b = random.Random(1), random.Random(1)
        for _ in range(20):
            action = env.sample_action(rng_a)
            assert action == env.sample_action(rng_b)
            wire = msgspec.json.encode(action)
            assert msgspec.json.decode(wire, type=env_cls.action_type) == action
    finally:
        env.close()


def test_a_space_without_a_schema_is_a_clear_error_when_the_env_is_resolved() -> None:
    registry = Registry.discover()
    with pytest.raises(GymnasiumBridgeError, match=r"observation space is a Sequence space"):
        registry.env_spec(f"gymnasium:{SEQUENCE_ID}")
    with pytest.raises(GymnasiumBridgeError, match=r"gymnasium\.make\('NoSuchEnv-v0'\) failed"):
        registry.env_spec("gymnasium:NoSuchEnv-v0")
    with pytest.raises(GymnasiumBridgeError, match=r"failed: TypeError"):
        registry.env_spec("gymnasium:CartPole-v1?no_such_argument=1")


def test_classic_control_envs_run_inline_and_custom_ones_in_threads() -> None:
    registry = Registry.discover()
    assert registry.env_spec("gymnasium:CartPole-v1").inline
    assert not registry.env_spec(f"gymnasium:{MIXED_ID}").inline


# --- native ecotone envs as gymnasium.Env --------------------------------------------------


BOUND = ecotone.gym.INT_BOUND


def test_counter_is_a_gymnasium_env_with_documented_int_bounds() -> None:
    unbounded = spaces.Box(-BOUND, BOUND, (), np.int64)
    with ecotone.gym.make("inproc://counter") as env:
        assert env.action_space == unbounded and env.observation_space == unbounded
        obs, info = env.reset(seed=0, options={"start": 2, "target": 5})
        assert (obs, info) == (2, {}) and obs.dtype == np.int64
        obs, reward, terminated, truncated, _ = env.step(np.int64(3))
        assert (int(obs), reward, terminated, truncated) == (5, 3.0, True, False)
        assert check_env_warnings(env.unwrapped) == []


def test_counters_observation_stays_in_its_space_under_random_play() -> None:
    """Random deltas of +-2**53 summed: the count saturates at the space's bounds."""
    with ecotone.gym.make("inproc://counter") as env:
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        for _ in range(3000):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs), obs
            assert not (terminated or truncated)
        for delta in (BOUND, BOUND, -BOUND, -BOUND, -BOUND, -BOUND):
            obs, reward, *_ = env.step(np.int64(delta))
            assert env.observation_space.contains(obs) and reward == float(delta)
        assert int(obs) == -BOUND
    with pytest.raises(ValueError, match="start must be within"):
        CounterEnv().reset(start=BOUND + 1)


def test_native_fields_map_to_discrete_box_and_dict_spaces() -> None:
    with run_server("steer", plugins=[SteerPlugin()]) as server:
        with ecotone.gym.make(server.url) as env:
            assert env.action_space == spaces.Dict(
                {
                    "direction": spaces.Discrete(4),
                    "speed": spaces.Discrete(4),
                    "boost": spaces.Discrete(2),
                    "aim": spaces.Box(-np.inf, np.inf, (2,), np.float64),
                }
            )
            assert env.observation_space == spaces.Box(-BOUND, BOUND, (2,), np.int64)
            env.reset()
            props = env.env_info.action_schema["properties"]
            east = props["direction"]["enum"].index("e")  # Discrete index into the schema's enum
            action = {"direction": east, "speed": 3, "boost": 1, "aim": np.array([0.5, 0.25])}
            obs, reward, *_ = env.step(action)  # east, 3 doubled
            assert obs.tolist() == [6, 0] and reward == 0.75


BUNDLED = ["counter", "echo", "gridworld", "wordle", "chess", "coding"]


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_env_passes_gymnasiums_own_checker(name: str) -> None:
    with ecotone.gym.make(f"inproc://{name}") as env:
        check_env(env.unwrapped, skip_render_check=True)
        env.action_space.seed(0)
        obs, _ = env.reset(seed=0)
        for _ in range(5):  # random actions: wordle and chess reject most of them
            assert obs in env.observation_space
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()


class Item(msgspec.Struct, kw_only=True):
    name: str
    count: int


class RecordAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    note: Annotated[str, msgspec.Meta(min_length=1, max_length=8)]
    limit: int | None = None


class RecordObservation(ecotone.Observation, kw_only=True):
    note: str = ""
    limit: int | None = None
    tags: list[str] = []
    items: list[Item] = []
    either: int | str = 0


class RecordEnv(ecotone.Environment[RecordAction, RecordObservation, ecotone.State]):
    name = "record"
    inline = True

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> RecordObservation:
        self._state = ecotone.State(episode_id=episode_id)
        return RecordObservation()

    def step(self, action: RecordAction) -> RecordObservation:
        if action.note == "bad":
            raise ecotone.InvalidAction("'bad' is not allowed", field="note", allowed=["ok"])
        self._state.step_count += 1
        words = action.note.split()
        return RecordObservation(
            note=action.note,
            limit=action.limit,
            tags=words,
            items=[Item(name=w, count=len(w)) for w in words],
            either=action.note if action.limit is None else action.limit,
            reward=1.0,
        )

    def state(self) -> ecotone.State:
        return self._state


class FreeDictObservation(ecotone.Observation, kw_only=True):
    extra: dict[str, int] = {}


class FreeDictEnv(ecotone.Environment[RecordAction, FreeDictObservation, ecotone.State]):
    name = "free-dict"
    inline = True

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> FreeDictObservation:
        return FreeDictObservation()

    def step(self, action: RecordAction) -> FreeDictObservation:
        return FreeDictObservation(extra={action.note: 1})

    def state(self) -> ecotone.State:
        return ecotone.State()


class RecordPlugin:
    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return {"record": RecordEnv, "free-dict": FreeDictEnv}


def test_strings_optionals_unions_and_lists_map_to_text_oneof_and_sequence() -> None:
    with run_server("record", plugins=[RecordPlugin()]) as server:
        with ecotone.gym.make(server.url) as env:
            text = ecotone.gym.FreeText(ecotone.gym.TEXT_MAX_LENGTH)
            integer = spaces.Box(-BOUND, BOUND, (), np.int64)
            assert env.action_space == spaces.Dict(
                {
                    "note": ecotone.gym.FreeText(8, min_length=1),
                    "limit": spaces.OneOf([integer, spaces.Discrete(1)]),
                }
            )
            assert env.observation_space == spaces.Dict(
                {
                    "note": text,
                    "limit": spaces.OneOf([integer, spaces.Discrete(1)]),
                    "tags": spaces.Sequence(text),
                    "items": spaces.Sequence(spaces.Dict({"name": text, "count": integer})),
                    "either": spaces.OneOf([integer, text]),
                }
            )
            assert isinstance(env.action_space, spaces.Dict)
            assert "é ü" in text and "x" * 9 not in env.action_space["note"]
            env.reset(seed=0)
            obs, reward, *_ = env.step({"note": "a bc", "limit": (0, np.int64(3))})
            assert obs in env.observation_space and reward == 1.0
            assert obs["tags"] == ("a", "bc") and obs["limit"] == (0, 3)
            assert obs["items"][1] == {"name": "bc", "count": 2}
            assert obs["either"] == (0, 3)
            obs, *_ = env.step({"note": "é", "limit": (1, np.int64(0))})
            assert obs["limit"] == (1, 0) and obs["either"] == (1, "é")
            assert obs in env.observation_space


def test_a_rejected_action_is_a_step_that_changes_nothing_or_raises_when_asked() -> None:
    with run_server("record", plugins=[RecordPlugin()]) as server:
        with ecotone.gym.make(server.url, invalid_action_reward=-1.0) as env:
            env.reset(seed=0)
            first, *_ = env.step({"note": "ok go", "limit": (1, 0)})
            obs, reward, terminated, truncated, info = env.step({"note": "bad", "limit": (1, 0)})
            assert obs == first and obs is not first
            assert (reward, terminated, truncated) == (-1.0, False, False)
            assert info["invalid_action"] == {
                "reason": "'bad' is not allowed",
                "field": "note",
                "details": {
                    "field": "note",
                    "path": "$.note",
                    "reason": "'bad' is not allowed",
                    "allowed": ["ok"],
                },
            }
            assert env.client.state()["step_count"] == 1  # the server did not count it
        with ecotone.gym.make(server.url, invalid_action="raise") as env:
            env.reset(seed=0)
            with pytest.raises(ecotone.InvalidActionError, match="'bad' is not allowed"):
                env.step({"note": "bad", "limit": (1, 0)})
            assert env.spec is not None
            again = env.spec.make()
            remote = again.unwrapped
            assert isinstance(remote, ecotone.gym.RemoteEnv) and remote.invalid_action == "raise"
            again.close()


def test_a_free_form_dict_is_an_error_naming_the_field() -> None:
    with run_server("free-dict", plugins=[RecordPlugin()]) as server:
        with pytest.raises(
            ecotone.gym.SpaceError, match=r"observation field `extra` \(an object with free-form"
        ):
            ecotone.gym.make(server.url)


def test_an_integer_beyond_int64_is_a_space_error_naming_the_field() -> None:
    # async_counter: counter's count, without counter's bound (+-2**53)
    with run_server("async_counter") as server, ecotone.gym.make(server.url) as env:
        env.reset(seed=0)
        env.step(np.int64(2**62))
        with pytest.raises(ecotone.gym.SpaceError, match=r"field `count`: 9223372036854775808"):
            env.step(np.int64(2**62))


def test_unseeded_resets_go_on_reproducibly_from_the_last_seed() -> None:
    with ecotone.gym.make("inproc://gridworld") as env:
        runs = []
        for _ in range(2):
            first, _ = env.reset(seed=7)
            runs.append([first["grid"]] + [env.reset()[0]["grid"] for _ in range(3)])
        assert runs[0] == runs[1] and len(set(runs[0])) > 1


# --- the command line, and life without gymnasium ------------------------------------------


def test_serve_gymnasium_cartpole_from_the_command_line(tmp_path: Path) -> None:
    with ecotone_serving("gymnasium:CartPole-v1", "--port", "0", cwd=tmp_path) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"at (ws://127\.0\.0\.1:\d+)$", line.strip())
        assert match, line
        with ecotone.gym.make(match[1]) as env:
            assert env.observation_space == gymnasium.make("CartPole-v1").observation_space
            env.reset(seed=0)
            assert env.step(1)[1] == 1.0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_serving_an_unknown_gymnasium_env_exits_2_saying_why(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "gymnasium:NoSuchEnv-v0", "--port", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert "gymnasium.make('NoSuchEnv-v0') failed: NameNotFound" in done.stderr
    assert "Traceback" not in done.stderr


def test_ecotone_works_without_gymnasium_and_says_what_to_install(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["gymnasium"] = None  # as if not installed: importing it fails
        from ecotone.kernel import Registry
        registry = Registry.discover()
        assert "ecotone.plugins.gymnasium" in sys.modules
        registry.env_spec("counter")
        try:
            registry.env_spec("gymnasium:CartPole-v1")
        except ValueError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "needs gymnasium and numpy: install the extra, ecotone[gymnasium]" in done.stdout
