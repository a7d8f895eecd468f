"""Rubrics: reward functions attached to an env (`ecotone.rubrics`), applied by the kernel to
every step of real served sessions: weighted sums, gates, sequences, delayed trajectory
rewards with discounting, async judges on every kind of env, and rubrics that fail."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

import ecotone
from ecotone.kernel.envspec import EnvDefinitionError, EnvSpec
from ecotone.plugins.counter import CounterAction, CounterEnv, CounterObservation
from ecotone.rubrics import Fn, Gate, Reward, Rubric, Sequential, Trajectory, Turn, WeightedSum
from tests.conftest import ecotone_serving, run_server, wait_until
from tests.envs import AsyncCounterEnv

# --- rubrics for a counter: its reward is the delta; done once count >= target -------------


def positive(action: CounterAction, obs: CounterObservation) -> float:
    return float(action.delta > 0)


def even(action: CounterAction, obs: CounterObservation) -> float:
    return float(obs.count % 2 == 0)


def episode_length(turns: Sequence[Turn]) -> float:
    return 10.0 / len(turns)


class Counted:
    """A rubric function that counts its calls (to see what a gate skips)."""

    calls: ClassVar[int] = 0

    def __call__(self, action: CounterAction, obs: CounterObservation) -> float:
        Counted.calls += 1
        return 5.0


def scored(rubric: Rubric, base: type = CounterEnv, label: str = "scored") -> type:
    return type(label, (base,), {"name": label, "rubric": rubric})


class Plugin:
    def __init__(self, **envs: type) -> None:
        self.envs = envs

    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return self.envs


def test_a_weighted_sum_replaces_the_reward_and_names_its_parts() -> None:
    rubric = WeightedSum({"env": (Reward(), 1.0), "positive": (Fn(positive), 0.5)})
    with run_server("scored", plugins=[Plugin(scored=scored(rubric))]) as server:
        with ecotone.connect(server.url) as env:
            assert env.reset(seed=0).reward is None  # a reset is not scored
            step = env.step({"delta": 3})
            assert step.reward == 3.5
            assert step.observation["metadata"]["rewards"] == {
                "env": 3.0,
                "positive": 1.0,
                "total": 3.5,
            }
            assert env.step({"delta": -2}).reward == -2.0


def test_a_gate_zeroes_the_rest_without_evaluating_it_and_a_sequence_stops_at_zero() -> None:
    Counted.calls = 0
    gated = Gate(Fn(positive), Fn(Counted(), name="bonus"), name="gated")
    chain = Sequential(Fn(positive, name="moving"), Fn(even), Reward(), name="chain")
    rubric = WeightedSum([(gated, 1.0), (chain, 1.0)])
    with run_server("scored", plugins=[Plugin(scored=scored(rubric))]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0)
            first = env.step({"delta": -1})  # not positive: the gate is shut, the chain stops
            assert first.reward == 0.0 and Counted.calls == 0
            assert first.observation["metadata"]["rewards"] == {
                "positive": 0.0,
                "gated": 0.0,
                "moving": 0.0,
                "chain": 0.0,
                "total": 0.0,
            }
            second = env.step({"delta": 3})  # count 2: positive and even
            assert second.reward == 5.0 + 3.0 and Counted.calls == 1
            parts = second.observation["metadata"]["rewards"]
            assert parts["bonus"] == 5.0 and parts["env"] == 3.0 and parts["even"] == 1.0
            assert env.step({"delta": 1}).reward == 5.0  # count 3 is odd: the chain gives 0


def test_a_trajectory_rubric_scores_the_end_and_credits_every_step_discounted() -> None:
    rubric = WeightedSum(
        {"env": (Reward(), 1.0), "quick": (Trajectory(episode_length, gamma=0.5), 1.0)}
    )
    with run_server("scored", plugins=[Plugin(scored=scored(rubric))]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0, target=3)
            steps = [env.step({"delta": 1}) for _ in range(3)]
            assert [s.done for s in steps] == [False, False, True]
            assert [s.reward for s in steps] == [1.0, 1.0, 1.0 + 10 / 3]
            assert "discounted" not in steps[0].observation["metadata"]
            assert steps[-1].observation["metadata"]["discounted"] == {
                "quick": pytest.approx([10 / 3 * 0.25, 10 / 3 * 0.5, 10 / 3])
            }
            env.reset(seed=0, target=1)  # a new episode: its own history
            assert env.step({"delta": 5}).reward == 5.0 + 10.0


async def judge(action: CounterAction, obs: CounterObservation) -> float:
    """An async judge (an LLM's stand-in): it really suspends."""
    await anyio.sleep(0.001)
    return 0.25 if obs.count > 2 else 0.0


class ThreadCounter(CounterEnv):
    inline = False


@pytest.mark.parametrize(
    ("base", "mode"), [(CounterEnv, "await"), (ThreadCounter, "thread"), (AsyncCounterEnv, "await")]
)
def test_an_async_judge_scores_inline_thread_and_async_envs(base: type, mode: str) -> None:
    rubric = WeightedSum({"env": (Reward(), 1.0), "judge": (Fn(judge), 1.0)})
    env_class = scored(rubric, base)
    spec = EnvSpec.from_class(env_class, "scored")
    assert spec.mode.value == mode  # a thread env stays one: its worker awaits the judge
    with run_server("scored", plugins=[Plugin(scored=env_class)]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0)
            assert env.step({"delta": 2}).reward == 2.0
            assert env.step({"delta": 2}).reward == 2.25
            assert env.state()["count"] == 4


def test_a_rubric_that_raises_is_an_env_error_naming_it_and_the_session_goes_on() -> None:
    def picky(action: CounterAction, obs: CounterObservation) -> float:
        if action.delta == 13:
            raise ValueError("unlucky")
        return 1.0

    def sloppy(action: CounterAction, obs: CounterObservation) -> Any:
        return "great" if action.delta == 7 else 0.0

    rubric = WeightedSum({"picky": (Fn(picky), 1.0), "sloppy": (Fn(sloppy), 1.0)})
    with run_server("scored", plugins=[Plugin(scored=scored(rubric))]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0)
            with pytest.raises(ecotone.EnvError, match="rubric 'picky' raised ValueError: unlucky"):
                env.step({"delta": 13})
            with pytest.raises(ecotone.EnvError, match="rubric 'sloppy' returned 'great'"):
                env.step({"delta": 7})
            assert env.step({"delta": 1}).reward == 1.0  # the session goes on


def test_a_rubric_is_checked_when_the_env_is_registered() -> None:
    with pytest.raises(EnvDefinitionError, match=r"a rubric is an ecotone\.rubrics\.Rubric"):
        EnvSpec.from_class(scored(positive), "bad")  # type: ignore[arg-type]
    twice = WeightedSum([(Fn(positive), 1.0), (Fn(positive), 1.0)])
    with pytest.raises(EnvDefinitionError, match="two parts of the rubric are named 'positive'"):
        EnvSpec.from_class(scored(twice), "bad")
    with pytest.raises(TypeError, match="Fn needs a callable"):
        Fn(3)  # type: ignore[arg-type]


def test_serve_attaches_a_rubric_from_a_module_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "my_rubric.py").write_text(
        textwrap.dedent(
            """
            from ecotone.rubrics import Fn, Reward, WeightedSum

            def small(action, obs):
                return 1.0 if abs(action.delta) < 3 else -1.0

            rubric = WeightedSum({"env": (Reward(), 0.0), "small": (Fn(small), 2.0)})
            """
        )
    )
    with ecotone_serving(
        "counter", "--port", "0", "--rubric", "my_rubric:rubric", cwd=tmp_path
    ) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = line.strip().rsplit(" at ", 1)[1]
        with ecotone.connect(url) as env:
            env.reset(seed=0)
            assert env.step({"delta": 1}).reward == 2.0
            assert env.step({"delta": 5}).reward == -2.0
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--rubric", "my_rubric:nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "rubric 'my_rubric:nope': 'my_rubric' has no 'nope'" in done.stderr


def test_an_async_judge_on_a_thread_env_works_in_the_blocking_inproc_channel() -> None:
    from ecotone.kernel import Engine
    from ecotone.transports.inproc.client import InprocSyncChannel

    rubric = WeightedSum({"env": (Reward(), 1.0), "judge": (Fn(judge), 1.0)})
    engine = Engine(EnvSpec.from_class(scored(rubric, ThreadCounter), "scored"))
    connection = ecotone.Connection("inproc://scored", channel=InprocSyncChannel(engine, "json"))
    with connection:
        env = connection.open()
        env.reset(seed=0)
        assert [env.step({"delta": 2}).reward for _ in range(2)] == [2.0, 2.25]


class HangingCounter(CounterEnv):
    """A thread env whose step of 99 outlives its deadline; it records what ran when."""

    inline = False
    call_timeout = 0.3
    events: ClassVar[list[str]] = []

    def step(self, action: CounterAction) -> CounterObservation:
        if action.delta == 99:
            HangingCounter.events.append("step start")
            time.sleep(1.0)
            HangingCounter.events.append("step end")
        return super().step(action)

    def close(self) -> None:
        HangingCounter.events.append("close")


def test_a_timed_out_step_of_a_scored_thread_env_is_the_runners_to_abandon() -> None:
    HangingCounter.events = []
    rubric = WeightedSum({"env": (Reward(), 1.0), "judge": (Fn(judge), 1.0)})
    with run_server("scored", plugins=[Plugin(scored=scored(rubric, HangingCounter))]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0)
            with pytest.raises(ecotone.ServerError, match=r"did not end within 0\.3") as caught:
                env.step({"delta": 99})
            assert caught.value.code == "timeout"
            assert wait_until(lambda: "close" in HangingCounter.events, 5)
            # the set-aside env is closed only once its step is over, never under it
            assert HangingCounter.events == ["step start", "step end", "close"]
            env.reset(seed=0)  # a fresh instance
            assert env.step({"delta": 3}).reward == 3.25


def test_a_rubric_that_fails_on_the_last_step_still_ends_the_episode() -> None:
    def picky(action: CounterAction, obs: CounterObservation) -> float:
        if obs.done:
            raise ValueError("no reward for finishing")
        return 1.0

    with run_server("scored", plugins=[Plugin(scored=scored(Fn(picky)))]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=0, target=2)
            assert env.step({"delta": 1}).reward == 1.0
            with pytest.raises(ecotone.EnvError, match="rubric 'picky' raised ValueError"):
                env.step({"delta": 1})  # the env's step ended the episode
            with pytest.raises(ecotone.ServerError) as after:
                env.step({"delta": 1})
            assert after.value.code == "episode_done"
