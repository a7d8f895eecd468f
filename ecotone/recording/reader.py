"""Reading recorded trajectories back: `read_episode(path)`, `read_episodes(dir)`."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import msgspec

T = TypeVar("T")


@attrs.frozen
class Episode:
    """One recorded episode. `observations` holds the reset's observation then one per step
    (so it is one longer than `actions`); `end` is the end record's reason, or None when the
    file has none (the episode was still running, or the writer died)."""

    path: Path
    source: str
    env: str
    session: str | None
    episode_id: str | None
    seed: int | None
    env_index: int | None
    started: float
    observations: list[Any]
    actions: list[Any]
    rewards: list[float | None]
    dones: list[bool]
    truncateds: list[bool]
    durations_s: list[float]
    times: list[float]
    end: str | None
    error: str | None
    task: dict[str, Any] | None = None
    """The task played (`id`, `split`, `index`), as `ecotone collect` records it."""
    policy: str | None = None
    """Who played it (`ecotone collect`'s policy name)."""
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    """The conversation, where the policy recorded one (a chat policy): every message in
    order, the system's first."""
    turns: list[dict[str, Any]] = attrs.field(factory=list)
    """The model's calls in token ids, where the endpoint returned them: each `prompt_ids`,
    `completion_ids`, `logprobs`, `continued` (see `ecotone.collect.Turn`) and `t`, the
    steps taken before it."""

    @property
    def length(self) -> int:
        """Steps taken."""
        return len(self.actions)

    @property
    def total_reward(self) -> float:
        return float(sum(r for r in self.rewards if r is not None))

    @property
    def finished(self) -> bool:
        """The episode reached `done` or `truncated` (not cut off, not lost)."""
        return self.end in ("done", "truncated")


_MSGPACK_FIXED = {
    0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,
    0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9, 0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18,
}  # fmt: skip
_MSGPACK_SIZED = {  # type byte -> (length bytes, extra bytes before the payload)
    0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),
    0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),
}  # fmt: skip
_UINT = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I")}


def _msgpack_end(buf: bytes, pos: int) -> int:
    """Where the MessagePack object starting at `pos` ends; IndexError if it is cut off."""
    todo = 1
    n = len(buf)
    while todo:
        if pos >= n:
            raise IndexError("truncated")
        b = buf[pos]
        todo -= 1
        if b <= 0x7F or b >= 0xE0:
            pos += 1
        elif b <= 0x8F:
            todo += 2 * (b & 0x0F)
            pos += 1
        elif b <= 0x9F:
            todo += b & 0x0F
            pos += 1
        elif b <= 0xBF:
            pos += 1 + (b & 0x1F)
        elif b in _MSGPACK_FIXED:
            pos += _MSGPACK_FIXED[b]
        elif b in _MSGPACK_SIZED:
            width, extra = _MSGPACK_SIZED[b]
            if pos + 1 + width > n:
                raise IndexError("truncated")
            (size,) = _UINT[width].unpack_from(buf, pos + 1)
            pos += 1 + width + extra + size
        elif b in (0xDC, 0xDD, 0xDE, 0xDF):
            width = 2 if b in (0xDC, 0xDE) else 4
            if pos + 1 + width > n:
                raise IndexError("truncated")
            (count,) = _UINT[width].unpack_from(buf, pos + 1)
            todo += count * (2 if b >= 0xDE else 1)
            pos += 1 + width
        else:
            raise ValueError(f"byte 0x{b:02x} at {pos} starts no MessagePack object")
    if pos > n:
        raise IndexError("truncated")
    return pos


def _records(path: Path) -> Iterator[dict[str, Any]]:
    data = path.read_bytes()
    if path.suffix == ".jsonl":
        decoder = msgspec.json.Decoder(dict[str, Any])
        lines = data.split(b"\n")
        for number, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                yield decoder.decode(line)
            except msgspec.DecodeError:
                if number >= len(lines) - 2:  # a last line cut off by a crash
                    return
                raise
        return
    mp = msgspec.msgpack.Decoder(dict[str, Any])
    pos = 0
    while pos < len(data):
        try:
            end = _msgpack_end(data, pos)
        except IndexError:
            return  # a last record cut off by a crash
        yield mp.decode(data[pos:end])
        pos = end


def is_success(observation: Any, done: bool, truncated: bool, reward: float | None) -> bool:
    """Whether an episode that ended on `observation` succeeded: the env's word when it gives
    one, `metadata["is_success"]` (Gymnasium's and Stable-Baselines' convention); otherwise
    an episode that terminated (`done`, not cut short) with a positive last reward."""
    metadata = observation.get("metadata") if isinstance(observation, dict) else None
    if isinstance(metadata, dict) and "is_success" in metadata:
        return bool(metadata["is_success"])
    return bool(done and not truncated and (reward or 0.0) > 0)


def _convert(value: Any, type_: Any) -> Any:
    if type_ is None or value is None:
        return value
    return msgspec.convert(value, type_)


def read_episode(
    path: str | Path, *, observation_type: Any = None, action_type: Any = None
) -> Episode:
    """Load one episode file. Given `observation_type` / `action_type` (msgspec Structs,
    dataclasses, attrs classes), observations and actions are converted into them."""
    path = Path(path)
    records = iter(_records(path))
    header = next(records, None)
    if header is None or header.get("kind") != "episode":
        raise ValueError(f"{path} is not an ecotone episode recording (no header record)")
    observations: list[Any] = []
    actions: list[Any] = []
    rewards: list[float | None] = []
    dones: list[bool] = []
    truncateds: list[bool] = []
    durations: list[float] = []
    times: list[float] = []
    end: str | None = None
    error: str | None = None
    messages: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for record in records:
        kind = record.get("kind")
        if kind == "policy":
            messages.extend(record.get("messages") or [])
            t = record.get("t")
            turns.extend({**turn, "t": t} for turn in record.get("turns") or [])
        if kind == "reset":
            observations.append(_convert(record["observation"], observation_type))
        elif kind == "step":
            actions.append(_convert(record["action"], action_type))
            observations.append(_convert(record["observation"], observation_type))
            rewards.append(record.get("reward"))
            dones.append(bool(record.get("done")))
            truncateds.append(bool(record.get("truncated")))
            durations.append(float(record.get("duration_s") or 0.0))
            times.append(float(record.get("time") or 0.0))
        elif kind == "end":
            end = record.get("reason")
            error = record.get("error")
    return Episode(
        path=path,
        source=str(header.get("source", "")),
        env=str(header.get("env", "")),
        session=header.get("session"),
        episode_id=header.get("episode_id"),
        seed=header.get("seed"),
        env_index=header.get("env_index"),
        started=float(header.get("time") or 0.0),
        observations=observations,
        actions=actions,
        rewards=rewards,
        dones=dones,
        truncateds=truncateds,
        durations_s=durations,
        times=times,
        end=end,
        error=error,
        task=header.get("task"),
        policy=header.get("policy"),
        messages=messages,
        turns=turns,
    )


def read_episodes(
    directory: str | Path,
    *,
    env: str | None = None,
    observation_type: Any = None,
    action_type: Any = None,
) -> list[Episode]:
    """Every episode recorded under `directory` (both formats, both sources), oldest first.
    `env` keeps only that env's episodes; the types as for `read_episode`."""
    root = Path(directory)
    paths = sorted(p for p in root.rglob("*") if p.suffix in (".jsonl", ".msgpack"))
    episodes = [
        read_episode(p, observation_type=observation_type, action_type=action_type) for p in paths
    ]
    if env is not None:
        episodes = [e for e in episodes if e.env == env]
    episodes.sort(key=lambda e: (e.started, str(e.path)))
    return episodes


__all__ = ["Episode", "is_success", "read_episode", "read_episodes"]
