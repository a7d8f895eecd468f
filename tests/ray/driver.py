"""Run by tests/test_ray.py with the python of .venv-ray (ray and ecotone installed): drive a
vector env over servers the `ray` provider starts on a real multi-node cluster, lose a node
when told to, and report what happened, as JSON lines on stdout.

    python tests/ray/driver.py ADDRESS SERVERS SUBENVS

1. `{"placed": [{"node_ip", "url"}, ...]}` once the vector env has stepped 3 times;
2. then it waits for a line on stdin (the test has killed a node), steps, restarts the lost
   sub-envs (their servers replaced on whatever nodes Ray picks) and steps again:
   `{"lost": [...], "counts": [...], "replaced": [{"node_ip", "url"}], ...}`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, cast

import ecotone
from ecotone.launcher.vector import LaunchedVectorEnv


def where(server: Any) -> dict[str, str]:
    """A launched server's node and URL (`server.handle` is the ray provider's RayServer)."""
    return {"node_ip": server.handle.node_ip, "url": server.url}


def main() -> None:
    address, servers, subenvs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spec = {
        "address": address,
        "strategy": "SPREAD",
        "resources": {"cpus": 1, "memory_mb": None},
        "ready_timeout": 120,
    }
    started = time.monotonic()
    launched = ecotone.launch_vector(
        "counter", subenvs, servers=servers, provider="ray", spec=spec, step_timeout=20
    )
    with launched as vector:
        envs = cast(LaunchedVectorEnv, vector)
        up = time.monotonic() - started
        placed = [where(h) for h in envs.servers]
        envs.reset(seed=0)
        for _ in range(3):
            obs, *_ = envs.step([{"delta": 1}] * subenvs)
        print(json.dumps({"placed": placed, "env_urls": envs.env_urls, "up_s": up}), flush=True)
        sys.stdin.readline()  # the test has killed a node
        lost: list[int] = []
        seen: Any = None
        try:
            seen, *_ = envs.step([{"delta": 1}] * subenvs)
        except ecotone.EpisodeLost as exc:
            lost = sorted(exc.errors)
            seen = exc.result[0] if exc.result is not None else None
        survivors_after_loss = [
            int(o["count"]) for i, o in enumerate(seen or []) if i not in lost and o is not None
        ]
        t0 = time.monotonic()
        envs.restart(lost)
        restart_s = time.monotonic() - t0
        obs, *_ = envs.step([{"delta": 1}] * subenvs)
        replaced = [where(h) for h in envs.servers if where(h) not in placed]
        print(
            json.dumps(
                {
                    "lost": lost,
                    "survivors_after_loss": survivors_after_loss,
                    "counts": [int(o["count"]) for o in obs],
                    "replaced": replaced,
                    "restart_s": restart_s,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
