"""The conformance check `hidden_task_fields`: what a task hides (`TaskSet(hidden=...)`) is in
no id, listing, lookup, reset answer, state, view or description. It passes an env that keeps
its tasks' hidden fields and every bundled env with tasks, having looked; it fails envs written
to leak (tests/broken_envs.py), wordle as it was (its ids the words) among them, saying where;
and it is run by `ecotone validate`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ecotone.conformance import CheckResult, Status, run
from ecotone.conformance.checks.hidden import MIN_CHARS, Secret, secrets_of, shows
from tests import broken_envs
from tests.conftest import run_server

CHECK = "hidden_task_fields"


def outcome(env: str | type | None, url: str | None = None) -> CheckResult:
    (result,) = run(env, url=url, checks=[CHECK]).results
    return result


def test_whole_tokens_of_three_characters_or_more_whatever_the_case() -> None:
    assert shows("crane", "the word was CRANE.")
    assert shows("crane", "crane")
    assert shows("x = 1", "then x = 1, so")  # a value of several tokens, as a whole
    assert not shows("crane", "cranes fly")  # inside a longer word
    assert not shows("crane", "pcrane")
    assert not shows("123", "41234")  # inside a longer number
    assert shows("123", "[123, 4]")
    assert MIN_CHARS == 3


def test_structured_hidden_values_are_looked_for_leaf_by_leaf() -> None:
    withheld = {
        "word": "amber",
        "clues": [{"clue": "resin", "kind": "meaning"}, {"clue": "ab"}],  # "ab": too short
        "solved": True,  # booleans and nulls are not looked for
        "answer": None,
        "size": 1234,
        "empty": "",
    }
    assert secrets_of(withheld) == [
        Secret("word", "amber"),
        Secret("clues[0].clue", "resin"),
        Secret("clues[0].kind", "meaning"),
        Secret("size", "1234"),
    ]


def test_an_env_that_keeps_its_hidden_fields_passes_having_looked() -> None:
    """Vault's every observation says "guess", the code word of its first task: a word shown
    whatever the task (other tasks that do not hide it show it too) is not that task's leak."""
    result = outcome(broken_envs.VaultEnv)
    assert result.status is Status.PASS, result
    assert result.note == "27 values of hidden clues, word of 9 tasks, none shown"


@pytest.mark.parametrize(
    ("name", "what", "expected", "seen"),
    [
        (
            "vault_id_is_the_word",
            "the id of task train[0]",
            "no value of task train[0]'s hidden field `word`",
            "'guess' in \"guess\"",
        ),
        (
            "vault_tells_the_word",
            "reset(split='train', index=0): observation.note",
            "no value of task train[0]'s hidden field `word`",
            "'guess' in \"psst: the code word is GUESS\"",
        ),
        (
            "vault_state_shows_a_clue",
            "state() after reset(split='train', index=0): clue",
            "no value of task train[0]'s hidden field `clues[0].clue`",
            "'riddle' in \"riddle\"",
        ),
        (
            "vault_described_with_a_word",
            "describe(): description",
            "no value of task test[0]'s hidden field `word`",
            "'fable' in \"Open the vault: the first test vault's word is fable.\"",
        ),
        (
            "wordle_by_word",
            "the id of task train[0]",
            "no value of task train[0]'s hidden field `secret`",
            "'about' in \"about\"",
        ),
    ],
)
def test_an_env_that_leaks_a_hidden_field_fails_saying_where(
    name: str, what: str, expected: str, seen: str
) -> None:
    env_cls, _ = broken_envs.BROKEN[name]
    result = outcome(env_cls)
    assert result.status is Status.FAIL
    assert (result.what, result.expected, result.seen) == (what, expected, seen)


@pytest.mark.parametrize("env", ["wordle", "coding"])
def test_the_bundled_envs_with_tasks_pass(env: str) -> None:
    result = outcome(env)
    assert result.status is Status.PASS, result
    if env == "wordle":  # 4 tasks of each split, 3 drawn: each one word looked for
        assert result.note == "11 values of hidden secret of 11 tasks, none shown"
    else:  # the shipped tasks' tests live apart from the task records: nothing to look for
        assert result.note == "hidden cases, tests: no value of 3+ characters in 10 tasks"


def test_an_env_without_tasks_or_hidden_fields_passes_saying_so() -> None:
    assert outcome("counter").note == "the env publishes no tasks"


def test_behind_a_server_the_check_is_skipped_with_the_reason() -> None:
    with run_server("wordle") as server:
        result = outcome(None, url=server.url)
    assert result.status is Status.SKIP
    assert "ecotone validate ENV" in result.reason
    with run_server("counter") as server:
        assert outcome(None, url=server.url).status is Status.PASS


def test_ecotone_validate_runs_the_check(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "validate", "wordle"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if CHECK in line)
    assert re.fullmatch(
        rf"PASS  {CHECK} +\(11 values of hidden secret of 11 tasks, none shown\)", line
    )
