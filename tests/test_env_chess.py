"""The bundled `chess` env (rules, seeded determinism, the real client end to end) and the
kernel's handling of `ecotone.InvalidAction`, the exception an env raises to refuse an action."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import msgspec
import pytest

import ecotone
from ecotone.kernel import Engine, EnvSpec
from ecotone.plugins.chess import ChessAction, ChessEnv, ChessObservation, ChessState
from ecotone.specs import Error, ObservationFrame, StepManyResult
from tests.conftest import run_server
from tests.engine_driver import Driver

START_MOVES = sorted(
    "a2a3 a2a4 b2b3 b2b4 c2c3 c2c4 d2d3 d2d4 e2e3 e2e4 "
    "f2f3 f2f4 g2g3 g2g4 h2h3 h2h4 b1a3 b1c3 g1f3 g1h3".split()
)
SCHOLARS_MATE_IN_ONE = "r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4"
BACK_RANK = "7k/5ppp/8/8/8/8/8/R5K1 b - - 0 1"
"""Black (the agent) to move; after ...Kg8 white mates with Ra8."""


def play(env: ecotone.EnvClient[Any, Any], moves: int, pick: random.Random) -> list[Any]:
    """Up to `moves` moves, each picked from the observation's legal moves with `pick`."""
    trajectory = []
    obs = env.reset(seed=11, opponent="greedy").observation
    trajectory.append(obs)
    for _ in range(moves):
        result = env.step({"move": pick.choice(obs["legal_moves"])})
        obs = result.observation
        trajectory.append(obs)
        if result.finished:
            break
    return trajectory


# --- rules -----------------------------------------------------------------------------------


def test_a_fresh_game_shows_the_start_position_and_the_twenty_legal_moves() -> None:
    env = ChessEnv()
    obs = env.reset(seed=0, episode_id="game-1")
    assert obs.fen == "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    assert obs.legal_moves == START_MOVES
    assert obs.board.splitlines()[0] == "8 r n b q k b n r"
    assert obs.board.splitlines()[-1] == "  a b c d e f g h"
    assert (obs.reward, obs.done, obs.result, obs.opponent_move) == (None, False, None, None)
    assert (env.state().episode_id, env.state().step_count, env.state().fen) == (
        "game-1",
        0,
        obs.fen,
    )


def test_san_and_uci_moves_are_both_accepted_and_each_gets_a_reply() -> None:
    env = ChessEnv()
    env.reset(seed=5)
    first = env.step(ChessAction(move="e4"))
    second = env.step(ChessAction(move="g1f3"))
    state = env.state()
    assert (first.agent_move, second.agent_move) == ("e2e4", "g1f3")
    assert state.moves == ["e2e4", first.opponent_move, "g1f3", second.opponent_move]
    assert (state.step_count, first.reward, first.done) == (2, 0.0, False)
    assert state.fen == second.fen


def test_mating_the_opponent_is_a_win_worth_plus_one() -> None:
    env = ChessEnv()
    env.reset(seed=0, fen=SCHOLARS_MATE_IN_ONE)
    obs = env.step(ChessAction(move="Qxf7#"))
    assert (obs.reward, obs.done, obs.truncated) == (1.0, True, False)
    assert (obs.result, obs.termination, obs.legal_moves) == ("1-0", "checkmate", [])
    assert (obs.agent_move, obs.opponent_move) == ("h5f7", None)
    assert env.state().result == "1-0"


def test_the_greedy_opponent_takes_a_mate_in_one_and_the_agent_loses_minus_one() -> None:
    env = ChessEnv()
    first = env.reset(seed=123, color="black", opponent="greedy", fen=BACK_RANK)
    assert first.opponent_move is None  # black to move in the FEN: the agent starts
    obs = env.step(ChessAction(move="Kg8"))
    assert obs.opponent_move == "a1a8"
    assert (obs.reward, obs.done, obs.result, obs.termination) == (-1.0, True, "1-0", "checkmate")


def test_fifty_moves_without_a_capture_or_pawn_move_is_a_draw_worth_zero() -> None:
    env = ChessEnv()
    env.reset(seed=0, fen="4k3/8/8/8/8/8/8/R3K3 w - - 99 80")
    obs = env.step(ChessAction(move="Ra2"))
    assert (obs.reward, obs.done, obs.result, obs.termination) == (
        0.0,
        True,
        "1/2-1/2",
        "fifty_moves",
    )
    assert obs.opponent_move is None


def test_as_black_the_opponent_moves_first_in_the_reset_observation() -> None:
    env = ChessEnv()
    obs = env.reset(seed=2, color="black")
    assert obs.opponent_move is not None
    assert env.state().moves == [obs.opponent_move]
    assert obs.fen.split()[1] == "b"
    assert obs.color == "black"


def test_max_moves_truncates_the_game_after_that_many_agent_moves() -> None:
    env = ChessEnv()
    obs = env.reset(seed=1, max_moves=2)
    rng = random.Random(0)
    obs = env.step(env.sample_action(rng))
    assert not obs.truncated
    obs = env.step(env.sample_action(rng))
    assert (obs.truncated, obs.done, obs.reward, obs.result) == (True, False, 0.0, None)


def test_the_greedy_opponent_takes_a_hanging_queen() -> None:
    env = ChessEnv()
    # White (agent) to move; whatever it plays but saving the queen, black's bishop takes it.
    fen = "4k3/8/8/8/2b5/8/8/Q3K3 w - - 0 1"
    obs = env.reset(seed=9, opponent="greedy", fen=fen)
    obs = env.step(ChessAction(move="Qa2"))  # into the bishop's diagonal
    assert obs.opponent_move == "c4a2"


def test_bad_reset_options_are_refused_with_what_is_allowed() -> None:
    env = ChessEnv()
    with pytest.raises(ValueError, match="random, greedy"):
        env.reset(opponent="stockfish")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="white or black"):
        env.reset(color="red")  # type: ignore[arg-type]


def test_sample_actions_are_always_legal_through_whole_games() -> None:
    env = ChessEnv()
    rng = random.Random(4)
    for seed in range(3):
        obs = env.reset(seed=seed)
        while not (obs.done or obs.truncated):
            obs = env.step(env.sample_action(rng))
        assert obs.result in ("1-0", "0-1", "1/2-1/2")
        assert obs.reward == {"1-0": 1.0, "0-1": -1.0, "1/2-1/2": 0.0}[obs.result]


def test_the_module_imports_and_lists_chess_without_the_chess_package() -> None:
    script = (
        "import sys; sys.modules['chess'] = None\n"  # makes `import chess` fail
        "from ecotone.kernel import Registry\n"
        "print('chess' in Registry.discover().environments())\n"
        "from ecotone.plugins.chess import ChessEnv\n"
        "try:\n"
        "    ChessEnv()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    listed, error = out.stdout.splitlines()
    assert listed == "True"
    assert "pip install 'ecotone[chess]'" in error


# --- illegal moves: ecotone.InvalidAction through the kernel and the client ------------------


def test_an_illegal_move_is_invalid_action_with_the_legal_moves_and_the_game_goes_on() -> None:
    with ecotone.connect("inproc://chess", state_type=ChessState) as env:
        env.reset(seed=0)
        for bad in ("e2e5", "Ke2", "hello", "0000", "--"):
            with pytest.raises(ecotone.InvalidActionError) as refused:
                env.step({"move": bad})
            error = refused.value
            assert (error.code, error.field) == ("invalid_action", "move")
            assert error.details["path"] == "$.move"
            assert error.details["legal_moves"] == START_MOVES
            assert "Nf3" in error.details["legal_moves_san"]
            assert "e2e4" in error.message and repr(bad) in error.message
        assert env.state().step_count == 0  # refused moves do not count
        assert env.step({"move": "e4"}).observation["agent_move"] == "e2e4"
        assert env.state().step_count == 1


class _Picky(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    word: str = ""


class _PickyObservation(ecotone.Observation, kw_only=True):
    accepted: int = 0


class _PickyEnv(ecotone.Environment[_Picky, _PickyObservation, ecotone.State]):
    """Refuses every word but "yes", with details that are not plain data."""

    inline = True

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Any:
        self._state = ecotone.State(episode_id=episode_id)
        return _PickyObservation()

    def step(self, action: _Picky) -> _PickyObservation:
        if action.word != "yes":
            raise ecotone.InvalidAction(
                "only yes will do", field="word", expected=["yes"], odd=object()
            )
        self._state.step_count += 1
        return _PickyObservation(accepted=self._state.step_count)

    def state(self) -> ecotone.State:
        return self._state


async def test_the_engine_turns_invalid_action_into_an_invalid_action_frame() -> None:
    driver = Driver(Engine(EnvSpec.from_class(_PickyEnv, "picky")))
    conn = driver.peer()
    session = (await driver.ask(conn, {"op": "open", "id": 1})).session
    await driver.ask(conn, {"op": "reset", "id": 2, "session": session})

    refused = await driver.ask(
        conn, {"op": "step", "id": 3, "session": session, "action": {"word": "no"}}
    )
    assert isinstance(refused, Error)
    assert (refused.code, refused.id, refused.session) == ("invalid_action", 3, session)
    assert refused.message == "invalid action for env 'picky': only yes will do (field `word`)"
    odd = refused.details.pop("odd")
    assert odd.startswith("<object object at")  # not plain data: sent as its repr
    assert refused.details == {
        "field": "word",
        "path": "$.word",
        "reason": "only yes will do",
        "expected": ["yes"],
    }
    conn.codec.encode(refused)  # encodable as it stands

    accepted = await driver.ask(
        conn, {"op": "step", "id": 4, "session": session, "action": {"word": "yes"}}
    )
    assert isinstance(accepted, ObservationFrame)
    assert msgspec.json.decode(accepted.observation)["accepted"] == 1


async def test_invalid_action_in_step_many_fails_only_its_own_item() -> None:
    driver = Driver(Engine(EnvSpec.from_class(_PickyEnv, "picky")))
    conn = driver.peer()
    sessions = []
    for rid in (1, 2, 3):
        session = (await driver.ask(conn, {"op": "open", "id": rid})).session
        await driver.ask(conn, {"op": "reset", "id": 10 + rid, "session": session})
        sessions.append(session)
    words = ("yes", "maybe", "yes")
    steps = [{"session": s, "action": {"word": w}} for s, w in zip(sessions, words, strict=True)]
    reply = await driver.ask(conn, {"op": "step_many", "id": 3, "steps": steps})
    assert isinstance(reply, StepManyResult)
    kinds = [r.code if isinstance(r, Error) else "ok" for r in reply.results]
    assert kinds == ["ok", "invalid_action", "ok"]


# --- determinism and the real client over a real server --------------------------------------


def test_the_same_seed_and_moves_replay_the_same_game_over_a_server() -> None:
    with run_server("chess") as server:
        with ecotone.connect(server.url) as first, ecotone.connect(server.url) as second:
            one = play(first, 12, random.Random(7))
            two = play(second, 12, random.Random(7))
    assert len(one) > 1
    assert [o["fen"] for o in one] == [o["fen"] for o in two]
    assert one == two


def test_the_random_opponent_depends_on_the_seed() -> None:
    env = ChessEnv()
    replies = set()
    for seed in range(6):
        env.reset(seed=seed)
        replies.add(env.step(ChessAction(move="e4")).opponent_move)
    assert len(replies) > 1


def test_a_whole_game_through_the_client_ends_with_a_result_that_matches_the_reward() -> None:
    with (
        run_server("chess") as server,
        ecotone.connect(
            server.url, observation_type=ChessObservation, state_type=ChessState
        ) as env,
    ):
        result = env.reset(seed=3, opponent="greedy", episode_id="e2e")
        pick = random.Random(3)
        steps = 0
        while not result.finished:
            result = env.step({"move": pick.choice(result.observation.legal_moves)})
            steps += 1
        obs = result.observation
        assert result.done and obs.result is not None
        assert result.reward == {"1-0": 1.0, "0-1": -1.0, "1/2-1/2": 0.0}[obs.result]
        state = env.state()
        assert (state.episode_id, state.step_count, state.fen) == ("e2e", steps, obs.fen)
        with pytest.raises(ecotone.ServerError) as over:
            env.step({"move": "e4"})
        assert over.value.code == "episode_done"
