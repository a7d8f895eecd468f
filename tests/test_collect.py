"""`ecotone collect`: a policy (a Python callable, or a model behind an OpenAI-compatible
chat endpoint, here a small local server that speaks that API) over an env's tasks, episodes
in flight at once, trajectories in the recording format, and the summary table."""

from __future__ import annotations

import functools
import http.server
import io
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel

import ecotone.recording
from ecotone.collect import CallablePolicy, ChatPolicy, Outcome, Progress, collect, plan
from ecotone.collect.policies import ChatOptions, ChatSettings
from ecotone.collect.runner import CollectOptions, CollectSettings
from ecotone.kernel.config import AuthConfig
from ecotone.plugins.wordle import WordleTask, task_id, words
from tests.conftest import run_server

TEST_WORDS = [w for i, w in enumerate(words()) if i % 5 == 4]
TEST_IDS = [task_id(WordleTask(secret=w)) for w in TEST_WORDS]


def test_the_cli_plays_a_python_policy_over_a_split_and_records_every_episode(
    tmp_path: Path,
) -> None:
    (tmp_path / "wordle_policy.py").write_text(
        textwrap.dedent(
            """
            from ecotone.plugins.wordle import task_set

            def play(observation, task_id, step):  # the task's word is hidden from clients:
                secret = task_set().find(task_id)[1].secret  # an orchestrator may know it
                return {"guess": "slate" if step == 0 else secret}
            """
        )
    )
    out = tmp_path / "runs"
    with run_server("wordle") as server:
        done = subprocess.run(
            [sys.executable, "-m", "ecotone", "collect", server.url, "--policy",
             "wordle_policy:play", "--split", "test", "--tasks", "3", "--repeats", "2",
             "--concurrency", "4", "--out", str(out)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["task", "episodes", "mean", "return", "success", "mean", "steps",
                                "errors"]  # fmt: skip
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    assert set(rows) == {*TEST_IDS[:3], "all"}
    assert rows["all"][:1] == ["6"] and rows["all"][2] == "100%"
    assert "6/6 episodes" in done.stderr  # the progress line
    episodes = ecotone.recording.read_episodes(out)
    assert len(episodes) == 6 and all(e.end == "done" for e in episodes)
    assert {e.seed for e in episodes} == {0, 1}
    solved = [e.actions[-1]["guess"] for e in episodes]
    assert sorted(solved) == sorted(TEST_WORDS[:3] * 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["overall"]["success_rate"] == 1.0


def test_refused_actions_and_a_failing_policy_are_recorded_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    refusals: list[str | None] = []

    def policy(observation: dict[str, Any], step: int, refusal: str | None) -> Any:
        if step == 0:
            return {"delta": "one"}  # refused by the schema: the policy is told why
        if step == 1:
            refusals.append(refusal)
        return {"delta": 1}

    async def run() -> Any:
        return await collect(
            "inproc://counter",
            CallablePolicy(policy, "counting"),
            out=tmp_path,
            episodes=5,
            concurrency=3,
            options={"target": 3},
        )

    summary = trio.run(run)
    assert summary.episodes == 5 and summary.overall.errors == 0
    assert summary.overall.mean_steps == 3.0 and summary.overall.success_rate == 1.0
    episodes = ecotone.recording.read_episodes(tmp_path)
    assert [e.actions for e in episodes] == [[{"delta": 1}] * 3] * 5  # refusals are not steps
    assert len(refusals) == 5 and all("Expected `int`, got `str`" in (r or "") for r in refusals)

    async def failing() -> Any:
        return await collect(
            "inproc://counter",
            CallablePolicy(lambda obs: {"delta": 13} if obs["count"] == 0 else 1 / 0, "bad"),
            out=tmp_path / "bad",
            episodes=2,
            options={"target": 100},
        )

    bad = trio.run(failing)
    assert bad.overall.errors == 2 and bad.overall.mean_steps == 1.0
    ended = ecotone.recording.read_episodes(tmp_path / "bad")
    assert {e.end for e in ended} == {"error"}
    assert all("ZeroDivisionError" in (e.error or "") for e in ended)


def test_collects_options_each_do_what_they_say_and_an_unknown_one_is_a_type_error(
    tmp_path: Path,
) -> None:
    keys = CollectOptions.__required_keys__ | CollectOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(CollectSettings)}
    policy = CallablePolicy(lambda obs: {"guess": "slate"}, "slate")

    async def misspelt() -> None:
        await collect("inproc://wordle", policy, out=tmp_path, repeat=2)  # type: ignore[call-arg]

    async def nowhere() -> None:
        await collect("inproc://wordle", policy)  # type: ignore[call-arg]

    with pytest.raises(TypeError, match=r"^collect\(\) got unexpected keyword argument 'repeat';"):
        trio.run(misspelt)
    with pytest.raises(
        TypeError, match=r"^collect\(\) missing required keyword argument\(s\) 'out'"
    ):
        trio.run(nowhere)
    seen: list[Outcome] = []
    planned = Progress(0, stream=io.StringIO())
    with run_server("wordle", auth=AuthConfig(token="t0ken", required=True)) as server:
        summary = trio.run(
            functools.partial(
                collect, server.url, policy, out=tmp_path / "runs", env="wordle", split="test",
                task_ids=[1, 2], repeats=2, seed=5, max_steps=1, fmt="msgpack",
                progress=seen.append, planned=planned, token="t0ken",
            )
        )  # fmt: skip
    assert planned.total == 4 and len(seen) == 4 and summary.episodes == 4
    assert {o.task for o in seen} == set(TEST_IDS[1:3])
    assert {o.reason for o in seen} == {"max_steps"}
    episodes = ecotone.recording.read_episodes(tmp_path / "runs")
    assert {e.seed for e in episodes} == {5, 6} and all(len(e.actions) == 1 for e in episodes)
    assert len(list((tmp_path / "runs").rglob("*.msgpack"))) == 4
    with ecotone.connect("inproc://wordle") as client:
        info = client.connection.describe("wordle")
    chosen = plan(info, CollectSettings(out=tmp_path, split="test", tasks=2, repeats=3))
    assert [(j.task_index, j.seed) for j in chosen] == [(i, r) for i in (0, 1) for r in (0, 1, 2)]


# --- a chat-completions endpoint: a small local server speaking the API ----------------------


class FakeModel(http.server.BaseHTTPRequestHandler):
    """`POST /v1/chat/completions`: a scripted model that calls the `delta` tool, first with
    an argument of the wrong type, then with 1 each turn; it records every request."""

    requests: list[dict[str, Any]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with self.lock:
            FakeModel.requests.append(
                {"path": self.path, "auth": self.headers.get("authorization"), **body}
            )
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        delta = '"one"' if turns == 0 else "1"
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turns}",
                    "type": "function",
                    "function": {"name": "delta", "arguments": f'{{"delta": {delta}}}'},
                }
            ],
        }
        data = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_model() -> Iterator[str]:
    FakeModel.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_chat_model_plays_through_tool_calls_and_hears_why_an_action_was_refused(
    tmp_path: Path, fake_model: str
) -> None:
    policy = ChatPolicy(fake_model, "tiny", api_key="sk-test", temperature=0.0)
    summary = trio.run(
        functools.partial(
            collect,
            "inproc://counter",
            policy,
            out=tmp_path,
            episodes=2,
            concurrency=1,  # the fake model's requests in order
            options={"target": 2},
        )
    )
    assert summary.policy == "chat:tiny" and summary.overall.success_rate == 1.0
    assert summary.overall.mean_steps == 2.0 and summary.overall.errors == 0
    first = FakeModel.requests[0]
    assert first["model"] == "tiny" and first["auth"] == "Bearer sk-test"
    assert first["temperature"] == 0.0
    (tool,) = first["tools"]
    assert tool["function"]["name"] == "delta"
    assert tool["function"]["parameters"]["properties"]["delta"]["type"] == "integer"
    assert first["messages"][0]["role"] == "system" and first["messages"][1]["role"] == "user"
    second = FakeModel.requests[1]["messages"]
    refused = second[-1]
    assert refused["role"] == "tool" and refused["tool_call_id"] == "call_0"
    assert refused["content"].startswith("error: ") and "delta" in refused["content"]
    last = FakeModel.requests[2]["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": "call_1", "content": '{"count": 1}'}
    assert len(FakeModel.requests) == 2 * 3  # per episode: refused, +1, +1 (done)


def test_an_unreachable_model_is_an_error_per_episode_not_a_crash(tmp_path: Path) -> None:
    policy = ChatPolicy("http://127.0.0.1:9/v1", "none", timeout=2)
    summary = trio.run(
        functools.partial(collect, "inproc://counter", policy, out=tmp_path, episodes=2)
    )
    assert summary.overall.errors == 2
    assert all("unreachable" in (e.error or "") for e in ecotone.recording.read_episodes(tmp_path))


def test_chat_policy_options_reach_the_endpoint_and_an_unknown_one_is_a_type_error(
    tmp_path: Path, fake_model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ChatOptions.__optional_keys__ == {f.name for f in attrs.fields(ChatSettings)}
    with pytest.raises(
        TypeError, match=r"ChatPolicy\(\) got unexpected keyword argument 'temprature'"
    ):
        ChatPolicy(fake_model, "tiny", temprature=0.0)  # type: ignore[call-arg]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    # The fake model calls `delta`, which is no tool here (the action's is `move`): every
    # turn is a call without an action, until max_tool_calls ends the episode.
    policy = ChatPolicy(
        fake_model, "tiny", max_tokens=5, system="S {name} {tool}", action_tool="move",
        max_tool_calls=2,
    )  # fmt: skip
    summary = trio.run(
        functools.partial(collect, "inproc://counter", policy, out=tmp_path, episodes=1)
    )
    (episode,) = ecotone.recording.read_episodes(tmp_path)
    assert summary.overall.errors == 1 and "made 2 calls without acting" in (episode.error or "")
    first = FakeModel.requests[0]
    assert first["auth"] == "Bearer sk-env" and first["max_tokens"] == 5
    assert "temperature" not in first
    assert first["messages"][0] == {"role": "system", "content": "S counter move"}
    assert [tool["function"]["name"] for tool in first["tools"]] == ["move"]
    assert len(FakeModel.requests) == 2


def test_bad_requests_exit_2_saying_why(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ecotone", "collect", *args, "--out", str(tmp_path)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = run("counter", "--policy", "nowhere:act", "--split", "x")
    assert done.returncode == 2 and "cannot import 'nowhere'" in done.stderr
    (tmp_path / "p.py").write_text("def act(obs):\n    return {'delta': 1}\n")
    done = run("counter", "--policy", "p:act", "--split", "train")
    assert done.returncode == 2 and "publishes no tasks: use --episodes" in done.stderr
    done = run("wordle", "--policy", "p:act", "--split", "dev")
    assert done.returncode == 2 and "no task split 'dev'; splits: train, test" in done.stderr
    done = run("counter", "--base-url", "http://127.0.0.1:9/v1")
    assert done.returncode == 2 and "--base-url needs --model" in done.stderr


def test_any_failure_is_that_episodes_error_and_the_summary_is_still_written(
    tmp_path: Path,
) -> None:
    def unencodable(observation: dict[str, Any]) -> Any:
        return {"delta": object()}

    summary = trio.run(
        functools.partial(
            collect, "inproc://counter", CallablePolicy(unencodable, "odd"), out=tmp_path,
            episodes=3,
        )
    )  # fmt: skip
    assert summary.overall.errors == 3
    assert all("TypeError" in (e.error or "") for e in ecotone.recording.read_episodes(tmp_path))
    assert (tmp_path / "summary.json").exists()


def test_more_workers_than_a_connection_may_hold_sessions_still_play_every_episode(
    tmp_path: Path,
) -> None:
    from ecotone.kernel import Limits

    with run_server("counter", limits=Limits(max_sessions_per_connection=2)) as server:
        summary = trio.run(
            functools.partial(
                collect, server.url, CallablePolicy(lambda obs: {"delta": 1}, "one"),
                out=tmp_path, episodes=6, concurrency=5, options={"target": 2},
            )
        )  # fmt: skip
    assert summary.episodes == 6 and summary.overall.errors == 0
    assert summary.overall.success_rate == 1.0


def test_collects_own_reset_options_are_refused_and_names_stay_in_the_output(
    tmp_path: Path,
) -> None:
    from ecotone.collect.runner import _safe

    with pytest.raises(ValueError, match="reset options seed, split are collect's own"):
        trio.run(
            functools.partial(
                collect, "inproc://counter", CallablePolicy(lambda obs: None), out=tmp_path,
                options={"split": "x", "seed": 1},
            )
        )  # fmt: skip
    assert [_safe(n) for n in ("..", ".", "", "../up", "a b")] == ["_", "_", "_", "_up", "a_b"]


def test_a_plain_callable_sync_or_async_is_a_policy_and_so_is_module_colon_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One protocol: `collect` takes a plain function (the docs' "a policy is a Python
    callable"), an async one, a class (an instance per episode), `MODULE:NAME` from the
    working directory, or a `Policy`; anything else is a TypeError saying what a policy is."""
    from ecotone.collect import Episode, as_policy

    def plus_one(observation: dict[str, Any]) -> Any:
        return {"delta": 1}

    async def plus_two(observation: dict[str, Any]) -> Any:
        await trio.lowlevel.checkpoint()
        return {"delta": 2}

    class Alternating:
        def __init__(self) -> None:
            self.turn = 0

        def __call__(self, observation: dict[str, Any]) -> Any:
            self.turn += 1
            return {"delta": 1 if self.turn % 2 else 3}

    (tmp_path / "cwd_policy.py").write_text("def act(observation):\n    return {'delta': 4}\n")
    monkeypatch.chdir(tmp_path)

    async def totals(policy: Any) -> tuple[str, float]:
        summary = await collect(
            "inproc://counter", policy, out=tmp_path / "runs", episodes=2, max_steps=2
        )
        assert summary.overall.errors == 0, summary
        return summary.policy, summary.overall.mean_return

    name, mean = trio.run(totals, plus_one)
    assert name.endswith("<locals>.plus_one") and mean == 2.0
    assert trio.run(totals, plus_two)[1] == 4.0
    assert trio.run(totals, Alternating)[1] == 4.0  # 1 then 3, in each episode afresh
    assert trio.run(totals, "cwd_policy:act") == ("cwd_policy:act", 8.0)
    policy = as_policy(plus_one, name="mine")
    assert as_policy(policy) is policy and policy.name == "mine"
    assert trio.run(totals, policy)[0] == "mine"
    with pytest.raises(TypeError, match="a policy is a callable"):
        as_policy(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        as_policy("no_such_module:act")
    fields = {f.name for f in attrs.fields(Episode)}
    assert fields == {"info", "task", "record", "tools", "fork", "seat"}


def test_fork_plays_k_episodes_from_each_prefix_on_the_server(tmp_path: Path) -> None:
    """`--fork K --fork-at S`: each job's first S steps once, then K copies of the episode
    (one fork request), each an episode of the summary, recorded with the prefix in front,
    its actor told which copy it is."""
    told: list[int | None] = []
    sessions: dict[int | None, set[str]] = {}

    class Branching:
        """delta 1 through the prefix, then the copy's number plus 10."""

        name = "branching"

        def actor(self, episode: Any) -> Any:
            told.append(episode.fork)
            sessions.setdefault(episode.fork, set()).add(episode.tools.client.session_id)
            fork = episode.fork

            class Actor:
                async def act(self, observation: dict[str, Any]) -> Any:
                    return {"delta": 1 if fork is None else 10 + fork}

                async def refused(self, action: Any, reason: str) -> None:
                    raise AssertionError(reason)

            return Actor()

    out = tmp_path / "runs"
    with run_server("counter") as server:
        summary = trio.run(
            functools.partial(
                collect,
                server.url,
                Branching(),
                out=out,
                episodes=2,
                max_steps=4,
                fork=3,
                fork_at=2,
                options={"max_steps": 4},
            )
        )
    assert summary.episodes == 6 and summary.overall.errors == 0, summary.table()
    assert sorted(told, key=str) == sorted([None, 0, 1, 2] * 2, key=str)
    episodes = {p.name: p for p in (out / "counter").iterdir()}
    assert len(episodes) == 2 * (1 + 3)  # each prefix, and its three copies
    path = out / "counter" / "00000---r0-f2.jsonl"
    copy = ecotone.recording.read_episode(path)
    counts = [observation["count"] for observation in copy.observations]
    assert counts == [0, 1, 2, 14, 26]  # the prefix copied in front, then the copy's own
    assert copy.truncateds[-1] and copy.end == "truncated"  # the counter's max_steps: 4 in all
    header = json.loads(path.read_text().splitlines()[0])
    assert header["fork"] == 2 and header["forked_at"] == 2 and header["forks"] == 3
    assert header["session"] in sessions[2]  # a copy's actor reaches the copy's tools
    assert summary.overall.mean_return == 24.0  # 2 + 2 x (10 + i), i = 0, 1, 2
