"""Busy polling (`ecotone.kernel.polling`): readers spin a little for the next bytes before they
block, on both faces. The policy's rules, the server's and the blocking client's readers under
slow, silent, vanishing and hostile peers, and the settings' errors."""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import ecotone
from ecotone.client._blocking import DeadlineReceiver
from ecotone.client._sync import io as sync_io
from ecotone.kernel import Limits, polling
from ecotone.kernel.polling import BusyPoll
from ecotone.server.sockets import LeanSocketStream, receive_within
from tests.conftest import ecotone_serving

# --- the policy ---------------------------------------------------------------------------------


def test_a_spin_that_runs_out_skips_spinning_for_twice_as_many_waits_each_time() -> None:
    poll = BusyPoll(500, gate=lambda: True)
    assert poll.spin_for() == 0.0005
    skipped = []
    for _ in range(8):
        poll.ran_out()
        count = 0
        while poll.spin_for() == 0.0:
            count += 1
        skipped.append(count)
    assert skipped == [2, 4, 8, 16, 32, 64, 64, 64]


def test_a_short_wait_or_a_caught_spin_brings_spinning_back() -> None:
    poll = BusyPoll(500, gate=lambda: True)
    poll.ran_out()
    poll.ran_out()
    assert poll.spin_for() == 0.0
    poll.blocked(0.0002)  # would have been caught: spin again at once
    assert poll.spin_for() == 0.0005
    poll.ran_out()
    poll.blocked(0.5)  # a long wait: still backing off
    assert poll.spin_for() == 0.0
    poll.caught()
    poll.ran_out()
    assert [poll.spin_for() for _ in range(3)] == [0.0, 0.0, 0.0005]  # 2 skips, not 8


def test_a_spin_that_ran_out_is_not_undone_by_the_short_blocking_wait_after_it() -> None:
    """A peer answering just past the budget: the spin misses, and the wait's blocking part
    (shorter than the budget) must not bring spinning back."""
    poll = BusyPoll(500, gate=lambda: True)
    assert poll.spin_for() == 0.0005
    poll.ran_out()
    poll.blocked(0.0001)
    assert poll.spin_for() == 0.0


def test_no_spinning_when_the_gate_is_shut_or_the_budget_is_zero() -> None:
    assert BusyPoll(500, gate=lambda: False).spin_for() == 0.0
    assert BusyPoll(0, gate=lambda: True).spin_for() == 0.0
    for bad in (-1, float("nan"), float("inf"), polling.MAX_US + 1):
        with pytest.raises(ValueError, match="microseconds from 0 to"):
            BusyPoll(bad)


def test_by_default_only_a_process_of_one_python_thread_spins() -> None:
    started, stop = threading.Event(), threading.Event()

    def idle() -> None:
        started.set()
        stop.wait()

    thread = threading.Thread(target=idle)
    thread.start()
    started.wait()
    try:
        assert not polling.alone()
        assert BusyPoll(500).spin_for() == 0.0
    finally:
        stop.set()
        thread.join()


def test_a_bad_client_setting_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("fast", "-5", "nan", "inf", "2e6"):
        monkeypatch.setenv(polling.ENV, value)
        with pytest.raises(ValueError, match=re.escape(f"{polling.ENV}={value!r}")):
            polling.client_budget_us()
    monkeypatch.setenv(polling.ENV, "0")
    assert polling.client_budget_us() == 0
    monkeypatch.delenv(polling.ENV)
    assert polling.client_budget_us() == polling.DEFAULT_US


def test_a_server_budget_out_of_range_is_refused() -> None:
    for bad in (-1, float("nan"), float("inf"), 5_000_000):
        with pytest.raises(ValueError, match="busy_poll_us is microseconds from 0 to"):
            Limits(busy_poll_us=bad)


# --- the blocking client's reader ---------------------------------------------------------------


class Counting(BusyPoll):
    """A policy that counts what its reader told it, its gate always open."""

    def __init__(self, budget_us: float) -> None:
        super().__init__(budget_us, gate=lambda: True)
        self.caught_count = self.ran_out_count = 0

    def caught(self) -> None:
        self.caught_count += 1
        super().caught()

    def ran_out(self) -> None:
        self.ran_out_count += 1
        super().ran_out()


@pytest.fixture
def spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers made from here on spin 20 ms, whatever else runs in this process."""
    monkeypatch.setattr(polling, "alone", lambda: True)
    monkeypatch.setenv(polling.ENV, "20000")
    monkeypatch.setattr(sync_io, "_SELECT_POLL", Counting(20000))


def _later(seconds: float, action: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_client_reader_gets_bytes_that_come_while_it_spins_or_after(spinning: None) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        receiver = DeadlineReceiver(ours)
        assert receiver._poll is not None and receiver._poll.budget == 0.02
        receiver._poll = poll = Counting(20000)
        theirs.sendall(b"at once")
        assert receiver.recv(100, None) == b"at once"
        writer = _later(0.002, lambda: theirs.sendall(b"soon"))  # within the spin
        assert receiver.recv(100, time.monotonic() + 5) == b"soon"
        writer.join()
        assert (poll.caught_count, poll.ran_out_count) == (2, 0)
        writer = _later(0.1, lambda: theirs.sendall(b"late"))  # the spin runs out first
        assert receiver.recv(100, time.monotonic() + 5) == b"late"
        writer.join()
        assert (poll.caught_count, poll.ran_out_count) == (2, 1)
        theirs.close()  # EOF: b"", spinning or not
        assert receiver.recv(100, None) == b""


def test_a_spinning_client_reader_keeps_its_deadline(spinning: None) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        receiver = DeadlineReceiver(ours)
        receiver._poll = Counting(1_000_000)  # a 1 s spin
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            receiver.recv(100, began + 0.005)
        assert time.monotonic() - began < 0.5


@pytest.mark.parametrize("cores", [8, 2])
def test_the_blocking_vector_env_plays_through_spinning_waits(
    spinning: None, cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its waits on both servers spin on a machine with a core to spare for each server and
    itself; where the servers fill the cores they block at once (a spin would take a core
    from the servers it waits for)."""
    monkeypatch.setattr(sync_io, "_cores", lambda: cores)
    with (
        ecotone_serving("counter", "--port", "0") as one,
        ecotone_serving("counter", "--port", "0") as two,
    ):
        urls = [_url(one), _url(two)]
        with ecotone.VectorEnv(urls, 8) as envs:
            envs.reset(seed=0)
            for step in range(1, 51):
                observations, *_ = envs.step([{"delta": 1}] * 8)
                assert [o["count"] for o in observations] == [step] * 8
                if step % 10 == 0:
                    time.sleep(0.03)  # longer than the spin: blocking waits between
        assert isinstance(sync_io._SELECT_POLL, Counting)
        spun = sync_io._SELECT_POLL.caught_count + sync_io._SELECT_POLL.ran_out_count
        assert (spun > 0) == (cores > 2)


# --- the server's reader ------------------------------------------------------------------------


def _lean_pair(budget_us: float) -> tuple[LeanSocketStream, trio.SocketStream, Counting]:
    a, b = trio.socket.socketpair()
    stream = LeanSocketStream(trio.SocketStream(a), None, budget_us)
    assert stream._poll is not None and stream._poll.budget == budget_us / 1e6
    stream._poll = poll = Counting(budget_us)
    return stream, trio.SocketStream(b), poll


def test_the_server_reader_spins_for_its_bytes_and_can_be_cancelled_while_it_spins() -> None:
    async def main() -> None:
        stream, peer, poll = _lean_pair(1_000_000)  # a 1 s spin
        began = trio.current_time()
        with trio.move_on_after(0.05) as scope:
            await stream.receive_some()
        assert scope.cancelled_caught and trio.current_time() - began < 0.5
        assert poll.ran_out_count == 0  # cancelled in the spin, not after it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_later, peer, b"soon", 0.002)
            assert await stream.receive_some() == b"soon"
        assert poll.caught_count == 1
        await peer.aclose()
        assert await stream.receive_some() == b""  # EOF while spinning
        await stream.aclose()

    trio.run(main)


def test_the_server_reader_lets_other_tasks_run_and_sees_its_stream_closed_under_it() -> None:
    async def main() -> None:
        stream, peer, _ = _lean_pair(1_000_000)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            for _ in range(20):
                ticks += 1
                await trio.lowlevel.checkpoint()
            await stream.aclose()  # as a writer that gave up on the peer does

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some()
        assert ticks == 20
        await peer.aclose()

    trio.run(main)


def test_the_server_reader_keeps_its_deadline_while_spinning_and_while_blocked() -> None:
    async def main() -> None:
        stream, peer, poll = _lean_pair(1_000_000)  # a 1 s spin, longer than the deadline
        began = trio.current_time()
        assert await stream.receive_within(65536, 0.05) is None
        assert 0.04 < trio.current_time() - began < 0.5  # the deadline cut the spin short
        assert poll.ran_out_count == 1
        short, peer2, poll2 = _lean_pair(1000)  # a 1 ms spin, then a blocking wait
        began = trio.current_time()
        assert await short.receive_within(65536, 0.1) is None
        assert 0.09 < trio.current_time() - began < 0.6
        assert poll2.ran_out_count == 1  # so the next waits block at once (the policy)
        async with trio.open_nursery() as nursery:  # bytes while blocked, before the deadline
            nursery.start_soon(_send_later, peer2, b"late", 0.05)
            assert await short.receive_within(65536, 5) == b"late"
        fresh, peer3, poll3 = _lean_pair(1_000_000)
        async with trio.open_nursery() as nursery:  # bytes while spinning
            nursery.start_soon(_send_later, peer3, b"soon", 0.002)
            assert await fresh.receive_within(65536, 5) == b"soon"
        assert poll3.caught_count == 1
        await peer2.aclose()
        assert await short.receive_within(65536, 5) == b""  # EOF is bytes, not a timeout
        for each in (stream, short, peer, fresh, peer3):
            await each.aclose()

    trio.run(main)


def test_any_other_stream_gets_the_same_deadline_from_a_cancel_scope() -> None:
    async def main() -> None:
        a, b = trio.socket.socketpair()
        stream, peer = trio.SocketStream(a), trio.SocketStream(b)
        assert await receive_within(stream, 100, 0.05) is None
        await peer.send_all(b"x")
        assert await receive_within(stream, 100, 0.05) == b"x"
        await peer.send_all(b"y")
        assert await receive_within(stream, 100, math.inf) == b"y"
        await peer.aclose()
        assert await receive_within(stream, 100, 1) == b""
        await stream.aclose()

    trio.run(main)


async def _send_later(stream: trio.SocketStream, data: bytes, seconds: float) -> None:
    await trio.sleep(seconds)
    await stream.send_all(data)


def test_a_server_that_spins_outlives_silent_vanishing_and_hostile_peers(tmp_path: Path) -> None:
    (tmp_path / "ecotone.toml").write_text("[limits]\nbusy_poll_us = 20000\n")
    with ecotone_serving("counter", "--port", "0", cwd=tmp_path) as proc:
        url = _url(proc)
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as raw:  # a peer that says nothing
            with socket.create_connection(("127.0.0.1", port)) as rude:
                rude.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")  # half
            with socket.create_connection(("127.0.0.1", port)) as junk:
                junk.sendall(b"\x00\xff" * 100)
                junk.recv(1000)
            with ecotone.connect(url) as env:
                env.reset()
                for step in range(1, 31):
                    result = env.step({"delta": 1})
                    assert result.observation["count"] == step
                    if step % 10 == 0:
                        time.sleep(0.05)  # past the spin: the server blocks, then wakes
            raw.close()
        with ecotone.connect(url) as env:  # still serving
            env.reset()
            assert env.step({"delta": 2}).observation["count"] == 2
        assert proc.poll() is None


def test_a_client_in_its_own_process_spins_by_default_and_plays(tmp_path: Path) -> None:
    """The default settings on both sides (a fresh process has one Python thread)."""
    with ecotone_serving("counter", "--port", "0", cwd=tmp_path) as proc:
        code = (
            "import ecotone, sys\n"
            "from ecotone.kernel import polling\n"
            "assert polling.alone() and polling.client_budget_us() == polling.DEFAULT_US\n"
            "with ecotone.connect(sys.argv[1]) as env:\n"
            "    env.reset()\n"
            "    for i in range(200):\n"
            "        r = env.step({'delta': 1})\n"
            "    print(r.observation['count'])\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
        done = subprocess.run(
            [sys.executable, "-c", code, _url(proc)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "200"


def _url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"at (ws://127\.0\.0\.1:\d+)", line)
    assert match, line
    return match[1]
