"""`ecotone collect`'s cost per model turn against the bare chat call, at concurrency 1 and 64,
against the local token endpoint (tests/token_server.py: vLLM's API, a toy tokenizer and a
scripted model, so a "generation" costs the server almost nothing and what is left is the
client's).

    .venv/bin/python bench/collect_overhead.py --reps 3 [--out docs/benchmarks.md]

Each rep starts the endpoint as its own process on a free loopback port and, for each
concurrency C:

* bare: C threads send the same chat completion (a system message, the env's first
  observation and its action as a tool, as collect's first turn), one after another each,
  `--turns` calls in all, through the HTTP client collect itself uses;
* collect, text: `collect("inproc://counter", ChatPolicy(url, tokens=False))`, episodes of
  `--steps` turns (the counter's `target`), C in flight, as many turns in all: one chat
  completion per turn, the env stepped in this process, every turn recorded;
* collect, tokens: the same with token ids (the default): the first call of an episode a
  chat completion with `return_token_ids`, each later one two `/tokenize` calls (at once)
  and a `/v1/completions` with the episode's ids.

A figure is wall-clock time over model turns (ms per turn, all C together). Reported: the
median over reps (min-max), and each collect mode over the bare call of the same rep. With
--out, the table replaces the section "## `collect` per model turn" of that file.
"""

from __future__ import annotations

import argparse
import functools
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio
from sections import replace_section

import ecotone
from ecotone.collect import ChatPolicy, Episode, collect
from ecotone.collect.endpoint import post

HEADING = "## `collect` per model turn"
SERVER = Path(__file__).resolve().parent.parent / "tests" / "token_server.py"


def start_endpoint() -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    argv = [sys.executable, str(SERVER), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit(f"the token endpoint did not start: {url!r}")
    return proc, url


def first_turn_body() -> dict[str, object]:
    """The chat completion collect sends first in a counter episode: its system message, the
    first observation, the action as a tool (the chat policy's actor builds it)."""
    with ecotone.connect("inproc://counter") as env:
        info = env.connection.describe("counter")
        first = env.reset(seed=0, target=5).observation
    policy = ChatPolicy("http://unused/v1", "toy", tokens=False)
    actor = policy.actor(Episode(info=info, task=None, record=None, tools=None))  # type: ignore[arg-type]
    actor._observe(first)  # type: ignore[attr-defined]
    return {
        "model": "toy",
        "messages": actor.messages,  # type: ignore[attr-defined]
        "tools": actor.specs,  # type: ignore[attr-defined]
        "tool_choice": "auto",
    }


def bare(url: str, body: dict[str, object], turns: int, concurrency: int) -> float:
    """Seconds for `turns` chat completions, `concurrency` at a time."""
    headers = {"content-type": "application/json"}
    target = url.rstrip("/") + "/chat/completions"

    def worker(n: int) -> None:
        for _ in range(n):
            post(target, body, headers, 60.0)

    shares = [turns // concurrency + (i < turns % concurrency) for i in range(concurrency)]
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, shares))
    return time.perf_counter() - start


def collected(url: str, tokens: bool, turns: int, steps: int, concurrency: int) -> float:
    """Seconds per model turn of a collect run of `turns` turns in episodes of `steps`."""
    policy = ChatPolicy(url, "toy", tokens=None if tokens else False)
    with tempfile.TemporaryDirectory() as out:
        summary = trio.run(
            functools.partial(
                collect, "inproc://counter", policy, out=out, episodes=turns // steps,
                concurrency=concurrency, options={"target": steps},
            )
        )  # fmt: skip
    if summary.overall.errors:
        raise SystemExit(f"collect failed: {summary.table()}")
    if tokens and summary.continued_turns == 0:
        raise SystemExit("collect recorded no continued turns: the endpoint is not vLLM-like")
    return summary.seconds / summary.model_turns


def measure(turns: int, steps: int, concurrency: int) -> dict[str, float]:
    proc, url = start_endpoint()
    try:
        body = first_turn_body()
        bare(url, body, min(turns, 64), concurrency)  # warm up
        return {
            "bare": bare(url, body, turns, concurrency) / turns,
            "text": collected(url, False, turns, steps, concurrency),
            "tokens": collected(url, True, turns, steps, concurrency),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def render(results: dict[int, list[dict[str, float]]], args: argparse.Namespace) -> str:
    def ms(x: float) -> str:
        return f"{x * 1e3:.2f}"

    def ratio(x: float) -> str:
        return f"{x:.2f}x"

    lines = [
        HEADING,
        "",
        f"`bench/collect_overhead.py --reps {args.reps} --turns {args.turns} --steps "
        f"{args.steps}`, {time.strftime('%Y-%m-%d')}: the local token endpoint "
        "(tests/token_server.py, its own process, whose scripted model costs next to "
        "nothing) on loopback; ms of wall-clock time per model turn, all episodes in flight "
        "together, median over reps (min-max). Bare: the chat completion alone, from C "
        "threads. Collect: `ChatPolicy` playing the in-process counter env, episodes of "
        f"{args.steps} turns, every turn recorded; text: one chat completion per turn; "
        "tokens: token ids kept, each turn after an episode's first continued from its ids "
        "(two `/tokenize` calls at once, then a `/v1/completions`: three requests for one). "
        "Here a generation costs the endpoint next to nothing, so the ratios are collect's "
        "own cost at its largest; against a real model, whose turn takes tens of ms and more, "
        "the same absolute difference is what collect adds.",
        "",
        "| C | bare chat call | collect, text | collect, tokens | text / bare | tokens / bare |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    for c, runs in results.items():
        lines.append(
            f"| {c} | {spread([r['bare'] for r in runs], ms)} "
            f"| {spread([r['text'] for r in runs], ms)} "
            f"| {spread([r['tokens'] for r in runs], ms)} "
            f"| {spread([r['text'] / r['bare'] for r in runs], ratio)} "
            f"| {spread([r['tokens'] / r['bare'] for r in runs], ratio)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--turns", type=int, default=640, help="model turns per measurement")
    parser.add_argument("--steps", type=int, default=5, help="turns per collect episode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {1: [], 64: []}
    for rep in range(args.reps):
        for c in results:
            turns = args.turns if c > 1 else max(args.steps, args.turns // 4)
            results[c].append(measure(turns, args.steps, c))
            print(f"rep {rep + 1}/{args.reps} C={c}: {results[c][-1]}", file=sys.stderr)
    section = render(results, args)
    print(section)
    if args.out is not None:
        replace_section(args.out, HEADING, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
