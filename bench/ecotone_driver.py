"""Drive an ecotone counter server and print one JSON line of throughput.

Modes:
  sync   one session, blocking client (`ecotone.connect`), N sequential steps
  async  K sessions, one connection each, async client under trio, N steps each
  mux    K sessions multiplexed on one async connection, N steps each (concurrent tasks)
  batch  K sessions on one blocking connection, N `step_many` round trips of K actions
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import trio

import ecotone
from ecotone.plugins.counter import CounterObservation

WARMUP = 200


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


def run_sync(url: str, steps: int, codec: str) -> None:
    with ecotone.connect(url, codec=codec, observation_type=CounterObservation) as env:
        env.reset()
        action = {"delta": 1}
        for _ in range(WARMUP):
            env.step(action)
        start = time.perf_counter()
        for _ in range(steps):
            result = env.step(action)
        elapsed = time.perf_counter() - start
        assert result.observation.count == WARMUP + steps, result
    _report(steps, 1, elapsed)


async def run_async(url: str, steps: int, sessions: int, codec: str, mux: bool) -> None:
    connections: list[ecotone.AsyncConnection] = []
    clients: list[Any] = []
    if mux:
        shared = await ecotone.AsyncConnection.open_url(url, codec=codec)
        connections.append(shared)
        for _ in range(sessions):
            clients.append(await shared.open(observation_type=CounterObservation))
    else:
        for _ in range(sessions):
            conn = await ecotone.AsyncConnection.open_url(url, codec=codec)
            connections.append(conn)
            clients.append(await conn.open(observation_type=CounterObservation))
    for client in clients:
        await client.reset()
    action = {"delta": 1}
    counts: list[int] = []

    async def play(client: Any) -> None:
        for _ in range(steps):
            result = await client.step(action)
        counts.append(result.observation.count)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(play, client)
    elapsed = time.perf_counter() - start
    assert counts == [steps] * sessions, counts
    for client in clients:
        await client.aclose()
    for conn in connections:
        await conn.aclose()
    _report(steps * sessions, sessions, elapsed)


def run_batch(url: str, steps: int, sessions: int, codec: str) -> None:
    with ecotone.Connection(url, codec=codec) as conn:
        clients = [conn.open(observation_type=CounterObservation) for _ in range(sessions)]
        for client in clients:
            client.reset()
        batch = [(client, {"delta": 1}) for client in clients]
        start = time.perf_counter()
        for _ in range(steps):
            results = conn.step_many(batch)
        elapsed = time.perf_counter() - start
        last = results[-1]
        assert isinstance(last, ecotone.StepResult) and last.observation.count == steps, last
    _report(steps * sessions, sessions, elapsed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=["sync", "async", "mux", "batch"], default="sync")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--codec", choices=["json", "msgpack"], default="json")
    args = parser.parse_args()
    if args.mode == "sync":
        run_sync(args.url, args.steps, args.codec)
    elif args.mode == "batch":
        run_batch(args.url, args.steps, args.sessions, args.codec)
    else:
        trio.run(run_async, args.url, args.steps, args.sessions, args.codec, args.mode == "mux")


if __name__ == "__main__":
    main()
