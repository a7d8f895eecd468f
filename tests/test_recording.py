"""Trajectory recording on the server's lifecycle hooks (`ecotone.recording`), in JSON Lines and
MessagePack, read back with `read_episodes`; and the `ecotone_episode_started` hook itself."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

import ecotone
from ecotone.plugins.counter import CounterAction, CounterObservation
from ecotone.recording import EpisodeWriter, TrajectoryRecorder, read_episode, read_episodes
from ecotone.recording.reader import _msgpack_end
from tests.conftest import run_server, wait_until


class EpisodeStarts:
    """Records every `ecotone_episode_started` call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @ecotone.hookimpl
    def ecotone_episode_started(
        self, session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
    ) -> None:
        with self._lock:
            self.calls.append(
                {"session": session_id, "env": env, "episode_id": episode_id, "seed": seed,
                 "observation": observation}
            )  # fmt: skip


def test_episode_started_fires_on_each_successful_reset_with_the_typed_observation() -> None:
    starts = EpisodeStarts()
    with run_server("counter", plugins=[starts]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=4, episode_id="ep-a", start=3)
            env.step({"delta": 1})
            with pytest.raises(ecotone.ServerError):
                env.reset(bogus=1)  # refused before the env is called: no episode
            env.reset()
    assert [(c["session"], c["env"]) for c in starts.calls] == [(env.session_id, "counter")] * 2
    assert [(c["seed"], c["episode_id"]) for c in starts.calls] == [(4, "ep-a"), (None, None)]
    assert starts.calls[0]["observation"] == CounterObservation(count=3)


@pytest.mark.parametrize("fmt", ["jsonl", "msgpack"])
def test_the_server_recorder_writes_one_file_per_episode_and_reads_them_back(
    tmp_path: Path, fmt: Any
) -> None:
    recorder = TrajectoryRecorder(tmp_path, format=fmt)
    with run_server("counter", plugins=[recorder]) as server:
        with ecotone.connect(server.url) as env:
            env.reset(seed=9, max_steps=3)
            for delta in (1, 2, 3):
                env.step({"delta": delta})
            env.reset(episode_id="second")
            env.step({"delta": -1})
        assert wait_until(lambda: server.recorder.close_reason(env.session_id) is not None)
    files = sorted(p.suffix for p in (tmp_path / "counter").iterdir())
    assert files == [f".{fmt}"] * 2

    first, second = read_episodes(
        tmp_path, observation_type=CounterObservation, action_type=CounterAction
    )
    assert (first.source, first.env, first.session, first.seed) == (
        "server", "counter", env.session_id, 9,
    )  # fmt: skip
    assert first.actions == [CounterAction(delta=d) for d in (1, 2, 3)]
    assert [o.count for o in first.observations] == [0, 1, 3, 6]
    assert first.rewards == [1.0, 2.0, 3.0] and first.total_reward == 6.0
    assert first.truncateds == [False, False, True] and first.dones == [False] * 3
    assert len(first.durations_s) == 3 and all(d >= 0 for d in first.durations_s)
    assert first.end == "truncated" and first.finished
    assert (second.episode_id, second.length, second.end) == ("second", 1, "closed:client")
    assert not second.finished


def test_an_abandoned_episode_ends_with_reason_reset(tmp_path: Path) -> None:
    with run_server("counter", plugins=[TrajectoryRecorder(tmp_path)]) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.step({"delta": 1})
            env.reset()
    episodes = read_episodes(tmp_path)
    assert [(e.length, e.end) for e in episodes] == [(1, "reset"), (0, "closed:client")]
    assert episodes[0].observations[1] == {
        "reward": 1.0, "done": False, "truncated": False, "metadata": {}, "count": 1,
    }  # fmt: skip


@pytest.mark.parametrize("fmt", ["jsonl", "msgpack"])
def test_a_record_cut_off_by_a_crash_is_ignored(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"ep.{fmt}"
    writer = EpisodeWriter(path, fmt, {"source": "server", "env": "counter"})
    writer.reset({"count": 0})
    writer.step({"delta": 1}, {"count": 1}, 1.0, False, False, 0.001)
    writer.step({"delta": 2}, {"count": 3}, 2.0, False, False, 0.001)
    writer.end("done")
    whole = path.read_bytes()
    encode = msgspec.json.encode if fmt == "jsonl" else msgspec.msgpack.encode
    cut = whole.index(encode({"delta": 2})) + 3  # inside the second step's record
    path.write_bytes(whole[:cut])
    episode = read_episode(path)
    assert episode.actions == [{"delta": 1}] and episode.end is None


def test_the_msgpack_reader_finds_the_end_of_every_kind_of_value() -> None:
    values: list[Any] = [
        None, True, False, 0, 127, 128, 255, 256, 65535, 65536, 2**32, 2**63, -1, -32, -33,
        -129, -32769, -(2**31) - 1, 1.5, "", "x" * 31, "x" * 32, "x" * 255, "x" * 256,
        "x" * 70000, b"", b"y" * 300, b"y" * 70000, [], [1] * 15, [1] * 16, [1] * 70000,
        {}, {str(i): i for i in range(15)}, {str(i): i for i in range(16)},
        {str(i): [i, {"a": None}] for i in range(70000)}, msgspec.msgpack.Ext(1, b"z" * 16),
        msgspec.msgpack.Ext(2, b"z" * 3), msgspec.msgpack.Ext(3, b"z" * 300),
    ]  # fmt: skip
    stream = b"".join(msgspec.msgpack.encode(v) for v in values)
    pos, decoded = 0, []
    while pos < len(stream):
        end = _msgpack_end(stream, pos)
        decoded.append(msgspec.msgpack.decode(stream[pos:end]))
        pos = end
    assert decoded == values
    with pytest.raises(IndexError):
        _msgpack_end(msgspec.msgpack.encode({"a": [1, 2, 3]})[:-1], 0)


def test_an_unknown_recording_format_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown recording format 'csv'"):
        TrajectoryRecorder(tmp_path, format="csv")  # type: ignore[arg-type]


def test_ecotone_serve_record_writes_episodes_that_read_back(tmp_path: Path) -> None:
    """The CLI flag wires the recorder into a real server process (config key recording.dir)."""
    import re
    import signal

    import ecotone
    from ecotone.recording import read_episodes
    from tests.conftest import ecotone_serving

    traj = tmp_path / "traj"
    with ecotone_serving("counter", "--port", "0", "--record", traj, cwd=tmp_path) as proc:
        assert proc.stderr is not None
        match = re.search(r"at (ws://\S+)", proc.stderr.readline())
        assert match, "the server did not print its URL"
        with ecotone.connect(match[1]) as client:
            client.reset(seed=4, target=3)
            client.step({"delta": 1})
            client.step({"delta": 2})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    (episode,) = read_episodes(traj)
    assert episode.env == "counter" and episode.seed == 4
    assert [a["delta"] for a in episode.actions] == [1, 2]
    assert [o["count"] for o in episode.observations] == [0, 1, 3]
    assert episode.rewards == [1.0, 2.0]


def test_a_seated_game_is_recorded_move_by_move_in_its_public_view(tmp_path: Path) -> None:
    """`play` is recorded as a step naming its seat, with the public view after it (what any
    seat may see: a recording keeps no seat's hidden view); a simultaneous env's round is one
    step whose action holds each seat's move."""
    recorder = TrajectoryRecorder(tmp_path)
    with run_server("chess-duel", plugins=[recorder]) as server:
        with ecotone.connect(server.url) as game:
            game.reset(seed=1, max_moves=3)
            for seat, move in (("white", "e4"), ("black", "e5"), ("white", "Nf3")):
                game.play({"move": move}, seat=seat)
        assert wait_until(lambda: server.recorder.close_reason(game.session_id) is not None)
    (episode,) = read_episodes(tmp_path)
    assert episode.seats == ["white", "black", "white"]
    assert [a["move"] for a in episode.actions] == ["e4", "e5", "Nf3"]
    assert all(o["seat"] is None and o["legal_moves"] == [] for o in episode.observations)
    assert episode.truncateds == [False, False, True] and episode.end == "truncated"
    with run_server("dilemma", plugins=[TrajectoryRecorder(tmp_path / "rounds")]) as server:
        with ecotone.connect(server.url) as game:
            game.reset(seed=0, rounds=2)
            for _ in range(2):
                game.play_round({"player_0": {"move": "defect"}, "player_1": {"move": "cooperate"}})
        assert wait_until(lambda: server.recorder.close_reason(game.session_id) is not None)
    (rounds,) = read_episodes(tmp_path / "rounds")
    assert rounds.seats == [None, None] and rounds.end == "done"
    moves = {seat: action["move"] for seat, action in rounds.actions[0].items()}
    assert moves == {"player_0": "defect", "player_1": "cooperate"}
    assert rounds.observations[-1]["scores"] == [10, 0]
