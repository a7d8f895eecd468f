"""Durable checkpoints: a server killed (`kill -9`) or stopped (SIGTERM) mid-episode, a new
one on the same directory, and the client resumes: the rest of the episode equals an
uninterrupted run, step for step. Torn and foreign files are refused, never half restored."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.kernel.config import SnapshotConfig
from ecotone.specs import Restore, Snapshot, Snapshotted
from tests.conftest import run_server, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`ecotone serve ENV` as its own process on a fixed port and checkpoint directory."""

    def __init__(self, env: str, directory: Path, port: int) -> None:
        self.env, self.directory, self.port = env, directory, port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [sys.executable, "-m", "ecotone", "serve", self.env, "--port", str(self.port)]
        args += ["--checkpoint-dir", str(self.directory)]
        self.process = subprocess.Popen(args, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    stderr = self.process.stderr.read().decode()  # type: ignore[union-attr]
                    raise RuntimeError(stderr) from None
                time.sleep(0.05)
        raise TimeoutError("the server did not start")

    def stop(self, sig: int) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served("chess", tmp_path / "checkpoints", _free_port())
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.stop(signal.SIGKILL)


def _play(env: Any, moves: int, interrupt: dict[int, Any] | None = None) -> list[str]:
    """A seeded chess game, each move the i-th legal one (mod their number): its positions."""
    result = env.reset(seed=3)
    seen = [result.observation["fen"]]
    for i in range(moves):
        if result.finished:
            break
        if interrupt and i in interrupt:
            interrupt[i]()
        legal = result.observation["legal_moves"]
        result = env.step({"move": legal[i % len(legal)]})
        seen.append(result.observation["fen"])
    return seen


def test_a_killed_server_and_a_stopped_one_are_resumed_step_for_step(served: Served) -> None:
    with ecotone.connect(served.url) as env:
        uninterrupted = _play(env, 30)

    def kill() -> None:
        served.stop(signal.SIGKILL)  # nothing written at the end: the checkpoint of step 8
        served.start()

    def stop() -> None:
        assert served.stop(signal.SIGTERM) == 0  # writes the session's checkpoint: step 22
        served.start()

    def resumed_where_it_stopped() -> None:
        assert env._resumer is not None and env._resumer.checkpointed == 22

    env = ecotone.connect(served.url, resume=True, checkpoint_every=4)
    try:
        resumed = _play(env, 30, {10: kill, 22: stop, 23: resumed_where_it_stopped})
        assert env._resumer is not None and env._resumer.resumes == 2
    finally:
        env.close()
    assert len(uninterrupted) == 31 and resumed == uninterrupted
    # The client closed the session: nothing to resume (the file goes once the answer went).
    assert wait_until(lambda: list(served.directory.glob("*.ckpt")) == [])


def test_with_no_checkpoint_written_the_episode_is_replayed_from_its_reset(served: Served) -> None:
    with ecotone.connect(served.url) as env:
        uninterrupted = _play(env, 12)

    def kill() -> None:
        served.stop(signal.SIGKILL)
        served.start()

    with ecotone.connect(served.url, resume=True) as env:  # no checkpoint_every
        assert _play(env, 12, {6: kill}) == uninterrupted


def test_torn_and_foreign_checkpoint_files_are_refused(served: Served) -> None:
    first = ecotone.connect(served.url)
    second = ecotone.connect(served.url)
    for env in (first, second):
        env.reset(seed=1)
        env.step({"move": "e2e4"})
    assert served.stop(signal.SIGTERM) == 0
    files = sorted(served.directory.glob("*.ckpt"))
    assert len(files) == 2
    keys = [first.resume_key, second.resume_key]
    first.close()
    second.close()
    served.start()
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])  # torn
    files[1].write_bytes(data)  # another session's file under this one's name
    for key in keys:
        with ecotone.connect(served.url) as env:
            core = env.connection.core
            frame = Restore(id=core.next_id(), session=env.session_id, checkpoint=key)
            with pytest.raises(ecotone.ServerError) as refused:
                core.check(env.connection.request(frame, 10))
            assert refused.value.code == "snapshot_mismatch"
            assert refused.value.details["differs"] == "seal"
            env.reset()  # the server goes on


def test_a_durable_snapshot_needs_a_checkpoint_directory() -> None:
    with run_server("counter") as server:
        with pytest.raises(ValueError, match="--checkpoint-dir"):
            ecotone.connect(server.url, resume=True)
        with ecotone.connect(server.url) as env:
            assert env.resume_key is None


def test_a_durable_snapshot_writes_one_sealed_file_per_session(tmp_path: Path) -> None:
    config = SnapshotConfig(checkpoint_dir=str(tmp_path / "ckpt"))
    with run_server("counter", snapshots=config) as server:
        with ecotone.connect(server.url) as env:
            assert env.resume_key is not None and len(env.resume_key) >= 32
            env.reset()
            env.step({"delta": 41})
            core = env.connection.core
            frame = Snapshot(id=core.next_id(), session=env.session_id, durable=True)
            answer = core.check(env.connection.request(frame, 10))
            assert isinstance(answer, Snapshotted) and answer.durable
            (written,) = (tmp_path / "ckpt").glob("*.ckpt")
            assert env.resume_key not in written.name and b"41" not in written.read_bytes()
            assert oct(os.stat(tmp_path / "ckpt").st_mode & 0o777) == "0o700"


def test_a_refused_step_a_reset_and_a_restore_are_resumed_as_they_happened(
    served: Served,
) -> None:
    """The resuming client replays only steps that happened, never an earlier episode's
    checkpoint, and a restore is the episode it resumes from then on."""

    def kill() -> None:
        served.stop(signal.SIGKILL)
        served.start()

    with ecotone.connect(served.url) as plain:  # the moves, uninterrupted
        check = plain.reset(seed=5)
        expected = []
        for i in range(4):
            check = plain.step({"move": check.observation["legal_moves"][i]})
            expected.append(check.observation["fen"])
    env = ecotone.connect(served.url, resume=True, checkpoint_every=3)
    try:
        first = env.reset(seed=4)
        for i in range(4):  # episode A, checkpointed at its step 3
            first = env.step({"move": first.observation["legal_moves"][i % 2]})
        result = env.reset(seed=5)  # episode B: checkpointed at its start
        seen = []
        for i in range(2):
            result = env.step({"move": result.observation["legal_moves"][i]})
            seen.append(result.observation["fen"])
            with pytest.raises(ecotone.InvalidActionError):
                env.step({"move": "a1a8"})  # refused: not a step, never replayed
        kill()  # the next step resumes from B's start (not A's step 3), two moves replayed
        result = env.step({"move": result.observation["legal_moves"][2]})
        seen.append(result.observation["fen"])
        snap = env.snapshot()
        result = env.step({"move": result.observation["legal_moves"][3]})
        seen.append(result.observation["fen"])
        assert seen == expected
        resumed = env.restore(snap)  # back one move: the episode a resume continues now
        kill()
        again = env.step({"move": resumed.result.observation["legal_moves"][3]})
        assert again.observation["fen"] == expected[3]
        assert env._resumer is not None and env._resumer.resumes == 2
    finally:
        env.close()


async def test_a_checkpoint_call_past_its_deadline_frees_its_session() -> None:
    """A checkpoint file store that hangs is given up (the server stopping, or a stuck
    disk): its session goes on, nothing is set aside."""
    from ecotone.kernel import Engine, EnvSpec
    from ecotone.kernel.calls import CheckpointCall
    from ecotone.plugins.counter import CounterEnv
    from tests.engine_driver import Driver, decoded

    class Stuck:
        def write(self, key: str, blob: bytes) -> None:
            raise AssertionError("never made in this test")

        read = delete = write

    engine = Engine(EnvSpec.from_class(CounterEnv))
    engine.checkpoints = Stuck()
    driver = Driver(engine)
    peer = driver.peer()
    session = (await driver.ask(peer, {"op": "open", "id": 1})).session
    await driver.ask(peer, {"op": "reset", "id": 2, "session": session})
    calls = peer.receive(
        peer.codec.encode({"op": "snapshot", "id": 3, "session": session, "durable": True})
    )
    (write,) = [c for c in calls if isinstance(c, CheckpointCall)]
    engine.timed_out(write, "the disk did not answer")
    answers = [decoded(peer, frame) for frame in peer.take()]
    assert answers[-1]["code"] == "internal" and "disk did not answer" in answers[-1]["message"]
    step = {"op": "step", "id": 4, "session": session, "action": {"delta": 1}}
    assert decoded(peer, await driver.ask(peer, step))["observation"]["count"] == 1
