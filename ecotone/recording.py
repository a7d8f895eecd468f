"""Trajectory recording: every step's action, observation, reward and timing, one file per
episode, and `read_episodes` to load them back.

Two writers produce the same files:

* **Server side**, `TrajectoryRecorder(dir)`: a plugin on the kernel's lifecycle hooks
  (`ecotone_episode_started`, `ecotone_step_completed`, `ecotone_session_closed`). Register it
  on the server's registry (`registry.register(TrajectoryRecorder("runs/traj"))`) and every
  session's episodes are recorded with the typed actions and observations the env saw and
  returned, and the env's own step time.
* **Client side**, `ecotone.VectorEnv(..., record_to=dir)`: the trainer's view, one file per
  sub-env episode, timed from the client (the round trip included).

Layout: `DIR/ENV/NAME.jsonl` (or `.msgpack`), one file per episode. Each file is a sequence of
records, one JSON object per line (`jsonl`) or the same objects as a stream of concatenated
MessagePack maps (`msgpack`, readable by any MessagePack stream unpacker):

    {"kind": "episode", "version": 1, "source": "server" | "client", "env": ..., "session": ...,
     "episode_id": ..., "seed": ..., "env_index": ... (client), "time": UNIX_SECONDS}
    {"kind": "reset", "observation": {...}, "time": ...}
    {"kind": "step", "t": 1, "action": {...}, "observation": {...}, "reward": 1.0, "done": false,
     "truncated": false, "duration_s": 0.00012, "time": ...}
    ...
    {"kind": "end", "reason": "done" | "truncated" | "reset" | "closed:REASON" | "lost",
     "error": null | "...", "time": ...}

A file without an `end` record is an episode still running (or cut off by a crash); a partial
last record is ignored by the reader. Writes are buffered and flushed when an episode ends, so
recording costs the step path one encode and one buffered write.
"""

from __future__ import annotations

import itertools
import logging
import re
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

import attrs
import msgspec

from ecotone.kernel.hookspecs import hookimpl

log = logging.getLogger("ecotone.recording")

Format = Literal["jsonl", "msgpack"]
FORMATS: tuple[str, ...] = ("jsonl", "msgpack")
RECORD_VERSION = 1

T = TypeVar("T")


def _plain(obj: Any) -> Any:
    """msgspec's fallback for values it cannot encode: numpy scalars and arrays become plain
    numbers and lists; anything else its repr (a record is never lost to one odd value)."""
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    return repr(obj)


def _encoder(fmt: str) -> Any:
    if fmt == "jsonl":
        return msgspec.json.Encoder(enc_hook=_plain)
    if fmt == "msgpack":
        return msgspec.msgpack.Encoder(enc_hook=_plain)
    raise ValueError(f"unknown recording format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "env"


def _flag(obs: Any, name: str) -> Any:
    if isinstance(obs, dict):
        return obs.get(name)
    return getattr(obs, name, None)


class EpisodeWriter:
    """Writes one episode's records to one file (see the module docstring for the format)."""

    def __init__(self, path: Path, fmt: str, header: dict[str, Any]) -> None:
        self.path = path
        self._encoder = _encoder(fmt)
        self._jsonl = fmt == "jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = open(path, "wb")  # closed in end()
        self.steps = 0
        self._write({"kind": "episode", "version": RECORD_VERSION, **header, "time": time.time()})

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        data = self._encoder.encode(record)
        self._file.write(data + b"\n" if self._jsonl else data)

    def reset(self, observation: Any) -> None:
        self._write({"kind": "reset", "observation": observation, "time": time.time()})

    def step(
        self,
        action: Any,
        observation: Any,
        reward: float | None,
        done: bool,
        truncated: bool,
        duration_s: float,
    ) -> None:
        self.steps += 1
        self._write(
            {
                "kind": "step",
                "t": self.steps,
                "action": action,
                "observation": observation,
                "reward": reward,
                "done": done,
                "truncated": truncated,
                "duration_s": duration_s,
                "time": time.time(),
            }
        )

    def end(self, reason: str, error: str | None = None) -> None:
        """Write the end record and close the file (idempotent)."""
        if self._file is None:
            return
        self._write({"kind": "end", "reason": reason, "error": error, "time": time.time()})
        self._file.close()
        self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None


class TrajectoryRecorder:
    """Server-side recording: a plugin object for the server's registry.

        registry.register(TrajectoryRecorder("runs/traj", format="jsonl"))

    Files go to `DIR/ENV/SESSION-NNNN.jsonl`, one per episode. The hooks run on the server's
    event loop; each costs one encode and one buffered write, and never raises (a failing write
    is logged and that episode's recording stops).
    """

    def __init__(self, directory: str | Path, *, format: Format = "jsonl") -> None:
        _encoder(format)  # reject an unknown format now, not on the first episode
        self.directory = Path(directory)
        self.format: str = format
        self._writers: dict[str, EpisodeWriter] = {}
        self._episodes: dict[str, int] = {}
        self._lock = threading.Lock()

    def _guarded(self, session_id: str, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception(
                "recording %s of session %s failed; its episode stops recording", what, session_id
            )
            writer = self._writers.pop(session_id, None)
            if writer is not None:
                try:
                    writer.end("error")
                except Exception:  # pragma: no cover - the disk is gone
                    pass

    @hookimpl
    def ecotone_episode_started(
        self, session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
    ) -> None:
        with self._lock:
            previous = self._writers.pop(session_id, None)
            if previous is not None:
                self._guarded(session_id, "an abandoned episode", previous.end, "reset")
            number = self._episodes.get(session_id, 0) + 1
            self._episodes[session_id] = number
            path = self.directory / _safe(env) / f"{session_id}-{number:04d}.{_suffix(self.format)}"
            header = {
                "source": "server",
                "env": env,
                "session": session_id,
                "episode_id": episode_id,
                "seed": seed,
                "env_index": None,
            }

            def start() -> None:
                writer = EpisodeWriter(path, self.format, header)
                self._writers[session_id] = writer
                writer.reset(observation)

            self._guarded(session_id, "a reset", start)

    @hookimpl
    def ecotone_step_completed(
        self, session_id: str, env: str, action: Any, observation: Any, duration_s: float
    ) -> None:
        with self._lock:
            writer = self._writers.get(session_id)
            if writer is None:
                return
            done = bool(_flag(observation, "done"))
            truncated = bool(_flag(observation, "truncated"))

            def write() -> None:
                writer.step(
                    action, observation, _flag(observation, "reward"), done, truncated, duration_s
                )
                if done or truncated:
                    del self._writers[session_id]
                    writer.end("done" if done else "truncated")

            self._guarded(session_id, "a step", write)

    @hookimpl
    def ecotone_session_closed(self, session_id: str, env: str, reason: str) -> None:
        with self._lock:
            self._episodes.pop(session_id, None)
            writer = self._writers.pop(session_id, None)
            if writer is not None:
                self._guarded(session_id, "the end", writer.end, f"closed:{reason}")

    def close(self) -> None:
        """End every episode being written (a server stopping calls the closed hooks first)."""
        with self._lock:
            for session_id, writer in list(self._writers.items()):
                self._guarded(session_id, "the end", writer.end, "closed:recorder")
            self._writers.clear()


def _suffix(fmt: str) -> str:
    return "jsonl" if fmt == "jsonl" else "msgpack"


class ClientRecorder:
    """Client-side recording for a vector env: one writer per sub-env's current episode."""

    def __init__(self, directory: str | Path, env: str, *, format: Format = "jsonl") -> None:
        _encoder(format)
        self.directory = Path(directory)
        self.env = env
        self.format: str = format
        self.run = uuid.uuid4().hex[:8]
        self._writers: dict[int, EpisodeWriter] = {}
        self._numbers: dict[int, itertools.count[int]] = {}

    def started(self, index: int, session: str | None, seed: int | None, observation: Any) -> None:
        self.ended(index, "reset")
        number = next(self._numbers.setdefault(index, itertools.count(1)))
        name = f"client-{self.run}-{index:04d}-{number:04d}.{_suffix(self.format)}"
        writer = EpisodeWriter(
            self.directory / _safe(self.env) / name,
            self.format,
            {
                "source": "client",
                "env": self.env,
                "session": session,
                "episode_id": None,
                "seed": seed,
                "env_index": index,
            },
        )
        writer.reset(observation)
        self._writers[index] = writer

    def stepped(
        self,
        index: int,
        action: Any,
        observation: Any,
        reward: float | None,
        done: bool,
        truncated: bool,
        duration_s: float,
    ) -> None:
        writer = self._writers.get(index)
        if writer is None:
            return
        writer.step(action, observation, reward, done, truncated, duration_s)
        if done or truncated:
            del self._writers[index]
            writer.end("done" if done else "truncated")

    def ended(self, index: int, reason: str, error: str | None = None) -> None:
        writer = self._writers.pop(index, None)
        if writer is not None:
            writer.end(reason, error)

    def close(self) -> None:
        for index in list(self._writers):
            self.ended(index, "closed:client")


# --- reading -----------------------------------------------------------------------------------


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
    for record in records:
        kind = record.get("kind")
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


__all__ = [
    "ClientRecorder",
    "Episode",
    "EpisodeWriter",
    "TrajectoryRecorder",
    "read_episode",
    "read_episodes",
]
