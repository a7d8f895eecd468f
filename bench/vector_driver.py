"""Aggregate env-steps/s of N counter sub-envs, printed as one JSON line like the other drivers.

Modes:
  batched     `ecotone.VectorEnv` of N sub-envs on one server: one `step_many` round trip
              per vector step (--url)
  batched-async  the same with `ecotone.AsyncVectorEnv` under trio (--url)
  per-socket  N async clients under trio, one connection and one session each, stepping
              concurrently (--url)
  gym-inproc  Gymnasium's SyncVectorEnv of the same counter logic written as a Gymnasium env,
              in this process: the no-network ceiling (no --url)
  cartpole-remote / cartpole-sync / cartpole-async
              CartPole-v1 through `ecotone.gym.make_vec`, Gymnasium's SyncVectorEnv and its
              AsyncVectorEnv (subprocesses, shared memory)

`--url` may list several servers (comma-separated); `--servers N` starts N of its own
(process provider) instead. `--pool` (batched, cartpole-remote) runs EnvPool's loop: `send` a
batch per server, `recv` whichever answers first and send it back at once
(ECOTONE_BENCH_DEPTH batches in flight per server, 1 by default).

    python bench/vector_driver.py --url ws://127.0.0.1:8765 --mode batched --sessions 64
    python bench/vector_driver.py --servers 2 --mode cartpole-remote --pool
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import trio
from gymnasium import spaces

import ecotone
from ecotone.plugins.counter import CounterObservation

WARMUP = 50
DEPTH = int(os.environ.get("ECOTONE_BENCH_DEPTH", "1"))
"""`send`/`recv` loops: batches in flight on each server (1: each server steps one batch
while the others' answers are read; 2 was slower here: twice the requests)."""
CODEC = os.environ.get("ECOTONE_BENCH_CODEC")
"""`make_vec`'s codec (unset: its default, MessagePack for the vector form, else JSON)."""


def _report(steps: int, sessions: int, elapsed: float) -> None:
    print(
        json.dumps(
            {
                "steps_per_s": steps / elapsed,
                "steps": steps,
                "sessions": sessions,
                "elapsed_s": elapsed,
            }
        )
    )


def run_batched(urls: list[str], steps: int, sessions: int, codec: str, pool: bool) -> None:
    with ecotone.VectorEnv(
        urls, sessions, observation_type=CounterObservation, codec=codec
    ) as venv:
        if pool:
            _counter_pool(venv, steps, sessions, len(urls))
            return
        venv.reset(seed=0)
        actions = [{"delta": 1}] * sessions
        for _ in range(WARMUP):
            venv.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            observations, rewards, terminated, truncated, _ = venv.step(actions)
        elapsed = time.perf_counter() - start
        counts = [o.count for o in observations]
        assert counts == [WARMUP + steps] * sessions, counts[:4]
        assert rewards.sum() == sessions and not (terminated | truncated).any()
    _report(steps * sessions, sessions, elapsed)


def _counter_pool(venv: Any, steps: int, sessions: int, servers: int) -> None:
    """`_pool_loop` on `VectorEnv.send(batched=True)` / `recv`; every step counted once."""

    def send(ids: Any) -> None:
        venv.send([{"delta": 1}] * len(ids), ids, batched=True)

    def recv(batch: int) -> Any:
        return venv.recv(min_ready=batch, max_ready=batch).env_ids

    sent = _pool_loop(venv, steps, sessions, servers, send, recv)
    assert sum(o.count for o in venv.observations) == sent


async def run_batched_async(url: str, steps: int, sessions: int, codec: str) -> None:
    async with ecotone.AsyncVectorEnv(
        url, sessions, observation_type=CounterObservation, codec=codec
    ) as venv:
        await venv.reset(seed=0)
        actions = [{"delta": 1}] * sessions
        for _ in range(WARMUP):
            await venv.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            observations, *_ = await venv.step(actions)
        elapsed = time.perf_counter() - start
        assert [o.count for o in observations] == [WARMUP + steps] * sessions
    _report(steps * sessions, sessions, elapsed)


async def run_per_socket(url: str, steps: int, sessions: int, codec: str) -> None:
    clients: list[ecotone.AsyncEnvClient[Any, Any]] = []
    for _ in range(sessions):
        clients.append(
            await ecotone.aconnect(url, codec=codec, observation_type=CounterObservation)
        )
    for client in clients:
        await client.reset()
    action = {"delta": 1}
    counts: list[int] = []

    async def play(client: ecotone.AsyncEnvClient[Any, Any]) -> None:
        for _ in range(steps):
            result = await client.step(action)
        counts.append(result.observation.count)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(play, client)
    elapsed = time.perf_counter() - start
    assert counts == [steps] * sessions, counts[:4]
    for client in clients:
        await client.aclose()
    _report(steps * sessions, sessions, elapsed)


class GymCounter(gymnasium.Env[np.int64, np.int64]):
    """The counter env as a Gymnasium env: the action is the delta, the reward the delta."""

    def __init__(self) -> None:
        self.action_space = spaces.Discrete(3)
        self.observation_space: spaces.Space[Any] = spaces.Box(
            -(2**62), 2**62, shape=(), dtype=np.int64
        )
        self._count = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._count = 0
        return np.int64(self._count), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        delta = int(action)
        self._count += delta
        return np.int64(self._count), float(delta), False, False, {}


def run_gym_inproc(steps: int, sessions: int) -> None:
    venv = gymnasium.vector.SyncVectorEnv([GymCounter] * sessions)
    venv.reset(seed=0)
    actions = np.ones(sessions, dtype=np.int64)
    for _ in range(WARMUP):
        venv.step(actions)
    start = time.perf_counter()
    for _ in range(steps):
        observations, *_ = venv.step(actions)
    elapsed = time.perf_counter() - start
    assert observations.tolist() == [WARMUP + steps] * sessions
    venv.close()
    _report(steps * sessions, sessions, elapsed)


CARTPOLE = "CartPole-v1"


def _cartpole_loop(venv: Any, steps: int, sessions: int) -> None:
    """`steps` vector steps of CartPole, always pushing right (episodes end in about ten
    steps, so autoreset is part of what is timed)."""
    venv.reset(seed=0)
    actions = np.ones(sessions, dtype=np.int64)
    for _ in range(WARMUP):
        venv.step(actions)
    start = time.perf_counter()
    for _ in range(steps):
        observations, rewards, *_ = venv.step(actions)
    elapsed = time.perf_counter() - start
    assert observations.shape == (sessions, 4) and rewards.shape == (sessions,)
    venv.close()
    _report(steps * sessions, sessions, elapsed)


def _pool_loop(
    venv: Any,
    steps: int,
    sessions: int,
    servers: int,
    send: Callable[[Any], None],
    recv: Callable[[int], Any],
) -> int:
    """EnvPool's loop: each server's batch is sent back as soon as it answers, while the
    others step theirs. `steps` per sub-env, as in the synchronous loops; `send(ids)` starts a
    step of those sub-envs, `recv(batch)` returns the ids of the next `batch` to answer.
    Returns how many sub-env steps were sent in all."""
    batch = sessions // (servers * DEPTH)
    venv.reset(seed=0)
    sent = 0
    for first in range(0, sessions, batch):  # DEPTH batches in flight on each server
        send(np.arange(first, min(first + batch, sessions)))
        sent += min(batch, sessions - first)
    done = 0
    for warm in (True, False):
        if not warm:
            start = time.perf_counter()
        total = (WARMUP if warm else steps) * sessions
        done = 0
        while done < total:
            ids = recv(batch)
            send(ids)
            done += len(ids)
            sent += len(ids)
    elapsed = time.perf_counter() - start
    venv.recv()  # what is still in flight
    _report(done, sessions, elapsed)
    return sent


def run_cartpole(mode: str, url: str, steps: int, sessions: int) -> None:
    """CartPole-v1 three ways: `ecotone.gym.make_vec` over the server at `url`, and
    Gymnasium's own SyncVectorEnv (in this process) and AsyncVectorEnv (a subprocess each)."""
    if mode in ("cartpole-remote", "cartpole-remote-pool"):
        import ecotone.gym

        urls = url.split(",")
        venv: Any = ecotone.gym.make_vec(urls, sessions, **({"codec": CODEC} if CODEC else {}))
        if mode == "cartpole-remote-pool":
            _pool_loop(
                venv,
                steps,
                sessions,
                len(urls),
                lambda ids: venv.send(np.ones(len(ids), dtype=np.int64), ids),
                lambda batch: venv.recv(min_ready=batch, max_ready=batch)[4]["env_id"],
            )
            venv.close()
            return
    elif mode == "cartpole-sync":
        venv = gymnasium.make_vec(CARTPOLE, sessions, vectorization_mode="sync")
    else:
        venv = gymnasium.make_vec(CARTPOLE, sessions, vectorization_mode="async")
    _cartpole_loop(venv, steps, sessions)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="")
    parser.add_argument(
        "--mode",
        choices=[
            "batched",
            "batched-async",
            "per-socket",
            "gym-inproc",
            "cartpole-remote",
            "cartpole-sync",
            "cartpole-async",
        ],
        required=True,
    )
    parser.add_argument("--steps", type=int, default=1000, help="vector steps (per sub-env)")
    parser.add_argument("--sessions", type=int, default=64, help="sub-envs")
    parser.add_argument("--codec", choices=["json", "msgpack"], default="json")
    parser.add_argument(
        "--servers",
        type=int,
        default=0,
        help="start this many servers of the env (process provider) and spread the sub-envs "
        "over them, instead of using --url",
    )
    parser.add_argument(
        "--pool", action="store_true", help="EnvPool's send/recv loop instead of step"
    )
    parser.add_argument(
        "--transport",
        default="websocket",
        help="with --servers: the servers' transport (websocket, tcp, unix, ...)",
    )
    parser.add_argument(
        "--vector-form",
        action="store_true",
        help="with --servers and a cartpole mode: serve gymnasium-vector:CartPole-v1 (a batch "
        "per session) instead of gymnasium:CartPole-v1",
    )
    args = parser.parse_args()
    if args.servers:
        from ecotone.launcher.vector import start_servers

        env = "counter"
        if args.mode.startswith("cartpole"):
            form = "gymnasium-vector:" if args.vector_form else "gymnasium:"
            env = form + CARTPOLE
        started = start_servers(env, args.servers, transport=args.transport)
        try:
            args.url = ",".join(server.url for server in started)
            _run(parser, args)
        finally:
            for server in started:
                server.stop()
        return
    _run(parser, args)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.mode == "gym-inproc":
        run_gym_inproc(args.steps, args.sessions)
        return
    if args.mode in ("cartpole-sync", "cartpole-async"):
        run_cartpole(args.mode, "", args.steps, args.sessions)
        return
    if not args.url:
        parser.error(f"--mode {args.mode} needs --url")
    if args.mode == "cartpole-remote":
        run_cartpole("cartpole-remote-pool" if args.pool else args.mode, args.url, args.steps,
                     args.sessions)  # fmt: skip
    elif args.mode == "batched":
        run_batched(args.url.split(","), args.steps, args.sessions, args.codec, args.pool)
    elif args.mode == "batched-async":
        trio.run(run_batched_async, args.url, args.steps, args.sessions, args.codec)
    else:
        trio.run(run_per_socket, args.url, args.steps, args.sessions, args.codec)


if __name__ == "__main__":
    main()
