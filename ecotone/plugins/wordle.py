"""`wordle`: guess a five-letter word in six tries; a text game for LLM agents.

Action `{"guess": str}`. The observation carries the feedback as a pattern (`"GY..G"`) and as a
list of marks, the guesses so far, the attempts left, and a text rendering to show a language
model. The words (secrets and accepted guesses) are the shipped list `data/wordle_words.txt`.
Rules are in `WordleEnv`'s docstring.

Tasks: every word of the list is a task (`WordleTask`), in two splits: `test` holds every fifth
word of the list, `train` the others. The word is the task's hidden field `secret`: clients
listing or fetching tasks see only the task's id, which is opaque (`task_id`: a hash of the
word, so a player shown the reset's answer is not shown the word). `reset(split="test",
index=3)` plays the fourth test word, `reset(seed=s)` a train word drawn with the seed, and
`reset(task="crane")` the word given (an inline task, named by its opaque id too).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final, Literal

import msgspec

import ecotone

WORD_LENGTH: Final = 5
GREEN, YELLOW, GRAY = "G", "Y", "."
GREEN_REWARD: Final = 0.1
YELLOW_REWARD: Final = 0.05
SOLVE_REWARD: Final = 1.0
_WORD = re.compile(r"[a-z]{5}")
Mark = Literal["green", "yellow", "gray"]
_MARK_NAMES: Final[dict[str, Mark]] = {GREEN: "green", YELLOW: "yellow", GRAY: "gray"}


@functools.cache
def words() -> tuple[str, ...]:
    """The shipped word list, in file order (secrets are drawn from it, guesses checked in it)."""
    text = resources.files("ecotone.plugins").joinpath("data/wordle_words.txt").read_text("utf-8")
    listed = (line.strip().lower() for line in text.splitlines())
    return tuple(w for w in listed if w and not w.startswith("#"))


@functools.cache
def _word_set() -> frozenset[str]:
    return frozenset(words())


class WordleTask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One game: the secret word to find (a hidden field: it stays on the server)."""

    secret: str


def task_id(task: WordleTask) -> str:
    """A task's id: `w-` and 12 hex digits of the SHA-256 of its word, stable and opaque.

    Opaque to a reader, not a cipher: whoever holds the word list (it ships in the package)
    can hash its words to find one. It keeps the word off the screens a player or an agent
    sees (the reset's answer, the web UI's header and task picker).
    """
    digest = hashlib.sha256(b"wordle:" + task.secret.encode("utf-8")).hexdigest()
    return "w-" + digest[:12]


def word_task(text: str) -> WordleTask:
    """The task `reset(task=TEXT)` plays when TEXT is no task's id: TEXT as the word.

    Raises:
        ValueError: TEXT is not five letters a-z (case and spaces around do not matter).
    """
    word = text.strip().lower()
    if not _WORD.fullmatch(word):
        raise ValueError("a wordle task is a task's id, or a five-letter word (a-z) to play")
    return WordleTask(secret=word)


@functools.cache
def task_set() -> ecotone.TaskSet[WordleTask]:
    """The published tasks: one per shipped word; every fifth word in `test`."""
    listed = words()
    return ecotone.TaskSet(
        {
            "train": [WordleTask(secret=w) for i, w in enumerate(listed) if i % 5 != 4],
            "test": [WordleTask(secret=w) for i, w in enumerate(listed) if i % 5 == 4],
        },
        id=task_id,
        type=WordleTask,
        hidden=("secret",),
        from_text=word_task,
    )


def feedback(guess: str, secret: str) -> str:
    """The Wordle pattern for `guess` against `secret`: G right place, Y elsewhere, . absent.

    A letter repeated in the guess is marked Y only as many times as the secret has it unmatched.
    """
    marks = [GRAY] * len(guess)
    unmatched: Counter[str] = Counter()
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = GREEN
        else:
            unmatched[s] += 1
    for i, g in enumerate(guess):
        if marks[i] == GRAY and unmatched[g] > 0:
            marks[i] = YELLOW
            unmatched[g] -= 1
    return "".join(marks)


class WordleAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    guess: str
    """A five-letter word (case does not matter)."""


class WordleTurn(msgspec.Struct, kw_only=True):
    guess: str
    feedback: str


class WordleObservation(ecotone.Observation, kw_only=True):
    guess: str = ""
    """The guess just scored ("" after reset)."""
    feedback: str = ""
    """Its pattern, one character per letter: G right place, Y in the word elsewhere, . absent."""
    marks: list[Mark] = []
    """The same feedback as words: green, yellow, gray."""
    history: list[WordleTurn] = []
    """Every guess of the episode so far, with its feedback."""
    remaining: int = 0
    """Guesses left."""
    solved: bool = False
    answer: str | None = None
    """The secret word, revealed once the episode is over."""
    text: str = ""
    """The board as text, with the rules: what to show a language model."""


class WordleState(ecotone.State, kw_only=True):
    secret: str = ""
    """The word to find: empty until the episode ends, as in the observation (anyone shown
    the state, a model or a web UI's player, does not learn it early; nor does the reset's
    task, named by an opaque id)."""
    guesses: list[str] = []
    max_guesses: int = 6
    allow_any_word: bool = False
    solved: bool = False


class WordleEnv(ecotone.Environment[WordleAction, WordleObservation, WordleState]):
    """Find the secret five-letter word in six guesses (`max_guesses`).

    Each guess must be five letters and a word of the list (reset option `allow_any_word`
    accepts any five letters); anything else is an `invalid_action` naming `guess` that does
    not use up a try. Each letter of a guess is marked green (right letter, right place),
    yellow (in the word, elsewhere) or gray (not in the word; a repeated letter is yellow only
    as often as the secret holds it). Reward per guess: +0.1 per green and +0.05 per yellow,
    plus 1 when the guess is the secret. The episode is done when the word is found or the
    guesses run out. The secret is the episode's task (`reset(split="test", index=3)`, drawn
    with the seed, or given: `reset(task="crane")`, `reset(task={"secret": "zzzzz"})` for a
    word outside the list); the reset's answer names it by an opaque id (`task_id`).
    """

    name = "wordle"
    version = "1"
    description = "Guess the seeded five-letter word in six tries, from green/yellow/gray hints."
    inline = True  # a set lookup and five comparisons per step
    tasks = task_set

    def __init__(self) -> None:
        self._state = WordleState()

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        allow_any_word: bool = False,
        max_guesses: int = 6,
        task: WordleTask | str | None = None,
    ) -> WordleObservation:
        if max_guesses < 1:
            raise ValueError(f"max_guesses must be >= 1, got {max_guesses}")
        if task is None:  # called directly, not through a server (which always picks one)
            secret = random.Random(seed).choice(words())
        else:
            secret = (task.secret if isinstance(task, WordleTask) else task).strip().lower()
            if not _WORD.fullmatch(secret):
                raise ValueError(f"secret must be five letters a-z, got {secret!r}")
        self._state = WordleState(
            episode_id=episode_id or uuid.uuid4().hex,
            secret=secret,
            max_guesses=max_guesses,
            allow_any_word=allow_any_word,
        )
        return self._observe()

    def step(self, action: WordleAction) -> WordleObservation:
        st = self._state
        guess = action.guess.strip().lower()
        if not _WORD.fullmatch(guess):
            raise ecotone.InvalidAction(
                f"a guess must be {WORD_LENGTH} letters a-z, got {action.guess!r}",
                field="guess",
            )
        if not st.allow_any_word and guess not in _word_set():
            raise ecotone.InvalidAction(f"{guess!r} is not in the word list", field="guess")
        st.step_count += 1
        st.guesses.append(guess)
        pattern = feedback(guess, st.secret)
        st.solved = guess == st.secret
        reward = GREEN_REWARD * pattern.count(GREEN) + YELLOW_REWARD * pattern.count(YELLOW)
        if st.solved:
            reward += SOLVE_REWARD
        done = st.solved or len(st.guesses) >= st.max_guesses
        return self._observe(round(reward, 6), done)

    def _observe(self, reward: float | None = None, done: bool = False) -> WordleObservation:
        st = self._state
        history = [WordleTurn(guess=g, feedback=feedback(g, st.secret)) for g in st.guesses]
        last = history[-1] if history else WordleTurn(guess="", feedback="")
        return WordleObservation(
            guess=last.guess,
            feedback=last.feedback,
            marks=[_MARK_NAMES[m] for m in last.feedback],
            history=history,
            remaining=st.max_guesses - len(st.guesses),
            solved=st.solved,
            answer=st.secret if done else None,
            text=self._render(history, done),
            reward=reward,
            done=done,
            metadata={"is_success": st.solved} if done else {},
        )

    def _render(self, history: list[WordleTurn], done: bool) -> str:
        st = self._state
        lines = [
            f"Wordle: find the secret {WORD_LENGTH}-letter English word in {st.max_guesses} "
            "guesses.",
            "Feedback per letter: G = right letter, right place; Y = in the word, wrong place; "
            ". = not in the word.",
        ]
        for i, turn in enumerate(history, 1):
            lines.append(f"{i}. {turn.guess.upper()}  {' '.join(turn.feedback)}")
        present = {g for t in history for g, m in zip(t.guess, t.feedback, strict=True) if m != "."}
        absent = sorted({g for t in history for g in t.guess} - present)
        if absent:
            lines.append("Not in the word: " + " ".join(a.upper() for a in absent))
        remaining = st.max_guesses - len(history)
        if st.solved:
            lines.append(f"Solved in {len(history)} guess{'es' if len(history) > 1 else ''}.")
        elif done:
            lines.append(f"Out of guesses. The word was {st.secret.upper()}.")
        else:
            lines.append(f"{remaining} guess{'es' if remaining > 1 else ''} left.")
        return "\n".join(lines)

    def state(self) -> WordleState:
        st = self._state
        if st.solved or len(st.guesses) >= st.max_guesses:
            return st
        return msgspec.structs.replace(st, secret="")

    def snapshot(self) -> bytes:
        """The episode, secret included (`state()` hides it while the game goes on; the
        server seals what leaves it)."""
        return msgspec.msgpack.encode(self._state)

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id`."""
        state = msgspec.msgpack.decode(data, type=WordleState)
        self._state = msgspec.structs.replace(state, episode_id=episode_id)

    def sample_action(self, rng: random.Random) -> WordleAction:
        """A random word of the list (always a valid guess)."""
        return WordleAction(guess=rng.choice(words()))

    def close(self) -> None:
        pass


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"wordle": WordleEnv}
