"""`ecotone collect TARGET`: a policy (a Python callable, or a chat model behind an
OpenAI-compatible endpoint) plays an env's tasks; the trajectories and a summary are written
under --out, and the summary is printed as a table or as JSON."""

from __future__ import annotations

import argparse
import functools
import json
import re
import time
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from ecotone.collect.policies import Policy


def collect_arguments(p: argparse.ArgumentParser) -> None:
    """`collect`'s flags: the target, who acts (--policy or --base-url, one required), which
    tasks and how many episodes, and where the trajectories go."""
    p.add_argument("target", help="env name (played in this process) or a server URL")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--policy",
        metavar="MODULE:NAME",
        help="a Python callable, observation -> action (MODULE from the installed packages or "
        "the working directory)",
    )
    who.add_argument(
        "--base-url", help="an OpenAI-compatible chat endpoint (http://HOST:PORT/v1) to act"
    )
    p.add_argument("--model", help="the model to ask at --base-url")
    p.add_argument("--api-key", help="its key (default: $OPENAI_API_KEY)")
    p.add_argument("--temperature", type=float, help="sampling temperature for --base-url")
    p.add_argument("--max-tokens", type=int, help="tokens per answer for --base-url")
    tokens = p.add_mutually_exclusive_group()
    tokens.add_argument(
        "--tokens",
        action="store_const",
        const=True,
        help="require token ids and logprobs from --base-url (default: kept where it gives them)",
    )
    tokens.add_argument(
        "--no-tokens",
        dest="tokens",
        action="store_const",
        const=False,
        help="never ask --base-url for token ids (plain chat requests)",
    )
    p.add_argument("--env", help="which of the server's envs (default: its default)")
    p.add_argument("--split", help="the task split (default: the env's first)")
    p.add_argument("--tasks", type=int, metavar="N", help="the split's first N tasks (default all)")
    p.add_argument(
        "--task-index", type=int, action="append", metavar="I", help="just these tasks (repeatable)"
    )
    p.add_argument("--repeats", type=int, default=1, help="episodes per task, seeds seed+r (1)")
    p.add_argument(
        "--episodes", type=int, default=10, help="episodes, for an env that publishes no tasks"
    )
    p.add_argument("--concurrency", type=int, default=8, help="episodes in flight (8)")
    p.add_argument("--max-steps", type=int, default=100, help="steps per episode at most (100)")
    p.add_argument("--seed", type=int, default=0, help="the first seed (0)")
    p.add_argument(
        "--fork",
        type=int,
        default=1,
        metavar="K",
        help="play K episodes from each one's state after --fork-at steps, forked on the "
        "server in one request (a GRPO group; 1: no fork)",
    )
    p.add_argument(
        "--fork-at", type=int, default=0, metavar="S", help="steps played before the fork (0)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a reset option, VALUE read as JSON when it parses (repeatable)",
    )
    p.add_argument("--out", help="where the trajectories go (default runs/collect-ENV-TIME)")
    p.add_argument(
        "--format",
        choices=["jsonl", "msgpack", "parquet"],
        default="jsonl",
        help="the trajectories' recording format (jsonl); parquet: recorded as jsonl, and one "
        "row per episode in OUT/episodes.parquet (needs the `datasets` package)",
    )
    p.add_argument("--token", help="the server's token, if it needs one")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _policy(args: argparse.Namespace) -> Policy:
    """The policy the flags name. Raises ValueError for --base-url without --model."""
    from ecotone.collect import ChatPolicy, load_policy

    if args.policy:
        return load_policy(args.policy)
    if not args.model:
        raise ValueError("--base-url needs --model")
    return ChatPolicy(
        args.base_url,
        args.model,
        api_key=args.api_key,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        tokens=args.tokens,
    )


def _reset_options(given: list[str]) -> dict[str, Any]:
    """`--option KEY=VALUE` flags as reset options, each VALUE JSON if it parses, else the
    string. Raises ValueError for an item without `=` or without a key."""
    options: dict[str, Any] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option takes KEY=VALUE, not {item!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def run_collect(args: argparse.Namespace) -> int:
    """Collect, print the summary, return 0. An env name is played in this process
    (`inproc://`); a URL (or `stdio:...`) is reached as it is."""
    from ecotone.collect import Progress, collect

    policy = _policy(args)
    options = _reset_options(args.option)
    target: str = args.target
    url = target if "://" in target or target.startswith("stdio:") else f"inproc://{target}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.env or target.rsplit("/", 1)[-1])
    out = args.out or f"runs/collect-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    progress = Progress(0)
    summary = trio.run(
        functools.partial(
            collect,
            url,
            policy,
            out=out,
            env=args.env,
            split=args.split,
            tasks=args.tasks,
            task_ids=args.task_index,
            repeats=args.repeats,
            episodes=args.episodes,
            concurrency=args.concurrency,
            max_steps=args.max_steps,
            seed=args.seed,
            options=options,
            fmt=args.format,
            progress=progress.update,
            token=args.token,
            planned=progress,
            fork=args.fork,
            fork_at=args.fork_at,
        )
    )
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(summary.table())
        dataset = " and episodes.parquet" if args.format == "parquet" else ""
        print(
            f"\n{summary.episodes} episodes of {summary.env!r} by {summary.policy} in "
            f"{summary.seconds:.1f} s; trajectories, summary.json{dataset} in {summary.out}"
        )
    return 0
