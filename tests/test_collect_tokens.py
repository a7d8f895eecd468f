"""Token-level trajectories in `ecotone collect`, against a local endpoint that speaks vLLM's
OpenAI-compatible API with token ids (tests/token_server.py: a toy tokenizer and a scripted
model, since no model runs here); and trajectories as a dataset (Parquet, through the
`datasets` package of the TRL venv)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from itertools import chain
from pathlib import Path
from typing import Any

import pytest
import trio

import ecotone.recording
from ecotone.collect import ChatPolicy, Summary, collect
from ecotone.collect.tokens import hermes_tool_calls
from ecotone.recording import token_sequence
from tests.token_server import (
    MAX_MODEL_LEN,
    Script,
    TokenServer,
    ToyVocabulary,
    call,
    logprob,
)

ROOT = Path(__file__).resolve().parent.parent
ADD_ONE = Script([call("delta", delta=1)])


def play(url: str, out: Path, episodes: int = 1, target: int = 3, **options: Any) -> Summary:
    policy = ChatPolicy(url, "toy", **options)
    return trio.run(
        functools.partial(
            collect, "inproc://counter", policy, out=out, episodes=episodes, concurrency=1,
            options={"target": target},
        )
    )  # fmt: skip


def expected_logprobs(written: list[int]) -> list[float]:
    return [logprob(i, t) for i, t in enumerate(written)]


def test_ids_logprobs_and_masks_round_trip_and_later_calls_are_token_input(
    tmp_path: Path,
) -> None:
    with TokenServer(ADD_ONE) as server:
        summary = play(server.url, tmp_path)
    assert server.paths() == [
        "/v1/chat/completions",
        *["/tokenize", "/tokenize", "/v1/completions"] * 2,
    ]
    chat = server.requests[0][1]
    assert chat["return_token_ids"] is True and chat["logprobs"] is True
    (episode,) = ecotone.recording.read_episodes(tmp_path)
    turns, written = episode.turns, server.written
    assert [t["completion_ids"] for t in turns] == written  # as the model wrote them
    assert [t["logprobs"] for t in turns] == [expected_logprobs(w) for w in written]
    assert [(t["t"], t["continued"]) for t in turns] == [(0, False), (1, True), (2, True)]
    completions = [body for path, body in server.requests if path == "/v1/completions"]
    second, third = (body["prompt"] for body in completions)
    assert second == turns[0]["prompt_ids"] + written[0] + turns[1]["prompt_ids"]
    assert third == second + written[1] + turns[2]["prompt_ids"]
    assert completions[0]["return_token_ids"] is True and completions[0]["logprobs"] == 0
    assert completions[0]["max_tokens"] == MAX_MODEL_LEN - len(second)  # not vLLM's 16
    vocab = ToyVocabulary()  # the model's ids are not what its text tokenizes to again
    assert vocab.encode(vocab.decode(written[0])) != written[0]
    # The env's turn, as the endpoint's template renders it: what the template puts after
    # the model's end-of-turn token, the tool's answer, the next generation prompt.
    assert vocab.decode(turns[1]["prompt_ids"]) == (
        "\n<|im_start|>user\n<tool_response>\n"
        '{"count": 1}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    )
    ids, mask, logprobs = token_sequence(turns)
    assert ids == third + written[2]
    assert [i for i, m in zip(ids, mask, strict=True) if m] == [*chain(*written)]
    generated = [*chain(*(expected_logprobs(w) for w in written))]
    assert [x for x, m in zip(logprobs, mask, strict=True) if m] == generated
    assert {x for x, m in zip(logprobs, mask, strict=True) if not m} == {0.0}
    roles = [m["role"] for m in episode.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 2 + ["assistant"]
    assert episode.messages[4]["tool_calls"][0]["function"] == {
        "name": "delta",
        "arguments": '{"delta": 1}',
    }  # read from the text of a completion continued from the ids
    assert (summary.model_turns, summary.token_turns, summary.continued_turns) == (3, 3, 2)
    assert summary.table().splitlines()[-1] == (
        "model turns: 3, all with token ids and logprobs; 2 continued from the episode's ids "
        "(token input)"
    )
    assert summary.to_dict()["continued_turns"] == 2


@pytest.mark.parametrize("mode", ["text", "strict"])
def test_an_endpoint_without_token_ids_gives_text_only_turns_and_the_summary_says_so(
    tmp_path: Path, mode: str
) -> None:
    """`text`: the fields are ignored; `strict`: refused (400), as OpenAI's API does, and
    asked without them from then on."""
    with TokenServer(ADD_ONE, mode=mode) as server:
        summary = play(server.url, tmp_path, episodes=2)
    assert summary.overall.errors == 0 and summary.overall.mean_steps == 3.0
    assert summary.tokens() == "model turns: 6, text only (the endpoint returned no token ids)"
    assert set(server.paths()) == {"/v1/chat/completions"}
    asked = ["return_token_ids" in body for _, body in server.requests]
    assert asked == ([True] * 6 if mode == "text" else [True, False] + [False] * 5)
    for episode in ecotone.recording.read_episodes(tmp_path):
        assert episode.turns == [] and token_sequence(episode.turns) == ([], [], [])
        assert [m["role"] for m in episode.messages].count("assistant") == 3


def test_the_cli_says_what_it_recorded_and_tokens_required_fails_the_episode(
    tmp_path: Path,
) -> None:
    def run(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ecotone", "collect", "counter", "--base-url", url,
             "--model", "toy", "--episodes", "1", "--option", "target=2", "--out",
             str(tmp_path / "runs"), *flags],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with TokenServer(ADD_ONE, mode="text") as server:
        done = run(server.url)
        assert done.returncode == 0, done.stderr
        assert "model turns: 2, text only (the endpoint returned no token ids)" in done.stdout
        required = run(server.url, "--tokens")
        assert required.returncode == 0, required.stderr
        assert required.stdout.splitlines()[2].split()[-1] == "1"  # the episode's error
        summary = json.loads((tmp_path / "runs" / "summary.json").read_text())
        assert summary["overall"]["errors"] == 1
        (episode,) = ecotone.recording.read_episodes(tmp_path / "runs")
        assert "returned no token ids" in (episode.error or "")
        plain = run(server.url, "--no-tokens")
        assert "return_token_ids" not in server.requests[-1][1]
    assert plain.returncode == 0, plain.stderr
    with TokenServer(ADD_ONE) as server:
        done = run(server.url)
    assert "model turns: 2, all with token ids and logprobs; 1 continued" in done.stdout


def test_an_endpoint_without_token_input_records_each_call_whole(tmp_path: Path) -> None:
    """Ids on chat, but no /tokenize nor /v1/completions (404): each call a chat completion,
    its whole prompt recorded, none continued; /tokenize asked once a run (two renderings
    at once)."""
    with TokenServer(ADD_ONE, mode="chat-only") as server:
        summary = play(server.url, tmp_path, episodes=2)
    assert summary.overall.errors == 0
    chat = "/v1/chat/completions"
    assert server.paths() == [chat, "/tokenize", "/tokenize", chat, chat] + [chat] * 3
    assert summary.tokens() == (
        "model turns: 6, all with token ids and logprobs; 0 continued from the episode's ids "
        "(token input)"
    )
    first = ecotone.recording.read_episodes(tmp_path)[0]
    turns = first.turns
    assert [t["continued"] for t in turns] == [False] * 3
    assert [t["completion_ids"] for t in turns] == server.written[:3]
    assert token_sequence(turns) == ([], [], [])  # no one sequence: each turn stands alone
    # The endpoint tokenized the conversation's text again: the model's ids are lost.
    after = turns[1]["prompt_ids"][len(turns[0]["prompt_ids"]) :]
    assert after[: len(server.written[0])] != server.written[0]


class Renumbering(ToyVocabulary):
    """A template that renders the earlier conversation differently once more follows (it
    counts the model's answers in the system message)."""

    def render(self, messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        answers = sum(1 for m in messages if m.get("role") == "assistant")
        head = [{**messages[0], "content": f"{messages[0]['content']} ({answers})"}]
        return super().render(head + messages[1:], tools, generation)


def test_a_template_that_rewrites_the_past_or_an_answer_without_end_of_turn(
    tmp_path: Path,
) -> None:
    """Where the env's turn cannot be cut from the endpoint's rendering, the call is a chat
    completion again, not continued; an answer that stops before the end-of-turn token (a
    stop string) has the template's closing of the turn among the env's tokens."""
    with TokenServer(ADD_ONE, vocabulary=Renumbering()) as server:
        summary = play(server.url, tmp_path / "a", target=2)
    assert summary.overall.errors == 0
    chat = "/v1/chat/completions"
    assert server.paths() == [chat, "/tokenize", "/tokenize", chat]
    (episode,) = ecotone.recording.read_episodes(tmp_path / "a")
    assert [t["continued"] for t in episode.turns] == [False, False]

    with TokenServer(Script([call("delta", delta=1)], end="")) as server:
        summary = play(server.url, tmp_path / "b", target=2)
    assert summary.continued_turns == 1
    (episode,) = ecotone.recording.read_episodes(tmp_path / "b")
    env = ToyVocabulary().decode(episode.turns[1]["prompt_ids"])
    assert env.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>")
    assert episode.turns[0]["completion_ids"] == server.written[0]
    assert server.written[0][-1] == 4  # `</tool_call>`, and no end-of-turn token


class Forgetful(TokenServer):
    """Its completions leave out `token_ids`; with `echo`, it answers for another prompt."""

    def __init__(self, echo: bool) -> None:
        super().__init__(ADD_ONE)
        self.echo = echo

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super()._completion(body)
        choice = answer["choices"][0]
        if self.echo:
            choice["prompt_token_ids"] = choice["prompt_token_ids"][1:]
        else:
            del choice["token_ids"]
        return answer


@pytest.mark.parametrize(
    ("echo", "says"),
    [
        (False, "has no `text`, `token_ids` and `logprobs.token_logprobs`"),
        (True, "did not take the prompt's token ids as they were sent"),
    ],
)
def test_a_completion_without_ids_or_for_another_prompt_fails_that_episode(
    tmp_path: Path, echo: bool, says: str
) -> None:
    with Forgetful(echo) as server:
        summary = play(server.url, tmp_path, episodes=2)
        assert server.paths().count("/v1/chat/completions") == 2  # both episodes started
    assert summary.overall.errors == 2
    for episode in ecotone.recording.read_episodes(tmp_path):
        assert says in (episode.error or "") and len(episode.turns) == 1


def test_hermes_tool_calls_are_read_from_a_completions_text() -> None:
    text = 'Let me add.\n<tool_call>\n{"name": "delta", "arguments": {"delta": 2}}\n</tool_call>'
    content, calls = hermes_tool_calls(text)
    assert content == "Let me add."
    assert calls == [
        {"type": "function", "function": {"name": "delta", "arguments": '{"delta": 2}'}}
    ]
    assert hermes_tool_calls("<tool_call>{not json}</tool_call>") == (
        "<tool_call>{not json}</tool_call>",
        [],
    )
    assert hermes_tool_calls("<tool_call>\n</tool_call>\n") == ("<tool_call>\n</tool_call>", [])
    assert hermes_tool_calls("done") == ("done", [])


# --- trajectories as a dataset ----------------------------------------------------------------


def test_parquet_without_datasets_is_refused_before_any_episode(tmp_path: Path) -> None:
    if _importable("datasets"):  # the dev venv has none
        pytest.skip("this venv has `datasets`: the refusal cannot be seen here")
    with pytest.raises(ValueError, match=r"need the `datasets` package: pip install"):
        trio.run(
            functools.partial(
                collect, "inproc://counter", lambda obs: {"delta": 1}, out=tmp_path,
                fmt="parquet",
            )
        )  # fmt: skip
    assert not tmp_path.joinpath("counter").exists()
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        trio.run(
            functools.partial(collect, "inproc://counter", lambda o: None, out=tmp_path, fmt="csv")
        )


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


PARQUET = textwrap.dedent(
    """
    import functools, json, sys
    import datasets, trio
    import ecotone.recording
    from ecotone.collect import ChatPolicy, collect
    from tests.token_server import TokenServer, Script, call

    out = sys.argv[1]
    with TokenServer(Script([call("delta", delta=1)])) as server:
        summary = trio.run(functools.partial(
            collect, "inproc://counter", ChatPolicy(server.url, "toy"), out=out + "/run",
            episodes=2, concurrency=2, options={"target": 2}, fmt="parquet"))
    table = datasets.load_dataset("parquet", data_files=out + "/run/episodes.parquet")["train"]
    rows = sorted(table, key=lambda row: row["path"])
    episodes = sorted(ecotone.recording.read_episodes(out + "/run"), key=lambda e: str(e.path))
    same = [row == ecotone.recording.episode_row(e) for row, e in zip(rows, episodes)]
    ecotone.recording.write_parquet(out + "/run", out + "/again.parquet")  # a recorded run
    again = datasets.load_dataset("parquet", data_files=out + "/again.parquet")["train"]
    print(json.dumps({"rows": rows, "same": same, "again": len(again),
                      "features": sorted(table.features)}))
    """
)


def test_parquet_rows_are_the_episodes_and_datasets_reads_them_back(tmp_path: Path) -> None:
    trl_python = os.environ.get("TRL_PYTHON", "")
    if not trl_python:
        reason = "TRL_PYTHON is not set: point it at the python of a venv with datasets"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's ecotone, not the venv's
    done = subprocess.run(
        [trl_python, "-c", PARQUET, str(tmp_path)],
        capture_output=True, text=True, timeout=180, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    rows = seen["rows"]
    assert len(rows) == 2 and seen["same"] == [True, True] and seen["again"] == 2
    assert seen["features"] == sorted(
        ["env", "policy", "task_id", "split", "index", "seed", "path", "messages", "tool_calls",
         "actions", "observations", "rewards", "return", "steps", "end", "error", "success",
         "token_ids", "loss_mask", "logprobs", "turns"]
    )  # fmt: skip
    row = rows[0]
    assert row["env"] == "counter" and row["policy"] == "chat:toy" and row["success"] is True
    assert row["rewards"] == [1.0, 1.0] and row["return"] == 2.0 and row["steps"] == 2
    assert [json.loads(a) for a in row["actions"]] == [{"delta": 1}] * 2
    assert [c["name"] for c in row["tool_calls"]] == ["delta", "delta"]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool",
                                                    "assistant"]  # fmt: skip
    (episode,) = [e for e in ecotone.recording.read_episodes(tmp_path / "run")
                  if str(e.path) == row["path"]]  # fmt: skip
    ids, mask, logprobs = token_sequence(episode.turns)
    assert (row["token_ids"], row["loss_mask"], row["logprobs"]) == (ids, mask, logprobs)
    assert sum(mask) == sum(len(t["completion_ids"]) for t in episode.turns) > 0
    assert [t["continued"] for t in row["turns"]] == [False, True]
