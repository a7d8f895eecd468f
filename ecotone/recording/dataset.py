"""Recorded episodes as a dataset, one row per episode, through the optional `datasets`
package (`pip install 'ecotone[datasets]'`): what `ecotone collect --format parquet` writes,
and what any recorded run converts to.

    ecotone.recording.write_parquet("runs/eval", "runs/eval.parquet")
    datasets.load_dataset("parquet", data_files="runs/eval.parquet")["train"]

A row (`FEATURES` types them all, so every row has every column):

- `env`, `policy`, `task_id`, `split`, `index`, `seed`, `path` (the episode's recording);
- `messages`: the conversation, where the policy recorded one (a chat policy's), in the
  chat-completions form (`role`, `content`, `tool_calls`, `tool_call_id`); `tool_calls`:
  every tool call the model made, in order (`id`, `name`, `arguments` as JSON text);
- `actions`, `observations` (the reset's first): each as JSON text, since every env has
  its own; `rewards`: per step; `return`: their sum; `steps`, `end`, `error`, `success`;
- `token_ids`, `loss_mask`, `logprobs`: the episode as the one token sequence the model saw
  and wrote, where every call after the first was continued from its ids: the mask is 1 on
  the tokens the policy generated and 0 on the prompt's and the env's, and the logprobs are
  the sampled ones where the mask is 1 and 0.0 elsewhere; empty otherwise;
- `turns`: the model's calls as recorded (`t`, `prompt_ids`, `completion_ids`,
  `logprobs`, `continued`), whether or not they make one sequence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ecotone.recording.reader import Episode, is_success, read_episodes


def _datasets() -> Any:
    """The `datasets` package.

    Raises:
        ValueError: it is not installed (saying how to install it).
    """
    try:
        import datasets  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ValueError(
            "trajectories as a dataset (Parquet) need the `datasets` package: "
            "pip install 'ecotone[datasets]'"
        ) from None
    return datasets


def require_datasets() -> None:
    """Check now that `datasets` can be imported (ValueError saying how to install it)."""
    _datasets()


def features() -> Any:
    """The rows' types, as `datasets.Features`."""
    ds = _datasets()
    s, i, f = ds.Value("string"), ds.Value("int64"), ds.Value("float64")
    call = {"id": s, "type": s, "function": {"name": s, "arguments": s}}
    message = {"role": s, "content": s, "tool_calls": ds.List(call), "tool_call_id": s}
    turn = {
        "t": i,
        "prompt_ids": ds.List(i),
        "completion_ids": ds.List(i),
        "logprobs": ds.List(f),
        "continued": ds.Value("bool"),
    }
    return ds.Features(
        {
            "env": s,
            "policy": s,
            "task_id": s,
            "split": s,
            "index": i,
            "seed": i,
            "path": s,
            "messages": ds.List(message),
            "tool_calls": ds.List({"id": s, "name": s, "arguments": s}),
            "actions": ds.List(s),
            "observations": ds.List(s),
            "rewards": ds.List(f),
            "return": f,
            "steps": i,
            "end": s,
            "error": s,
            "success": ds.Value("bool"),
            "token_ids": ds.List(i),
            "loss_mask": ds.List(ds.Value("int8")),
            "logprobs": ds.List(f),
            "turns": ds.List(turn),
        }
    )


def token_sequence(turns: list[dict[str, Any]]) -> tuple[list[int], list[int], list[float]]:
    """The turns as one sequence: the ids, the loss mask (1 where the model generated), the
    logprobs (0.0 where it did not); three empty lists unless every turn after the first was
    continued from the ids before it."""
    if not turns or any(not turn.get("continued") for turn in turns[1:]):
        return [], [], []
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for turn in turns:
        prompt, output = list(turn["prompt_ids"]), list(turn["completion_ids"])
        ids += prompt + output
        mask += [0] * len(prompt) + [1] * len(output)
        logprobs += [0.0] * len(prompt) + [float(x) for x in turn["logprobs"]]
    return ids, mask, logprobs


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _message(message: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append(
            {
                "id": _text(call.get("id")),
                "type": _text(call.get("type", "function")),
                "function": {
                    "name": _text(function.get("name")),
                    "arguments": _text(function.get("arguments")),
                },
            }
        )
    return {
        "role": _text(message.get("role")),
        "content": _text(message.get("content")),
        "tool_calls": calls,
        "tool_call_id": _text(message.get("tool_call_id")),
    }


def episode_row(episode: Episode) -> dict[str, Any]:
    """One episode as a row (see the module)."""
    task = episode.task or {}
    messages = [_message(m) for m in episode.messages]
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for m in messages
        for c in m["tool_calls"]
    ]
    ids, mask, logprobs = token_sequence(episode.turns)
    last = episode.observations[-1] if episode.observations else None
    done = bool(episode.dones and episode.dones[-1])
    truncated = bool(episode.truncateds and episode.truncateds[-1])
    reward = episode.rewards[-1] if episode.rewards else None
    return {
        "env": episode.env,
        "policy": episode.policy,
        "task_id": task.get("id"),
        "split": task.get("split"),
        "index": task.get("index"),
        "seed": episode.seed,
        "path": str(episode.path),
        "messages": messages,
        "tool_calls": calls,
        "actions": [json.dumps(a, ensure_ascii=False) for a in episode.actions],
        "observations": [json.dumps(o, ensure_ascii=False) for o in episode.observations],
        "rewards": [None if r is None else float(r) for r in episode.rewards],
        "return": episode.total_reward,
        "steps": episode.length,
        "end": episode.end,
        "error": episode.error,
        "success": is_success(last, done, truncated, reward) if episode.length else False,
        "token_ids": ids,
        "loss_mask": mask,
        "logprobs": logprobs,
        "turns": [
            {
                "t": turn.get("t"),
                "prompt_ids": list(turn["prompt_ids"]),
                "completion_ids": list(turn["completion_ids"]),
                "logprobs": [float(x) for x in turn["logprobs"]],
                "continued": bool(turn.get("continued")),
            }
            for turn in episode.turns
        ],
    }


def to_dataset(episodes: str | Path | Iterable[Episode]) -> Any:
    """Episodes (a folder of recordings, read with `read_episodes`, or Episode records) as a
    `datasets.Dataset`, one row each. ValueError if `datasets` is not installed."""
    ds = _datasets()
    if isinstance(episodes, str | Path):
        episodes = read_episodes(episodes)
    rows = [episode_row(e) for e in episodes]
    return ds.Dataset.from_list(rows, features=features())


def write_parquet(episodes: str | Path | Iterable[Episode], path: str | Path) -> Path:
    """Write `to_dataset(episodes)` to the Parquet file `path` (its folder made); the path.
    `datasets.load_dataset("parquet", data_files=str(path))` reads it back."""
    ds = _datasets()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = to_dataset(episodes)
    shown = ds.is_progress_bar_enabled()
    ds.disable_progress_bars()  # no bar on a command's stderr for a small write
    try:
        table.to_parquet(str(out))
    finally:
        if shown:
            ds.enable_progress_bars()
    return out


__all__ = [
    "episode_row",
    "features",
    "require_datasets",
    "to_dataset",
    "token_sequence",
    "write_parquet",
]
