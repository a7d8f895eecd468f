"""`ecotone.trl.environment_factory`, the class TRL's GRPOTrainer takes as its
`environment_factory`: what TRL sees of it (here, without TRL), and the real `trl` package
training two steps on the CPU against an ecotone server (in its own venv, TRL_PYTHON; see
tests/trl/)."""

from __future__ import annotations

import gc
import inspect
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Literal, get_type_hints

import attrs
import pytest

import ecotone
import ecotone.trl
from ecotone.kernel.config import AuthConfig
from ecotone.specs import MsgpackCodec
from ecotone.trl.factory import FactoryOptions, FactorySettings
from tests.conftest import run_server, wait_until

DRIVER = Path(__file__).parent / "trl" / "grpo_driver.py"
ASYNC_DRIVER = Path(__file__).parent / "trl" / "async_rollout_driver.py"
ROOT = Path(__file__).resolve().parent.parent
TRL_PYTHON_VAR = "TRL_PYTHON"


def public_methods(cls: type) -> list[str]:
    """What TRL exposes to the model: plain functions on the class, `_` names, `reset` and
    `get_reward` left out (`inspect.getmembers(type(env), inspect.isfunction)`)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]


def test_the_factory_exposes_exactly_the_action_typed_and_documented() -> None:
    with run_server("wordle") as server:
        factory = ecotone.trl.environment_factory(server.url)
        assert public_methods(factory) == ["guess"]
        # Every public name, as docs/llm-training.md lists them: `env_info` is no method.
        public = {name for name in vars(factory) if not name.startswith("_")}
        assert public == {"guess", "reset", "get_reward", "env_info"}
        guess = factory.guess  # type: ignore[attr-defined]
        assert str(inspect.signature(guess)) == "(self, guess: str) -> str"
        assert get_type_hints(guess) == {"guess": str, "return": str}
        assert guess.__doc__.startswith("Guess")  # the Action's docstring
        assert "\n\nArgs:\n    guess: " in guess.__doc__


def test_an_instance_plays_the_row_task_and_reports_the_episode_reward() -> None:
    with run_server("wordle") as server:
        factory = ecotone.trl.environment_factory(server.url)
        first, second = factory(), factory()
        prompt = first.reset(prompt=[{"role": "user", "content": "x"}], task="crane", extra=1)
        assert "6 guesses" in prompt
        with pytest.raises(ValueError, match="'zzzzz' is not in the word list"):
            first.guess(guess="zzzzz")  # TRL returns this to the model; the episode goes on
        assert "slate" in first.guess(guess="slate").lower()
        assert first.guess("crane").endswith("(the episode is over)")
        with pytest.raises(RuntimeError, match="the episode is over"):
            first.guess("crane")
        assert first.get_reward() == pytest.approx(0.2 + 1.5)
        second.reset(split="test", index=0)
        assert second.get_reward() == 0.0
        assert len(server.recorder.open_sessions) == 2  # one connection, a session each
        first.reset(task="slate")  # reset again: the same session, a new episode
        assert len(server.recorder.open_sessions) == 2
        del first
        gc.collect()
        second.reset(seed=1)  # a dropped instance's session goes at the next reset
        assert wait_until(lambda: len(server.recorder.open_sessions) == 1)


def test_schemas_become_hints_transformers_reads() -> None:
    from ecotone.trl.signature import make_method

    schema = {
        "properties": {
            "move": {"enum": ["up", "down"]},
            "speed": {"type": "integer", "minimum": 0, "maximum": 3, "description": "how fast"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "path": {"type": "array", "items": {"type": "integer"}},
            "metadata": {"type": "object"},
        },
        "required": ["move", "speed", "path"],
    }
    seen: list[Any] = []

    def body(self: Any, args: dict[str, Any]) -> str:
        seen.append(args)
        return "moved"

    method = make_method("go", "Move.", schema, body, skip=frozenset({"metadata"}))
    hints = get_type_hints(method)
    assert hints["move"] == Literal["up", "down"] and hints["speed"] is int
    assert hints["path"] == list[int] and hints["note"] == str | None
    assert "speed: how fast (>= 0, <= 3)" in (method.__doc__ or "")
    method(None, "up", 2, [1])
    assert seen == [{"move": "up", "speed": 2, "path": [1]}]


def test_an_env_name_is_played_in_process() -> None:
    factory = ecotone.trl.environment_factory("counter", reset_keys=["target"])
    env = factory()
    env.reset(seed=0, target=3)
    assert json.loads(env.delta(delta=2)) == {"count": 2}
    assert env.delta(delta=1).endswith("(the episode is over)")
    assert env.get_reward() == 3.0


@pytest.fixture(scope="session")
def trl_python() -> str:
    path = os.environ.get(TRL_PYTHON_VAR, "")
    if not path:
        reason = (
            f"{TRL_PYTHON_VAR} is not set: point it at the python of a venv with trl (`make "
            "pytest` sets it to .venv-trl/bin/python)"
        )
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def test_grpo_trains_on_an_ecotone_server_with_the_real_trl(trl_python: str) -> None:
    with run_server("wordle", transport="http") as server:
        done = subprocess.run(
            [trl_python, str(DRIVER), server.url],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        steps = list(server.recorder.steps)
        episodes = list(server.recorder.episodes)
    assert report["global_step"] == 2
    assert report["public"] == ["get_reward", "guess", "reset"]
    assert report["tools"] == ["guess"]
    # TRL's own schema extraction (transformers' get_json_schema) agrees with the action schema
    parameters = report["tool_schema"]["function"]["parameters"]
    assert parameters["required"] == ["guess"]
    assert {k: v["type"] for k, v in parameters["properties"].items()} == {"guess": "string"}
    # 2 steps x 4 rollouts, each: a refused word (not a step), slate, then crane, solved
    assert len(episodes) == 8
    guesses = [action.guess for _, _, action, _ in steps]
    assert sorted(guesses) == ["crane"] * 8 + ["slate"] * 8
    assert all(obs.solved for _, _, action, obs in steps if action.guess == "crane")
    assert report["rewards"] == [pytest.approx(1.7), pytest.approx(1.7)]
    # the refused word came back to the model as a tool error: one of three calls failed
    assert report["tool_failures"] == [pytest.approx(1 / 3), pytest.approx(1 / 3)]


def test_async_grpos_rollout_worker_plays_through_the_factory_against_a_token_endpoint(
    trl_python: str,
) -> None:
    """TRL's AsyncRolloutWorker (async GRPO's rollout loop, in the spawned process it starts,
    the factory pickled into it) against a local endpoint that speaks vLLM's
    /v1/completions with token ids (tests/trl/async_rollout_driver.py says what is left
    out: the trainer's vLLM weight sync). Its training rows hold the endpoint's ids and
    logprobs where the mask is 1, the env's turns where it is 0."""
    from tests.token_server import logprob

    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH", "")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}  # this tree's ecotone
    probe = subprocess.run([trl_python, "-c", "import aiohttp"], env=env, capture_output=True)
    if probe.returncode != 0:
        reason = "the TRL venv has no aiohttp (tests/trl/requirements.txt: `make` installs it)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with run_server("wordle") as server:
        done = subprocess.run(
            [trl_python, str(ASYNC_DRIVER), server.url],
            capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        guesses = [action.guess for _, _, action, _ in list(server.recorder.steps)]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["paths"] == ["/v1/completions"] and report["prompts_are_ids"]
    assert report["asked"] == [[True, 0]]  # return_token_ids, logprobs=0
    samples, written = report["samples"], report["written"]
    assert len(samples) == 4 and {"slate", "crane"} == set(guesses)
    for sample, decoded in zip(samples, report["decoded"], strict=True):
        assert sample["reward"] == pytest.approx(0.2 + 1.5) and sample["advantage"] == 0.0
        roles = [m["role"] for m in sample["completion"]]
        assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
        ids, mask, logprobs = (
            sample["input_ids"],
            sample["completion_mask"],
            sample["old_log_probs"],
        )
        runs: list[list[int]] = []  # the stretches of mask 1: one per model turn
        for i, m in enumerate(mask):
            if m and (not runs or runs[-1][-1] != i - 1):
                runs.append([])
            if m:
                runs[-1].append(i)
        assert len(runs) == 3
        for run in runs:
            assert [ids[i] for i in run] in written  # the endpoint's ids, as it wrote them
            expected = [logprob(j, ids[i]) for j, i in enumerate(run)]
            assert [logprobs[i] for i in run] == pytest.approx(expected)
        assert "2. CRANE  G G G G G" in decoded  # the env's turn, masked 0
        env_part = [ids[i] for i in range(runs[0][-1] + 1, runs[1][0])]
        assert env_part and not any(mask[runs[0][-1] + 1 : runs[1][0]])


def test_env_tools_become_methods_beside_the_action() -> None:
    factory = ecotone.trl.environment_factory("echo")
    assert public_methods(factory) == ["message", "shout"]
    assert get_type_hints(factory.shout) == {"message": str, "return": str}  # type: ignore[attr-defined]
    assert factory.shout.__doc__.startswith("Return the message in capitals.")  # type: ignore[attr-defined]
    env = factory()
    env.reset(seed=0)
    assert env.shout(message="hi") == "HI"
    with pytest.raises(RuntimeError, match="argument `message` must be a string"):
        env.shout(message=3)
    only_tools = ecotone.trl.environment_factory("echo", action=False)
    assert public_methods(only_tools) == ["shout"]


def test_the_factorys_options_each_do_what_they_say_and_an_unknown_one_is_a_type_error() -> None:
    keys = FactoryOptions.__required_keys__ | FactoryOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(FactorySettings)}
    with pytest.raises(
        TypeError, match=r"^environment_factory\(\) got unexpected keyword argument 'rewards';"
    ):
        ecotone.trl.environment_factory("counter", rewards="last")  # type: ignore[call-arg]
    with run_server("counter", auth=AuthConfig(token="t0ken", required=True)) as server:
        factory = ecotone.trl.environment_factory(
            server.url, env="counter", reward="last", text=lambda obs: f"at {obs['count']}",
            action_tool="add", token="t0ken", codec="msgpack", timeout=5.0, connect_timeout=5.0,
        )  # fmt: skip
        assert public_methods(factory) == ["add"]
        env = factory()
        assert env.reset(seed=0) == "at 0"
        assert env.add(delta=2) == "at 2" and env.add(delta=3) == "at 5"
        assert env.get_reward() == 3.0  # the last step's, not the sum
        connection = factory._shared.connection  # type: ignore[attr-defined]
        assert isinstance(connection.core.codec, MsgpackCodec) and connection.timeout == 5.0


PARQUET_TASKS = """
import json, sys
from datasets import Dataset
import ecotone

path = sys.argv[1]
Dataset.from_list([{"split": "train", "secret": "crane"}, {"split": "test", "secret": "slate"},
                   {"split": "test", "secret": "pride"}]).to_parquet(path)
tasks = ecotone.TaskSet.from_file(path, id="secret")
print(json.dumps({"counts": tasks.counts(), "test": tasks.splits["test"]}))
"""


def test_a_parquet_task_file_is_read_through_datasets(trl_python: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [trl_python, "-c", PARQUET_TASKS, str(tmp_path / "tasks.parquet")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "counts": {"train": 1, "test": 2},
        "test": [{"secret": "slate"}, {"secret": "pride"}],
    }


def test_instances_reconnect_when_the_server_comes_back() -> None:
    from ecotone.kernel.config import ServerConfig
    from ecotone.serving import BackgroundServer

    first = BackgroundServer(ServerConfig(env="counter", port=0)).start()
    port = int(first.url.rsplit(":", 1)[1])
    factory = ecotone.trl.environment_factory(first.url, reset_keys=["target"])
    one, two = factory(), factory()
    one.reset(seed=0)
    two.reset(seed=0)
    first.stop()
    second = BackgroundServer(ServerConfig(env="counter", port=port)).start()
    try:
        assert json.loads(one.reset(seed=0)) == {"count": 0}  # a new connection, a new session
        assert json.loads(two.reset(seed=0)) == {"count": 0}  # the same new connection
        assert json.loads(two.delta(delta=2)) == {"count": 2}
    finally:
        second.stop()


def test_awkward_names_stay_callable_and_tools_never_clash_with_the_action() -> None:
    from ecotone.client.llm import openai_tools, tool_name
    from ecotone.specs import EnvInfo, ToolInfo
    from ecotone.trl.signature import make_method

    schema = {
        "properties": {"self": {"type": "string"}, "a-b": {"type": "integer"},
                       "a_b": {"type": "integer"}},
        "required": ["self", "a-b", "a_b"],
    }  # fmt: skip
    seen: list[Any] = []

    def body(self: Any, args: dict[str, Any]) -> str:
        seen.append(args)
        return ""

    method = make_method("odd", "Odd names.", schema, body)
    assert list(inspect.signature(method).parameters) == ["self", "self_", "a_b", "a_b_"]
    method(None, "s", 1, 2)
    assert seen == [{"self": "s", "a-b": 1, "a_b": 2}]
    assert tool_name("échec", set()) == "chec"  # ASCII only, as chat APIs require
    info = EnvInfo(name="e", action_schema={"properties": {"guess": {"type": "string"}}})
    tools = [ToolInfo(name="guess"), ToolInfo(name="reset"), ToolInfo(name="hint")]
    names = [t["function"]["name"] for t in openai_tools(info, tools)]
    assert names == ["guess", "tool_guess", "tool_reset", "hint"]


def test_a_group_of_rollouts_starts_from_one_exported_snapshot() -> None:
    """A GRPO group whose rows share one snapshot: every rollout starts from its prefix."""
    import base64

    with run_server("counter") as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.step({"delta": 5})
            blob = env.export_snapshot(env.snapshot())
        factory = ecotone.trl.environment_factory(server.url)
        rows: list[dict[str, Any]] = [
            {"prompt": "go", "snapshot": blob},
            {"prompt": "go", "snapshot": base64.b64encode(blob).decode()},
        ]
        for row in rows:
            player = factory()
            assert json.loads(player.reset(**row))["count"] == 5
            assert json.loads(player.delta(delta=2))["count"] == 7
            assert player.get_reward() == 2.0
        with pytest.raises(ValueError, match="base64"):
            factory().reset(snapshot="not base64!")


def play_unpickled(payload: bytes, results: Any) -> None:
    """In a spawned process: unpickle a factory class and an instance, play an episode."""
    import pickle

    try:
        cls, instance = pickle.loads(payload)
        first = json.loads(instance.reset(seed=0, target=3))
        moves = [instance.delta(delta=2), instance.delta(delta=1)]
        fresh = cls()
        fresh.reset(seed=0, target=1)
        fresh.delta(delta=1)
        results.put({
            "same_class": type(instance) is cls, "name": cls.__name__, "first": first,
            "moves": moves, "reward": instance.get_reward(), "fresh": fresh.get_reward(),
        })  # fmt: skip
    except BaseException as exc:
        results.put({"error": repr(exc)})


def test_the_class_and_an_instance_unpickle_in_a_spawned_process_and_play() -> None:
    """TRL's AsyncGRPO hands its factory to a spawned rollout process: the class pickles as
    the call that built it, an instance as a new one of that class."""
    import multiprocessing
    import pickle

    with run_server("counter") as server:
        factory = ecotone.trl.environment_factory(server.url, reset_keys=["target"])
        assert pickle.loads(pickle.dumps(factory)) is factory  # in this process: itself
        here = factory()
        here.reset(seed=0, target=5)
        here.delta(delta=1)  # an episode in hand stays here: its session does not travel
        payload = pickle.dumps((factory, here))
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        child = context.Process(target=play_unpickled, args=(payload, results))
        child.start()
        try:
            seen = results.get(timeout=120)
        finally:
            child.join(timeout=30)
        assert child.exitcode == 0
        assert seen == {
            "same_class": True, "name": factory.__name__, "first": {"count": 0},
            "moves": ['{"count": 2}', '{"count": 3}\n(the episode is over)'],
            "reward": 3.0, "fresh": 1.0,
        }  # fmt: skip
        assert len(server.recorder.episodes) >= 2  # the child's episodes ran on this server
        assert json.loads(here.delta(delta=1)) == {"count": 2}  # the parent's goes on


def test_a_factory_with_an_unpicklable_option_says_so_when_pickled() -> None:
    import pickle

    factory = ecotone.trl.environment_factory("counter", text=lambda obs: str(obs))
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(factory)
