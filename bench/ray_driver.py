"""Run by bench/ray_cluster.py with the python of .venv-ray: the ray provider's figures on the
multi-node cluster at ADDRESS. Prints JSON lines; asks for a node to be killed with a line
`{"kill": NODE_IP}` and waits for any line on stdin before going on.

    python bench/ray_driver.py ADDRESS SERVERS SESSIONS STEPS
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any, cast

import anyio

import ecotone
from ecotone.launcher.compose import astart_server
from ecotone.launcher.vector import LaunchedVectorEnv


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    address, servers, sessions, steps = sys.argv[1], *map(int, sys.argv[2:5])
    spec: dict[str, Any] = {
        "address": address,
        "strategy": "SPREAD",
        "resources": {"cpus": 0.1, "memory_mb": None},
        "ready_timeout": 120,
    }
    ecotone.start_server("counter", provider="ray", **spec).stop()  # connect, warm the nodes

    # Start to first step on a Ray node, one server at a time.
    firsts = []
    for _ in range(5):
        t0 = time.perf_counter()
        with ecotone.start_server("counter", provider="ray", **spec) as server:
            with server.connect() as env:
                env.reset(seed=0)
                env.step({"delta": 1})
                firsts.append(time.perf_counter() - t0)
    emit({"first_step_s": statistics.median(firsts), "first_step_all": firsts})

    # Servers started per second, all at once.
    async def start_many() -> tuple[float, list[Any]]:
        handles: list[Any] = [None] * servers
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            handles[i] = await astart_server("counter", provider="ray", **spec)

        async with anyio.create_task_group() as tg:
            for i in range(servers):
                tg.start_soon(one, i)
        took = time.perf_counter() - t0
        for h in handles:
            await h.stop()
        return took, [h.node_ip for h in handles]

    took, nodes = anyio.run(start_many, backend="trio")
    emit({"servers": servers, "start_all_s": took, "per_s": servers / took, "nodes": nodes})

    # Sessions spread over the nodes, stepping together; then a node lost.
    # Two servers a node (a connection holds at most 256 sessions by default).
    spread = {**spec, "resources": {"cpus": 1, "memory_mb": None}}
    launched = ecotone.launch_vector(
        "counter", sessions, servers=6, provider="ray", spec=spread, step_timeout=60
    )
    with launched as vector:
        envs = cast(LaunchedVectorEnv, vector)
        nodes = [getattr(s.handle, "node_ip", "?") for s in envs.servers]
        envs.reset(seed=0)
        action = [{"delta": 1}] * sessions
        envs.step(action)
        t0 = time.perf_counter()
        for _ in range(steps):
            envs.step(action)
        took = time.perf_counter() - t0
        emit(
            {
                "sessions": sessions,
                "nodes": sorted(set(nodes)),
                "vector_steps": steps,
                "steps_per_s": sessions * steps / took,
                "vector_step_ms": 1e3 * took / steps,
            }
        )
        victim = next(ip for ip in nodes if not ip.endswith(".10"))
        emit({"kill": victim})
        sys.stdin.readline()
        t0 = time.perf_counter()
        lost: list[int] = []
        try:
            envs.step(action)
        except ecotone.EpisodeLost as exc:
            lost = sorted(exc.errors)
        noticed = time.perf_counter() - t0
        envs.restart(lost)
        back = time.perf_counter() - t0
        envs.step(action)
        emit(
            {
                "lost_sessions": len(lost),
                "noticed_s": noticed,
                "replaced_s": back,
                "kept_sessions": sessions - len(lost),
            }
        )


if __name__ == "__main__":
    main()
