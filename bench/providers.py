"""Start-to-first-step latency and teardown time, per provider and transport.

    python bench/providers.py --runs 10 --providers podman,docker,process \\
        --transports websocket,unix [--env counter] [--image IMAGE]

One run: `astart_server` (the provider creates and starts the server and waits until it
answers), connect, reset, one step: that is *start to first step*. Then close the client and
`handle.stop()` (SIGTERM, removal of the container and its folders): *teardown*. Runs go one
after another (no overlap); the table gives the median and the slowest run of each.
*Step round trip*: in each run, before teardown, `--steps` steps of the blocking client
(`ecotone.connect`) against that server, host to server and back; the table gives the median
over runs of each run's mean, in microseconds.

A provider that cannot run here (engine unreachable, no image, not installed) gets a row that
says why instead of numbers; the script exits 0 all the same, so it can run anywhere. Images
are not built here: `ecotone build ENV --engine podman|docker` first, or pass --image.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

import ecotone
from ecotone.launcher.compose import astart_server, provider_for
from ecotone.providers.contract import ProviderError


@dataclass
class Row:
    provider: str
    transport: str
    start_s: list[float] = field(default_factory=list)
    teardown_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    skipped: str = ""


def step_round_trip(url: str, env: str, steps: int) -> float:
    """Mean seconds per step of the blocking client over `steps` steps (after 50 unmeasured)."""
    action = first_action(env)
    with ecotone.connect(url, timeout=30) as client:
        client.reset(seed=0)
        for _ in range(50):
            client.step(action)
        started = time.perf_counter()
        for _ in range(steps):
            client.step(action)
        return (time.perf_counter() - started) / steps


async def one_run(
    provider: str, transport: str, env: str, image: str | None, steps: int
) -> tuple[float, float, float]:
    started = time.perf_counter()
    container_image = image if provider != "process" else None
    handle = await astart_server(env, provider=provider, transport=transport, image=container_image)
    try:
        async with ecotone.aconnect(handle.url, timeout=30) as client:
            await client.reset(seed=0)
            await client.step(first_action(env))
            first_step = time.perf_counter() - started
        step = await anyio.to_thread.run_sync(step_round_trip, handle.url, env, steps)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await handle.stop()
        raise
    stopping = time.perf_counter()
    await handle.stop()
    return first_step, time.perf_counter() - stopping, step


def first_action(env: str) -> object:
    return {"counter": {"delta": 1}, "echo": {"message": "hi"}}.get(env, {})


async def measure(args: argparse.Namespace) -> list[Row]:
    rows = []
    for provider in args.providers.split(","):
        for transport in args.transports.split(","):
            row = Row(provider, transport)
            rows.append(row)
            try:
                provider_for(provider)
            except ValueError as exc:
                row.skipped = str(exc)
                continue
            for i in range(args.runs + args.warmup):
                try:
                    start_s, teardown_s, step_s = await one_run(
                        provider, transport, args.env, args.image, args.steps
                    )
                except (ProviderError, ValueError, ecotone.EcotoneError) as exc:
                    row.skipped = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    break
                if i >= args.warmup:
                    row.start_s.append(start_s)
                    row.teardown_s.append(teardown_s)
                    row.step_s.append(step_s)
            print(f"{provider}/{transport}: {row.skipped or 'done'}", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row], env: str) -> str:
    lines = [
        f"env `{env}`; start and teardown in ms, median (slowest) over the runs; step round "
        "trip in µs, median over the runs of each run's mean",
        "",
        "| provider | transport | start to first step | teardown | step round trip | runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.skipped or not row.start_s:
            lines.append(
                f"| {row.provider} | {row.transport} | - | - | - | skipped: {row.skipped} |"
            )
            continue

        def cell(values: list[float]) -> str:
            return f"{statistics.median(values) * 1000:.0f} ({max(values) * 1000:.0f})"

        lines.append(
            f"| {row.provider} | {row.transport} | {cell(row.start_s)} | "
            f"{cell(row.teardown_s)} | {statistics.median(row.step_s) * 1e6:.0f} | "
            f"{len(row.start_s)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1, help="runs not counted (default 1)")
    parser.add_argument("--providers", default="podman,docker,process")
    parser.add_argument("--transports", default="websocket,unix")
    parser.add_argument("--env", default="counter")
    parser.add_argument("--steps", type=int, default=2000, help="steps timed per run (2000)")
    parser.add_argument("--image", help="image for the container providers (default: theirs)")
    args = parser.parse_args(argv)
    rows = anyio.run(measure, args, backend="trio")
    print(table(rows, args.env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
