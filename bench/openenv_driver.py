"""OpenEnv counter driver, run inside the OpenEnv virtualenv by bench/run.py.

Uses OpenEnv's own ``GenericEnvClient`` (one WebSocket per session):

* ``--mode sync``: one ``GenericEnvClient(base_url=url).sync()`` session; connect and
  reset, warm up, then time ``--steps`` sequential ``{"delta": 1}`` steps.
* ``--mode async``: ``--sessions`` async clients driven concurrently with
  ``asyncio.gather``; all connect and reset, warm up, then each does ``--steps`` steps;
  the clock runs from the moment all are ready until all are done.

Prints exactly one JSON line on stdout:
``{"steps_per_s": float, "steps": int, "sessions": int, "elapsed_s": float}``
where ``steps`` is the total number of timed steps over all sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import time
import urllib.parse
from typing import Any

from openenv.core.generic_client import GenericEnvClient

ACTION: dict[str, Any] = {"delta": 1}


def _count(result: Any) -> int:
    observation = result.observation
    assert isinstance(observation, dict), f"unexpected observation: {observation!r}"
    count = observation["count"]
    assert isinstance(count, int), f"unexpected count: {count!r}"
    return count


def run_sync(url: str, steps: int, warmup: int) -> float:
    client = GenericEnvClient(base_url=url).sync()
    with client:
        first = client.reset()
        assert _count(first) == 0, f"reset gave {first.observation!r}"
        for _ in range(warmup):
            client.step(ACTION)
        result = None
        t0 = time.perf_counter()
        for _ in range(steps):
            result = client.step(ACTION)
        elapsed = time.perf_counter() - t0
        assert result is not None
        got = _count(result)
        assert got == warmup + steps, f"count {got} != {warmup + steps}"
        assert result.reward == 1 and result.done is False, f"bad step result: {result!r}"
    return elapsed


async def run_async(url: str, steps: int, sessions: int, warmup: int) -> float:
    clients = [GenericEnvClient(base_url=url) for _ in range(sessions)]
    per_session_warmup = max(1, warmup // sessions) if warmup > 0 else 0
    async with contextlib.AsyncExitStack() as stack:
        # `async with client` is OpenEnv's documented async use: it connects and locks
        # the client into async mode (plain awaitables, no sync/async auto-detection).
        await asyncio.gather(*(stack.enter_async_context(c) for c in clients))
        resets = await asyncio.gather(*(c.reset() for c in clients))
        assert all(_count(r) == 0 for r in resets), "reset did not give count 0"

        async def drive(client: GenericEnvClient, n: int) -> int:
            result = None
            for _ in range(n):
                result = await client.step(ACTION)
            return _count(result) if result is not None else 0

        if per_session_warmup:
            await asyncio.gather(*(drive(c, per_session_warmup) for c in clients))
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(drive(c, steps) for c in clients))
        elapsed = time.perf_counter() - t0
        want = per_session_warmup + steps
        bad = [c for c in counts if c != want]
        assert not bad, f"{len(bad)} sessions ended with a wrong count (want {want}): {bad[:5]}"
    return elapsed


def run_http(url: str, steps: int, warmup: int) -> float:
    """`POST /step` over one keep-alive HTTP connection (stdlib client). Against OpenEnv each
    request builds, steps and closes a fresh env; against ecotone, the request carries the
    session from `POST /reset` (header), so it steps one episode. Same bytes either way."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    headers = {"content-type": "application/json"}
    conn.request("POST", "/reset", body=b"{}", headers=headers)
    response = conn.getresponse()
    response.read()
    session = response.getheader("x-ecotone-session")
    if session:
        headers["x-ecotone-session"] = session
    body = json.dumps({"action": {"delta": 1}}).encode()

    def step() -> dict[str, Any]:
        conn.request("POST", "/step", body=body, headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        assert reply.status == 200, (reply.status, data)
        result: dict[str, Any] = json.loads(data)
        return result

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        last = step()
    elapsed = time.perf_counter() - start
    expected = warmup + steps if session else 1
    assert last["observation"]["count"] == expected, (last, expected)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument("--mode", choices=("sync", "async", "http"), default="sync")
    parser.add_argument("--steps", type=int, default=3000, help="timed steps per session")
    parser.add_argument("--sessions", type=int, default=1, help="async mode only")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up steps (total)")
    args = parser.parse_args()
    if args.steps < 1 or args.sessions < 1:
        parser.error("--steps and --sessions must be >= 1")

    if args.mode == "sync":
        sessions = 1
        elapsed = run_sync(args.url, args.steps, args.warmup)
    elif args.mode == "http":
        sessions = 1
        elapsed = run_http(args.url, args.steps, args.warmup)
    else:
        sessions = args.sessions
        elapsed = asyncio.run(run_async(args.url, args.steps, sessions, args.warmup))
    total = args.steps * sessions
    line = {
        "steps_per_s": total / elapsed,
        "steps": total,
        "sessions": sessions,
        "elapsed_s": elapsed,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
