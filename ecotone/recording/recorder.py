"""Writing trajectories: the server-side hook plugin and the client-side recorder (one file
per episode; the layout is in `ecotone.recording`)."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any, Literal, Protocol, TypeVar

import msgspec

from ecotone.specs.hookspecs import hookimpl

log = logging.getLogger("ecotone.recording")

Format = Literal["jsonl", "msgpack"]
FORMATS: tuple[str, ...] = ("jsonl", "msgpack")
RECORD_VERSION = 1

T = TypeVar("T")


class Transition(Protocol):
    """What a step gave, as `ClientRecorder.stepped` records it (a client's `StepResult` is
    one; recording does not import the client)."""

    @property
    def observation(self) -> Any: ...
    @property
    def reward(self) -> float | None: ...
    @property
    def done(self) -> bool: ...
    @property
    def truncated(self) -> bool: ...


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
    """`name` (an env's, which a remote server chooses) as one path component: never empty,
    never `.`, `..` or hidden."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".") or "env"


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
        self._write(self._step(action, observation, reward, done, truncated, duration_s))

    def move(self, seat: str, action: Any, result: Any, duration_s: float) -> None:
        """A multi-agent env's move: a step record naming its `seat`, its observation that
        seat's view after the move (`result`: a StepResult)."""
        fields = (action, result.observation, result.reward, result.done, result.truncated)
        self.seated_step(seat, (*fields, duration_s))

    def seated_step(self, seat: str, fields: tuple[Any, Any, Any, bool, bool, float]) -> None:
        """A step record naming its `seat`: `fields` are `step`'s arguments."""
        record = self._step(*fields)
        record["seat"] = seat
        self._write(record)

    def _step(
        self,
        action: Any,
        observation: Any,
        reward: float | None,
        done: bool,
        truncated: bool,
        duration_s: float,
    ) -> dict[str, Any]:
        self.steps += 1
        return {
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

    def policy(self, messages: list[dict[str, Any]], turns: list[dict[str, Any]]) -> None:
        """How the policy chose its next action (written before its step): the
        conversation's new messages and the model's calls in token ids (`prompt_ids`,
        `completion_ids`, `logprobs`, `continued`), `t` the steps taken before it."""
        self._write(
            {
                "kind": "policy",
                "t": self.steps,
                "messages": messages,
                "turns": turns,
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
        self,
        session_id: str,
        env: str,
        action: Any,
        observation: Any,
        duration_s: float,
        seat: str | None = None,
    ) -> None:
        with self._lock:
            writer = self._writers.get(session_id)
            if writer is None:
                return
            done = bool(_flag(observation, "done"))
            truncated = bool(_flag(observation, "truncated"))
            reward = _flag(observation, "reward")

            def write() -> None:
                record = (action, observation, reward, done, truncated, duration_s)
                if seat is None:
                    writer.step(*record)
                else:  # a multi-agent env's move: the seat, and the public view after it
                    writer.seated_step(seat, record)
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

    def stepped(self, index: int, action: Any, result: Transition, duration_s: float) -> None:
        """Sub-env `index` stepped with `action` to `result` in `duration_s` seconds: a step
        of its episode's file, and the file's end when the episode ended."""
        writer = self._writers.get(index)
        if writer is None:
            return
        done, truncated = result.done, result.truncated
        writer.step(action, result.observation, result.reward, done, truncated, duration_s)
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


__all__ = ["ClientRecorder", "EpisodeWriter", "TrajectoryRecorder"]
