"""Drive servers with OpenEnv 0.10.0's own `GenericEnvClient`, and print what it got as JSON.
Run by tests/test_openenv_interop.py with the openenv venv's python.

    python generic_client_driver.py episodes SPEC
        SPEC: {"targets": {NAME: {"url": URL, "ops": [OP, ...]}}}
        OP: ["reset", {kwargs}] | ["step", {action}] | ["state"]
        Plays each target's ops with the async client and again with `.sync()`; prints
        {NAME: {"async": [RESULT, ...], "sync": [RESULT, ...]}}, where RESULT is
        {"result": ...} or {"error": "<exception type>: <message>"}.

    python generic_client_driver.py capacity URL N
        Opens N async clients one after the other, keeping them connected, and resets each;
        then closes the first and resets one more client. Prints the N + 1 RESULTs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

from openenv.core import GenericEnvClient


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def failure(exc: BaseException) -> dict[str, Any]:
    return {"error": f"{type(exc).__name__}: {exc}"}


async def play_async(url: str, ops: list[list[Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with GenericEnvClient(base_url=url) as env:
        for op in ops:
            try:
                if op[0] == "reset":
                    value = await env.reset(**op[1])
                elif op[0] == "step":
                    value = await env.step(op[1])
                else:
                    value = await env.state()
                out.append({"result": plain(value)})
            except Exception as exc:
                out.append(failure(exc))
    return out


def play_sync(url: str, ops: list[list[Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with GenericEnvClient(base_url=url).sync() as env:
        for op in ops:
            try:
                if op[0] == "reset":
                    value = env.reset(**op[1])
                elif op[0] == "step":
                    value = env.step(op[1])
                else:
                    value = env.state()
                out.append({"result": plain(value)})
            except Exception as exc:
                out.append(failure(exc))
    return out


async def capacity(url: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    clients = []
    for _ in range(n):
        client = GenericEnvClient(base_url=url)
        clients.append(client)
        try:
            out.append({"result": plain(await client.reset())})
        except Exception as exc:
            out.append(failure(exc))
    await clients[0].close()
    late = GenericEnvClient(base_url=url)
    clients.append(late)
    try:
        out.append({"result": plain(await late.reset())})
    except Exception as exc:
        out.append(failure(exc))
    for client in clients[1:]:
        try:
            await client.close()
        except Exception:
            pass
    return out


def main() -> None:
    mode = sys.argv[1]
    if mode == "episodes":
        spec = json.loads(sys.argv[2])
        report = {}
        for name, target in spec["targets"].items():
            report[name] = {
                "async": asyncio.run(play_async(target["url"], target["ops"])),
                "sync": play_sync(target["url"], target["ops"]),
            }
        print(json.dumps(report))
    elif mode == "capacity":
        print(json.dumps(asyncio.run(capacity(sys.argv[2], int(sys.argv[3])))))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
