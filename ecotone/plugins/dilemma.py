"""`dilemma`: the iterated prisoner's dilemma, two seats moving at once.

A `SimultaneousEnvironment`: each round both seats (`player_0`, `player_1`) choose to
`cooperate` or `defect` at once (action `{"move": "cooperate"}`); then both moves are shown.
Payoffs per round, to each seat: both cooperate 3; both defect 1; a defector against a
cooperator 5, the cooperator 0. A game is `rounds` rounds (a reset option, 10 by default,
1-100). A seat that has not moved `move_deadline` (10 s) after the other did is silent: the
env's rule counts it as cooperating, and the round's `metadata["silent"]` names it.

Each seat's view holds its own reward for the last round; every view (the public one too)
shows the round, both seats' last moves (`none` before the first round) and the scores, in
seat order. Nothing is hidden: the game's tension is the simultaneity, not secrecy.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

import ecotone

MAX_ROUNDS = 100
PAYOFF: dict[tuple[str, str], tuple[int, int]] = {
    ("cooperate", "cooperate"): (3, 3),
    ("cooperate", "defect"): (0, 5),
    ("defect", "cooperate"): (5, 0),
    ("defect", "defect"): (1, 1),
}
"""(first seat's, second seat's) payoff for (first seat's, second seat's) move."""
SILENT_MOVE = "cooperate"
"""What a seat silent past the deadline is counted as doing (the env's rule)."""

Choice = Literal["cooperate", "defect"]
Shown = Literal["none", "cooperate", "defect"]
Rounds = Annotated[int, msgspec.Meta(ge=0, le=MAX_ROUNDS)]
Score = Annotated[int, msgspec.Meta(ge=0, le=5 * MAX_ROUNDS)]
PAIR = msgspec.Meta(min_length=2, max_length=2)


class DilemmaMove(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    move: Choice
    """`cooperate` or `defect`."""


class DilemmaView(ecotone.Observation, kw_only=True):
    round: Rounds = 0
    """Rounds played so far."""
    last: Annotated[list[Shown], PAIR] = msgspec.field(default_factory=lambda: ["none", "none"])
    """Both seats' moves in the last round, in seat order (`none` before the first)."""
    scores: Annotated[list[Score], PAIR] = msgspec.field(default_factory=lambda: [0, 0])
    """Both seats' scores so far, in seat order."""


class DilemmaState(ecotone.State, kw_only=True):
    rounds: int = 10
    moves: list[list[str]] = []
    """Every round's moves, in seat order."""
    silent: list[list[str]] = []
    """Every round's silent seats."""


class DilemmaEnv(ecotone.SimultaneousEnvironment[DilemmaMove, DilemmaView, DilemmaState]):
    """The iterated prisoner's dilemma: two seats move at once, `rounds` rounds."""

    name = "dilemma"
    version = "1"
    seats = ("player_0", "player_1")
    move_deadline = 10.0
    inline = True  # a few dict lookups per round

    def __init__(self) -> None:
        self._state = DilemmaState()
        self._scores = [0, 0]
        self._rewards = [0.0, 0.0]

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, rounds: int = 10
    ) -> DilemmaView:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
            raise ValueError(f"rounds must be an integer from 1 to {MAX_ROUNDS}, got {rounds!r}")
        self._state = DilemmaState(episode_id=episode_id or uuid.uuid4().hex, rounds=rounds)
        self._scores = [0, 0]
        self._rewards = [0.0, 0.0]
        return self.observe(None)

    def live_seats(self) -> tuple[str, ...]:
        return () if self._state.step_count >= self._state.rounds else self.seats

    def step(self, actions: dict[str, DilemmaMove]) -> None:
        state = self._state
        silent = [seat for seat in self.seats if seat not in actions]
        moves = [actions[s].move if s in actions else SILENT_MOVE for s in self.seats]
        first, second = PAYOFF[(moves[0], moves[1])]
        self._scores = [self._scores[0] + first, self._scores[1] + second]
        self._rewards = [float(first), float(second)]
        state.moves.append(moves)
        state.silent.append(silent)
        state.step_count += 1

    def observe(self, seat: str | None) -> DilemmaView:
        state = self._state
        played = state.step_count
        reward = None if seat is None or not played else self._rewards[self.seats.index(seat)]
        return DilemmaView(
            round=played,
            last=list(state.moves[-1]) if played else ["none", "none"],  # type: ignore[arg-type]
            scores=list(self._scores),
            reward=reward,
            done=played >= state.rounds,
            metadata={"silent": list(state.silent[-1])} if played else {},
        )

    def state(self) -> DilemmaState:
        return self._state

    def load_state(self, state: DilemmaState) -> None:
        """Put a saved game back: its State holds every round's moves, the scores and the last
        rewards follow from them."""
        self._state = state
        self._scores, self._rewards = [0, 0], [0.0, 0.0]
        for first_move, second_move in state.moves:
            first, second = PAYOFF[(first_move, second_move)]
            self._scores = [self._scores[0] + first, self._scores[1] + second]
            self._rewards = [float(first), float(second)]


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return {"dilemma": DilemmaEnv}
