"""The bundled `wordle` env: feedback rules, rewards, refused guesses, the shipped word list,
seeded secrets, and games through the real client over a real server."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

import ecotone
from ecotone.plugins.wordle import (
    WordleAction,
    WordleEnv,
    WordleObservation,
    WordleState,
    feedback,
    task_set,
    words,
)
from tests.conftest import run_server

# --- rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "secret", "pattern"),
    [
        ("crane", "crane", "GGGGG"),
        ("slate", "crane", "..G.G"),
        ("react", "crane", "YYGY."),
        ("speed", "abide", "..Y.Y"),  # one e in the secret: only the first e is yellow
        ("eerie", "there", "Y.Y.G"),  # the green e uses one e; the first e takes the other
        ("llama", "hello", "YY..."),
        ("mamma", "maxim", "GGY.."),  # one unmatched m: only the first spare m
    ],
)
def test_feedback_marks_green_yellow_and_gray_like_wordle(
    guess: str, secret: str, pattern: str
) -> None:
    assert feedback(guess, secret) == pattern


def test_a_scripted_game_scores_each_guess_and_solving_ends_it() -> None:
    env = WordleEnv()
    first = env.reset(task="crane", episode_id="w-1")
    assert (first.remaining, first.history, first.feedback, first.answer) == (6, [], "", None)
    assert "6 guesses" in first.text

    slate = env.step(WordleAction(guess="SLATE"))  # case does not matter
    assert (slate.guess, slate.feedback, slate.reward, slate.done) == ("slate", "..G.G", 0.2, False)
    assert slate.marks == ["gray", "gray", "green", "gray", "green"]
    assert (slate.remaining, slate.answer) == (5, None)

    react = env.step(WordleAction(guess="react"))
    assert (react.feedback, react.reward) == ("YYGY.", 0.25)  # 0.1 + 3 * 0.05
    assert [t.guess for t in react.history] == ["slate", "react"]
    assert "Not in the word: L S T" in react.text

    solved = env.step(WordleAction(guess="crane"))
    assert (solved.reward, solved.done, solved.solved, solved.answer) == (1.5, True, True, "crane")
    assert solved.remaining == 3
    assert "Solved in 3 guesses." in solved.text
    state = env.state()
    assert (state.episode_id, state.step_count) == ("w-1", 3)
    assert state.guesses == ["slate", "react", "crane"]


def test_six_wrong_guesses_end_the_game_and_reveal_the_word() -> None:
    env = WordleEnv()
    env.reset(task="zebra")
    guesses = ["tulip", "month", "quick", "fight", "vivid", "cough"]
    obs = [env.step(WordleAction(guess=g)) for g in guesses]
    assert [o.done for o in obs] == [False] * 5 + [True]
    assert [o.answer for o in obs] == [None] * 5 + ["zebra"]
    assert (obs[-1].solved, obs[-1].remaining, obs[-1].reward) == (False, 0, 0.0)
    assert "The word was ZEBRA." in obs[-1].text


def test_max_guesses_sets_how_many_tries_there_are() -> None:
    env = WordleEnv()
    env.reset(task="zebra", max_guesses=2)
    assert not env.step(WordleAction(guess="tulip")).done
    assert env.step(WordleAction(guess="month")).done


def test_guesses_that_are_not_five_letters_or_not_words_are_refused_naming_guess() -> None:
    with ecotone.connect("inproc://wordle") as env:
        env.reset(task="crane")
        for bad in ("cran", "cranes", "cr4ne", "zzzzz", ""):
            with pytest.raises(ecotone.InvalidActionError) as refused:
                env.step({"guess": bad})
            assert refused.value.field == "guess"
            assert refused.value.details["path"] == "$.guess"
        with pytest.raises(ecotone.InvalidActionError) as wrong_type:
            env.step({"guess": 12345})
        assert wrong_type.value.field == "guess"
        assert env.state()["step_count"] == 0  # refused guesses use up no try
        assert env.step({"guess": "crane"}).observation["remaining"] == 5


def test_allow_any_word_accepts_any_five_letters() -> None:
    env = WordleEnv()
    env.reset(task="crane", allow_any_word=True)
    assert env.step(WordleAction(guess="zzzzz")).feedback == "....."
    with pytest.raises(ecotone.InvalidAction):
        env.step(WordleAction(guess="zzzz"))


def test_the_shipped_word_list_holds_hundreds_of_distinct_five_letter_words() -> None:
    listed = words()
    assert len(listed) >= 500
    assert len(set(listed)) == len(listed)
    assert all(re.fullmatch(r"[a-z]{5}", w) for w in listed)
    assert {"crane", "zebra", "about"} <= set(listed)


def test_sample_actions_are_always_accepted_guesses() -> None:
    env = WordleEnv()
    rng = random.Random(0)
    for seed in range(5):
        obs = env.reset(seed=seed)
        while not obs.done:
            obs = env.step(env.sample_action(rng))
        assert obs.answer == env.state().secret


# --- seeds, and the real client over a real server -------------------------------------------


def test_the_seed_picks_the_secret() -> None:
    env = WordleEnv()
    secrets = []
    for seed in [*range(10), 3]:
        env.reset(seed=seed)
        assert env.state().secret == ""  # not told before the episode ends
        secrets.append(env._state.secret)
    assert secrets[3] == secrets[-1]
    assert len(set(secrets)) >= 5
    assert all(s in words() for s in secrets)


def _game(env: ecotone.EnvClient[Any, Any], seed: int) -> list[Any]:
    out = [env.reset(seed=seed).observation]
    for guess in ("slate", "round", "music", "wheat", "fable", "vivid"):
        result = env.step({"guess": guess})
        out.append(result.observation)
        if result.finished:
            break
    return out


def test_the_same_seed_and_guesses_give_the_same_game_over_a_server() -> None:
    with run_server("wordle") as server:
        with ecotone.connect(server.url) as one, ecotone.connect(server.url) as two:
            first, second = _game(one, 42), _game(two, 42)
            assert first == second
            assert len(first) > 1
            assert one.state()["secret"] == two.state()["secret"]
            assert one.reset(seed=42).task == two.reset(seed=42).task  # the same word
            assert one.state()["secret"] == ""  # which no state tells before the end


def test_a_game_through_the_client_decodes_into_the_env_types() -> None:
    with (
        run_server("wordle") as server,
        ecotone.connect(
            server.url, observation_type=WordleObservation, state_type=WordleState, codec="msgpack"
        ) as env,
    ):
        task = env.reset(seed=7).task
        assert task is not None and env.state().secret == ""  # the state tells no one early
        secret = task_set().find(task.id)[1].secret  # the server's tasks know it; the id not
        assert secret not in task.id
        first = env.step({"guess": "slate"})
        assert isinstance(first.observation, WordleObservation)
        assert first.observation.feedback == feedback("slate", secret)
        last = env.step(WordleAction(guess=secret))
        assert (last.done, last.observation.solved, last.observation.answer) == (True, True, secret)
        assert env.state().step_count == 2
