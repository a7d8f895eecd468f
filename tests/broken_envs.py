"""Envs for the conformance suite's own tests: two that keep the contract (one with tasks whose
fields are hidden), and deliberately broken variants of them, each breaking one rule (the suite
must fail the check for that rule).

Contributed to a Registry as the plugin module `tests.broken_envs` (`ecotone_environments`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import msgspec

import ecotone
from ecotone.plugins.wordle import WordleEnv, WordleTask, words


class Guess(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    guess: Annotated[int, msgspec.Meta(ge=1, le=6)]


class Roll(ecotone.Observation, kw_only=True):
    roll: int
    noise: float
    """A seeded random float: two unseeded episodes practically never share one."""


class Tally(ecotone.State, kw_only=True):
    total: int = 0
    max_steps: int = 6


class DiceEnv(ecotone.Environment[Guess, Roll, Tally]):
    """Keeps the contract: seeded dice, a reward for guessing the next roll, truncated after
    `max_steps` steps. No sample_action: the suite draws guesses from the schema (1 to 6)."""

    name = "dice"
    inline = True

    def __init__(self) -> None:
        self._state = Tally()
        self._rng = random.Random()
        self.closed = False

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 6
    ) -> Roll:
        self._rng = random.Random(seed)
        self._state = Tally(episode_id=episode_id or uuid.uuid4().hex, max_steps=max_steps)
        return Roll(roll=self._rng.randint(1, 6), noise=self._rng.random())

    def step(self, action: Guess) -> Roll:
        st = self._state
        st.step_count += 1
        roll = self._rng.randint(1, 6)
        st.total += roll
        return Roll(
            roll=roll,
            noise=self._rng.random(),
            reward=1.0 if action.guess == roll else 0.0,
            truncated=st.step_count >= st.max_steps,
        )

    def state(self) -> Tally:
        return self._state

    def snapshot(self) -> bytes:
        return msgspec.msgpack.encode((self._state, self._rng.getstate()))

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        state, (version, internal, gauss) = msgspec.msgpack.decode(data, type=tuple[Tally, Any])
        self._state = msgspec.structs.replace(state, episode_id=episode_id)
        self._rng.setstate((version, tuple(internal), gauss))

    def close(self) -> None:
        self.closed = True


class UnseededEnv(DiceEnv):
    """Ignores the seed: every reset starts from fresh randomness."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 6
    ) -> Roll:
        return super().reset(seed=None, episode_id=episode_id, max_steps=max_steps)


class UnseededStepEnv(DiceEnv):
    """Seeds the first observation but rolls the steps with the process-wide random module."""

    def step(self, action: Guess) -> Roll:
        self._rng = random.Random()
        return super().step(action)


class SharedStateEnv(DiceEnv):
    """Keeps its state and dice in class attributes: every instance shares one episode."""

    shared: ClassVar[dict[str, Any]] = {}

    @property
    def _state(self) -> Tally:
        return SharedStateEnv.shared.setdefault("state", Tally())

    @_state.setter
    def _state(self, value: Tally) -> None:
        SharedStateEnv.shared["state"] = value

    @property
    def _rng(self) -> random.Random:
        return SharedStateEnv.shared.setdefault("rng", random.Random())

    @_rng.setter
    def _rng(self, value: random.Random) -> None:
        SharedStateEnv.shared["rng"] = value


class FrozenStepCountEnv(DiceEnv):
    """Never counts its steps."""

    def step(self, action: Guess) -> Roll:
        obs = super().step(action)
        self._state.step_count -= 1
        return obs


class StepCountCarriedOverEnv(DiceEnv):
    """Carries step_count over from one episode to the next (so its truncation, which counts
    on step_count, comes early: replays differ too)."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 6
    ) -> Roll:
        steps = self._state.step_count
        obs = super().reset(seed=seed, episode_id=episode_id, max_steps=max_steps)
        self._state.step_count = steps
        return obs


class EpisodeIdIgnoredEnv(DiceEnv):
    """Makes up its own episode_id even when given one."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, max_steps: int = 6
    ) -> Roll:
        return super().reset(seed=seed, episode_id=None, max_steps=max_steps)


class BadObservationEnv(DiceEnv):
    """Sends `roll` as a string although its schema says integer (msgspec does not check the
    field types of a Struct it encodes)."""

    def step(self, action: Guess) -> Roll:
        obs = super().step(action)
        obs.roll = str(obs.roll)  # type: ignore[assignment]
        return obs


class BadStateEnv(DiceEnv):
    """Keeps `total` as a float although its schema says integer."""

    def step(self, action: Guess) -> Roll:
        obs = super().step(action)
        self._state.total += 0.5  # type: ignore[assignment]
        return obs


class CloseRaisesTwiceEnv(DiceEnv):
    """close() works once and raises the second time: not idempotent."""

    def close(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


class CloseRaisesEnv(DiceEnv):
    """close() raises the first time (when the kernel calls it: the kernel logs it and the
    client never sees it), then does nothing."""

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            raise OSError("cannot release the dice")


class BareRoll(msgspec.Struct, kw_only=True):
    """An observation type without ecotone.Observation's fields: no `truncated`, and `reward`
    only when it is set."""

    roll: int
    noise: float
    done: bool = False
    reward: float | None = None


class NoTruncatedEnv(DiceEnv):
    """Its observations have no `truncated` field."""

    observation_type = BareRoll

    def step(self, action: Guess) -> BareRoll:  # type: ignore[override]
        obs = super().step(action)
        return BareRoll(roll=obs.roll, noise=obs.noise, reward=obs.reward)


class BareTally(msgspec.Struct, kw_only=True):
    """A state type without ecotone.State's episode_id and step_count."""

    total: int = 0


class NoStateFieldsEnv(DiceEnv):
    """Its State has neither episode_id nor step_count."""

    state_type = BareTally

    def state(self) -> BareTally:  # type: ignore[override]
        return BareTally(total=self._state.total)


class PickyEnv(DiceEnv):
    """Refuses every guess with `ecotone.InvalidAction`, which the contract allows (a move the
    Action type cannot rule out). Not broken: the suite cannot play it with actions drawn from
    the schema, and must say so rather than fail it."""

    def step(self, action: Guess) -> Roll:
        raise ecotone.InvalidAction("the dice are asleep", field="guess")


class RngNotSavedEnv(DiceEnv):
    """Saves its State but not its random generator: a restored episode rolls other dice."""

    def snapshot(self) -> bytes:
        return msgspec.msgpack.encode(self._state)

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        state = msgspec.msgpack.decode(data, type=Tally)
        self._state = msgspec.structs.replace(state, episode_id=episode_id)


class ForkKeepsEpisodeIdEnv(DiceEnv):
    """Ignores the episode id a restore gives: every fork runs the original's episode id."""

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        kept = self._state.episode_id
        super().restore(data, episode_id=episode_id)
        self._state.episode_id = kept or "the-same-id"


# --- tasks with hidden fields: a vault per task, opened by its code word --------------------

VAULTS: dict[str, str] = {
    "guess": "riddle",  # the word every observation's note says: shown, but not as a leak
    "amber": "resin",
    "basil": "herb",
    "cedar": "timber",
    "delta": "river",
    "ember": "glow",
    "fable": "tale",
    "gamma": "greek",
}
"""Each vault's code word, and the clue that goes with it."""


class Vault(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A vault: its name (public), its code word and clues (hidden)."""

    name: str
    word: str
    clues: list[dict[str, str]] = []


def _vaults(id: Any = "name") -> ecotone.TaskSet[Vault]:
    records = [
        Vault(name=f"vault-{i}", word=word, clues=[{"clue": clue, "kind": "meaning"}])
        for i, (word, clue) in enumerate(VAULTS.items())
    ]
    return ecotone.TaskSet(
        {"train": records[:6], "test": records[6:]}, id=id, type=Vault, hidden=("word", "clues")
    )


class Attempt(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    word: str


class Door(ecotone.Observation, kw_only=True):
    opened: bool = False
    tries_left: int = 0
    note: str = ""


class VaultState(ecotone.State, kw_only=True):
    tries: int = 0
    max_tries: int = 3
    clue: str = ""


class VaultEnv(ecotone.Environment[Attempt, Door, VaultState]):
    """Keeps the contract and its tasks' hidden fields: each task's code word and clues stay
    on the server, its id is the vault's name, and every note says the same rule (which holds
    the code word of one vault: a word the env shows whatever the task, not a leak)."""

    name = "vault"
    readme = "A vault per task: open it with its code word."
    inline = True
    tasks: ClassVar[Any] = staticmethod(_vaults)

    def __init__(self) -> None:
        self._state = VaultState()
        self._vault = Vault(name="", word="")

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        task: Vault | None = None,
    ) -> Door:
        assert task is not None  # a server always picks one
        self._vault = task
        self._state = VaultState(episode_id=episode_id or uuid.uuid4().hex)
        return Door(tries_left=3, note=self.note())

    def note(self) -> str:
        return "guess the code word that opens this vault"

    def step(self, action: Attempt) -> Door:
        st = self._state
        st.step_count += 1
        st.tries += 1
        opened = action.word == self._vault.word
        return Door(
            opened=opened,
            tries_left=st.max_tries - st.tries,
            note=self.note(),
            reward=1.0 if opened else 0.0,
            done=opened,
            truncated=not opened and st.tries >= st.max_tries,
        )

    def state(self) -> VaultState:
        return self._state


class VaultIdIsTheWordEnv(VaultEnv):
    """Names each task by its code word: every task's id, listing and reset shows it."""

    tasks: ClassVar[Any] = staticmethod(lambda: _vaults(id="word"))


class VaultTellsTheWordEnv(VaultEnv):
    """Its note gives the code word away."""

    def note(self) -> str:
        return f"psst: the code word is {self._vault.word.upper()}"


class VaultStateShowsAClueEnv(VaultEnv):
    """Its state shows the task's first clue: a leaf of the structured hidden field `clues`."""

    def state(self) -> VaultState:
        return msgspec.structs.replace(self._state, clue=self._vault.clues[0]["clue"])


class VaultDescribedWithAWordEnv(VaultEnv):
    """Its description names one vault's code word (the test split's first)."""

    description = "Open the vault: the first test vault's word is fable."


class WordleByWordEnv(WordleEnv):
    """Wordle as it was: its tasks named by their words (the word hidden, yet in every id)."""

    tasks: ClassVar[Any] = staticmethod(
        lambda: ecotone.TaskSet(
            {"train": [WordleTask(secret=w) for w in words()[:40]]},
            id="secret",
            type=WordleTask,
            hidden=("secret",),
        )
    )


BROKEN: dict[str, tuple[type, set[str]]] = {
    "unseeded": (UnseededEnv, {"seeded_determinism"}),
    "unseeded_step": (UnseededStepEnv, {"seeded_determinism"}),
    "shared_state": (SharedStateEnv, {"concurrent_sessions"}),
    "frozen_step_count": (FrozenStepCountEnv, {"step_count"}),
    "step_count_carried_over": (StepCountCarriedOverEnv, {"step_count", "seeded_determinism"}),
    "episode_id_ignored": (EpisodeIdIgnoredEnv, {"episode_id"}),
    "bad_observation": (BadObservationEnv, {"observation_schema"}),
    "bad_state": (BadStateEnv, {"state_schema"}),
    "close_raises_twice": (CloseRaisesTwiceEnv, {"close_idempotent"}),
    "close_raises": (CloseRaisesEnv, {"close_idempotent"}),
    "no_truncated": (NoTruncatedEnv, {"observation_flags"}),
    "no_state_fields": (NoStateFieldsEnv, {"describe", "step_count", "episode_id"}),
    "rng_not_saved": (RngNotSavedEnv, {"snapshots"}),
    "fork_keeps_episode_id": (ForkKeepsEpisodeIdEnv, {"snapshots"}),
    "vault_id_is_the_word": (VaultIdIsTheWordEnv, {"hidden_task_fields"}),
    "vault_tells_the_word": (VaultTellsTheWordEnv, {"hidden_task_fields"}),
    "vault_state_shows_a_clue": (VaultStateShowsAClueEnv, {"hidden_task_fields"}),
    "vault_described_with_a_word": (VaultDescribedWithAWordEnv, {"hidden_task_fields"}),
    "wordle_by_word": (WordleByWordEnv, {"hidden_task_fields"}),
}
"""Each broken env, by name, with the checks the suite must fail for it (and only those)."""


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    sound = {"dice": DiceEnv, "picky": PickyEnv, "vault": VaultEnv}
    return sound | {name: cls for name, (cls, _) in BROKEN.items()}
