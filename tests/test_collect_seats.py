"""`ecotone collect` on multi-agent envs: a policy per seat, or one for every seat (self-play),
each seat shown its own view only; returns per seat; each move recorded with its seat."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import ecotone.recording
from ecotone.collect import collect
from tests.conftest import run_server

REPO = Path(__file__).resolve().parent.parent


def first_legal(observation: dict[str, Any]) -> dict[str, str]:
    return {"move": observation["legal_moves"][0]}


def last_legal(observation: dict[str, Any]) -> dict[str, str]:
    return {"move": observation["legal_moves"][-1]}


def test_a_policy_per_seat_plays_chess_and_each_seat_sees_its_own_view(tmp_path: Path) -> None:
    seen: dict[str, list[Any]] = {"white": [], "black": []}

    def as_seat(seat: str, pick: Any) -> Any:
        def act(observation: dict[str, Any]) -> dict[str, str]:
            seen[seat].append(observation)
            return pick(observation)

        return act

    policies = {"white": as_seat("white", first_legal), "black": as_seat("black", last_legal)}
    with run_server("chess-duel") as server:
        run = functools.partial(
            collect,
            server.url,
            policies,
            out=tmp_path,
            episodes=2,
            max_steps=30,
            options={"max_moves": 30},
        )
        summary = trio.run(run)
    assert summary.episodes == 2 and summary.overall.errors == 0, summary.table()
    for seat, views in seen.items():
        assert views and all(v["seat"] == seat and v["to_move"] == seat for v in views)
    episodes = ecotone.recording.read_episodes(tmp_path)
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.seats[:4] == ["white", "black", "white", "black"]
        assert episode.end in ("done", "truncated") and 4 <= episode.length <= 30
        assert episode.policy is not None and "white=" in episode.policy
        assert [o["seat"] for o in episode.observations[1:5]] == episode.seats[:4]
    assert set(summary.overall.seat_returns) == {"white", "black"}


def test_self_play_one_policy_for_every_seat_ends_games_with_opposite_returns(
    tmp_path: Path,
) -> None:
    with run_server("chess-duel") as server:
        fen = "7k/5Q2/6K1/8/8/8/8/8 w - - 0 1"  # white mates at once with the right move
        summary = trio.run(
            functools.partial(
                collect,
                server.url,
                last_legal,
                out=tmp_path,
                episodes=1,
                options={"fen": fen},
            )
        )
    (episode,) = ecotone.recording.read_episodes(tmp_path)
    outcome_returns = summary.overall.seat_returns
    assert "(every seat)" in summary.policy
    if episode.end == "done":
        assert outcome_returns["white"] == -outcome_returns["black"]


def test_a_round_game_is_collected_round_by_round(tmp_path: Path) -> None:
    def defect(observation: dict[str, Any]) -> dict[str, str]:
        return {"move": "defect"}

    with run_server("dilemma") as server:
        summary = trio.run(
            functools.partial(
                collect, server.url, defect, out=tmp_path, episodes=1, options={"rounds": 3}
            )
        )
    (episode,) = ecotone.recording.read_episodes(tmp_path)
    assert (
        episode.end == "done"
        and sorted(s or "" for s in episode.seats) == ["player_0"] * 3 + ["player_1"] * 3
    )
    assert summary.overall.seat_returns == {"player_0": 3.0, "player_1": 3.0}  # 1 a round


def test_a_policy_per_seat_must_name_every_seat_and_only_them(tmp_path: Path) -> None:
    with run_server("chess-duel") as server:
        for policies, match in (
            ({"white": first_legal}, "none for 'black'"),
            ({"white": first_legal, "black": first_legal, "red": first_legal}, "no seat 'red'"),
        ):
            with pytest.raises(ValueError, match=match):
                trio.run(functools.partial(collect, server.url, policies, out=tmp_path))
    with run_server("counter") as server, pytest.raises(ValueError, match="has no seats"):
        trio.run(functools.partial(collect, server.url, {"a": first_legal}, out=tmp_path))


def test_the_cli_takes_a_policy_per_seat(tmp_path: Path) -> None:
    (tmp_path / "players.py").write_text(
        "def first(o):\n    return {'move': o['legal_moves'][0]}\n"
        "def last(o):\n    return {'move': o['legal_moves'][-1]}\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ecotone",
            "collect",
            "chess-duel",
            "--policy",
            "white=players:first",
            "--policy",
            "black=players:last",
            "--episodes",
            "1",
            "--max-steps",
            "6",
            "--out",
            str(tmp_path / "runs"),
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert set(summary["overall"]["seat_returns"]) == {"white", "black"}
    assert summary["policy"] == "white=players:first, black=players:last"


class Forking:
    """A policy for every seat (self-play): before the fork, `before(observation)`; in copy
    i, `after(i, seat, observation)`. Each actor's seat and copy are kept in `told`."""

    name = "forking"

    def __init__(self, before: Any, after: Any) -> None:
        self.before, self.after = before, after
        self.told: list[tuple[str | None, int | None]] = []
        self.sessions: dict[int | None, set[str]] = {}
        """The session each copy's actors reach the env's tools in."""

    def actor(self, episode: Any) -> Any:
        self.told.append((episode.seat, episode.fork))
        self.sessions.setdefault(episode.fork, set()).add(episode.tools.client.session_id)
        policy, seat, fork = self, episode.seat, episode.fork

        class Actor:
            async def act(self, observation: dict[str, Any]) -> Any:
                if fork is None:
                    return policy.before(observation)
                return policy.after(fork, seat, observation)

            async def refused(self, action: Any, reason: str) -> None:
                raise AssertionError(reason)

        return Actor()


def test_forks_of_a_chess_game_go_on_from_the_prefix_each_seat_played_by_its_policy(
    tmp_path: Path,
) -> None:
    def after(fork: int, seat: str, observation: dict[str, Any]) -> dict[str, str]:
        legal = observation["legal_moves"]
        return {"move": legal[fork % len(legal)]}

    policy = Forking(first_legal, after)
    out = tmp_path / "runs"
    with run_server("chess-duel") as server:
        summary = trio.run(
            functools.partial(
                collect,
                server.url,
                policy,
                out=out,
                episodes=1,
                max_steps=12,
                fork=2,
                fork_at=4,
                options={"max_moves": 10},
            )
        )
    assert summary.episodes == 2 and summary.overall.errors == 0, summary.table()
    assert sorted(policy.told, key=str) == sorted(
        [(seat, fork) for seat in ("white", "black") for fork in (None, 0, 1)], key=str
    )
    prefix = ecotone.recording.read_episode(out / "chess-duel" / "00000---r0.jsonl")
    assert prefix.end == "forked" and prefix.length == 4
    copies = [
        ecotone.recording.read_episode(out / "chess-duel" / f"00000---r0-f{i}.jsonl")
        for i in (0, 1)
    ]
    for i, copy in enumerate(copies):
        assert copy.actions[:4] == prefix.actions  # the prefix copied in front
        assert copy.seats == ["white", "black"] * 5 and copy.end == "truncated"
        assert copy.observations[5]["moves"] == 5  # the game went on: no new one
        lines = (out / "chess-duel" / f"00000---r0-f{i}.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        assert header["fork"] == i and header["forked_at"] == 4 and header["forks"] == 2
        assert policy.sessions[i] == {header["session"]}  # its tools are the copy's
    assert copies[0].actions[4] != copies[1].actions[4]  # each copy its own policy's move


def test_forks_of_a_round_game_keep_each_seats_return_from_the_prefix(tmp_path: Path) -> None:
    def after(fork: int, seat: str, observation: dict[str, Any]) -> dict[str, str]:
        return {"move": "defect" if fork == 1 and seat == "player_0" else "cooperate"}

    policy = Forking(lambda observation: {"move": "cooperate"}, after)
    with run_server("dilemma") as server:
        summary = trio.run(
            functools.partial(
                collect,
                server.url,
                policy,
                out=tmp_path,
                episodes=1,
                fork=2,
                fork_at=2,  # one round: both seats' moves
                options={"rounds": 3},
            )
        )
    assert summary.episodes == 2 and summary.overall.errors == 0, summary.table()
    # copy 0: three rounds of 3 each; copy 1: 3 each, then player_0 defects twice (5 and 0)
    assert summary.overall.seat_returns == {"player_0": (9 + 13) / 2, "player_1": (9 + 3) / 2}
    assert summary.overall.mean_steps == 6
