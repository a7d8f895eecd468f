"""Saved episodes: what a snapshot holds, how an env's state is taken and put back, and the
bounded store that keeps them.

An env opts in one of two ways (`EnvSpec.snapshots` says which, or why neither):

* **methods**: `snapshot(self) -> bytes` and `restore(self, data, *, episode_id)`: the env
  saves and loads itself (any format: pickle is fine, the server seals what leaves it);
  `restore` gives the episode `episode_id` (the saved one for a restore, a new one for a
  fork's copy).
* **state**: the env's `State` holds all of its state (random generators included) and
  `load_state(self, state)` puts it back; the kernel encodes and decodes the State itself.

Around the env's own state a snapshot keeps what the kernel knows of the episode (`Saved`):
its id, step count, task, the last observation the client was given, whether it had ended,
and a rubric's running state (the turns a `Trajectory` scores), with what the env is: its
name, version, the hash of its state's schema and the env's own identity
(`snapshot_identity`: the Gymnasium bridge names the env id and gymnasium's version). A blob
whose identity differs from the session's env is refused (`SnapshotMismatch`), never loaded.

The store (`SnapshotStore`) is bounded three ways (`Limits`): snapshots per owner, bytes per
snapshot, bytes in all. A snapshot belongs to the token that made it (every connection of it
sees it), or, on a server without tokens, to the connection, and goes with it.
"""

from __future__ import annotations

import hashlib
import inspect
import secrets
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final, Protocol

import anyio
import attrs
import msgspec

from ecotone.kernel.contract import replaced
from ecotone.kernel.rubrics import Turn, restore_turns, unwrap_scored
from ecotone.specs import TaskRef

FORMAT: Final = "ecotone-snapshot/1"
"""What a `Saved` says it is; a blob of another format is refused."""


class EnvSpec(Protocol):
    """What this module reads of an env's spec (`ecotone.kernel.envspec.EnvSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def snapshots(self) -> str | None: ...

    @property
    def snapshot_schema(self) -> str: ...

    @property
    def snapshot_identity(self) -> dict[str, str]: ...

    @property
    def action_type(self) -> Any: ...

    @property
    def observation_type(self) -> Any: ...

    @property
    def state_type(self) -> Any: ...

    @property
    def make(self) -> Callable[[], Any]: ...


class SnapshotMismatch(ValueError):
    """A saved episode that cannot go into this env: `what` differs (env, version, schema,
    identity, format)."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what


class Saved(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A saved episode: the env's state and what the kernel knows of the episode."""

    format: str = FORMAT
    env: str
    version: str
    schema: str
    """The hash of the env's State schema (`schema_hash`)."""
    identity: dict[str, str] = {}
    """The env's own identity (`snapshot_identity`), compared on restore."""
    ended: bool = False
    """The episode had ended (done or truncated): steps are refused until a reset."""
    episode_id: str | None = None
    step_count: int = 0
    task: TaskRef | None = None
    forked_from: str | None = None
    observation: bytes = b""
    """The last observation (MessagePack), as the client was answered."""
    body: bytes = b""
    """The env's own: its `snapshot()`, or its State in MessagePack."""
    turns: bytes | None = None
    """A rubric's episode so far (MessagePack pairs of action and observation), when one of
    its parts scores the whole trajectory."""

    @property
    def size(self) -> int:
        return len(self.body) + len(self.observation) + len(self.turns or b"")


def schema_hash(state_type: Any) -> str:
    """A short hash of `state_type`'s JSON Schema: a State of another shape gets another."""
    schema = msgspec.json.encode(msgspec.json.schema(state_type), order="sorted")
    return hashlib.sha256(schema).hexdigest()[:16]


def unsupported_reason(env_cls: type, label: str) -> str | None:
    """Why an env class cannot be saved, or None: it can (`snapshot_kind` says how)."""
    own = getattr(env_cls, "snapshot_unsupported", None)
    if own:
        return f"environment {label!r} cannot be saved: {own}"
    if snapshot_kind(env_cls) is None:
        return (
            f"environment {label!r} cannot be saved: it defines neither snapshot() and "
            "restore() nor load_state() (docs/snapshots.md)"
        )
    return None


def snapshot_kind(env_cls: type) -> str | None:
    """`methods`, `state`, or None: how an env class saves itself."""
    if getattr(env_cls, "snapshot_unsupported", None):
        return None
    if callable(getattr(env_cls, "snapshot", None)) and callable(getattr(env_cls, "restore", None)):
        return "methods"
    if callable(getattr(env_cls, "load_state", None)):
        return "state"
    return None


def new_episode_id() -> str:
    """An id for a fork's copy of an episode."""
    return uuid.uuid4().hex


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _saved(spec: EnvSpec, state: Any, body: bytes, turns: list[Turn] | None) -> Saved:
    return Saved(
        env=spec.name,
        version=spec.version,
        schema=spec.snapshot_schema,
        identity=spec.snapshot_identity,
        episode_id=getattr(state, "episode_id", None),
        step_count=int(getattr(state, "step_count", 0) or 0),
        body=body,
        turns=None
        if turns is None
        else msgspec.msgpack.encode([(turn.action, turn.observation) for turn in turns]),
    )


def capture(env: Any, spec: EnvSpec) -> Saved:
    """Save a plain env's episode (its state and a rubric's turns)."""
    inner, turns = unwrap_scored(env)
    state = inner.state()
    body = inner.snapshot() if spec.snapshots == "methods" else msgspec.msgpack.encode(state)
    return _saved(spec, state, _bytes(body, spec), turns)


async def acapture(env: Any, spec: EnvSpec) -> Saved:
    """`capture` for an env whose methods are coroutines (or wrapped in some)."""
    inner, turns = unwrap_scored(env)
    state = await _maybe(inner.state())
    if spec.snapshots == "methods":
        body = await _maybe(inner.snapshot())
    else:
        body = msgspec.msgpack.encode(state)
    return _saved(spec, state, _bytes(body, spec), turns)


def _bytes(body: Any, spec: EnvSpec) -> bytes:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(
            f"environment {spec.name!r}: snapshot() returned {type(body).__qualname__}, not bytes"
        )
    return bytes(body)


def _turns(saved: Saved, spec: EnvSpec) -> list[Turn]:
    pairs = msgspec.msgpack.decode(
        saved.turns or b"[]",
        type=list[tuple[spec.action_type, spec.observation_type]],  # type: ignore[name-defined]
    )
    return [Turn(action, observation) for action, observation in pairs]


def _load_state(saved: Saved, spec: EnvSpec, episode_id: str | None) -> Any:
    state = msgspec.msgpack.decode(saved.body, type=spec.state_type)
    return replaced(state, episode_id=episode_id)


def apply(env: Any, spec: EnvSpec, saved: Saved, episode_id: str | None) -> None:
    """Put a saved episode into a plain env, as episode `episode_id`."""
    inner, turns = unwrap_scored(env)
    if spec.snapshots == "methods":
        inner.restore(saved.body, episode_id=episode_id)
    else:
        inner.load_state(_load_state(saved, spec, episode_id))
    if turns is not None:
        restore_turns(env, _turns(saved, spec))


async def aapply(env: Any, spec: EnvSpec, saved: Saved, episode_id: str | None) -> None:
    """`apply` for an env whose methods are coroutines (or wrapped in some)."""
    inner, turns = unwrap_scored(env)
    if spec.snapshots == "methods":
        await _maybe(inner.restore(saved.body, episode_id=episode_id))
    else:
        await _maybe(inner.load_state(_load_state(saved, spec, episode_id)))
    if turns is not None:
        restore_turns(env, _turns(saved, spec))


def check(saved: Saved, spec: EnvSpec) -> None:
    """Refuse a saved episode `spec`'s env cannot take.

    Raises:
        SnapshotMismatch: Its format, env, version, state schema or identity differ.
    """
    if saved.format != FORMAT:
        raise SnapshotMismatch(
            f"the snapshot is in format {saved.format!r}; this server reads {FORMAT!r}", "format"
        )
    mine = {"env": spec.name, "version": spec.version, "schema": spec.snapshot_schema}
    theirs = {"env": saved.env, "version": saved.version, "schema": saved.schema}
    for what in ("env", "version", "schema"):
        if mine[what] != theirs[what]:
            label = {"env": "env", "version": "env version", "schema": "State schema"}[what]
            raise SnapshotMismatch(
                f"the snapshot is of {label} {theirs[what]!r}; this session's is {mine[what]!r}",
                what,
            )
    if saved.identity != spec.snapshot_identity:
        raise SnapshotMismatch(
            f"the snapshot was made by {saved.identity}; this session's env is "
            f"{spec.snapshot_identity}",
            "identity",
        )


def encode(saved: Saved) -> bytes:
    return msgspec.msgpack.encode(saved)


def decode(data: bytes) -> Saved:
    """A `Saved` from bytes that passed the seal.

    Raises:
        SnapshotMismatch: They are not a saved episode of a format this server reads.
    """
    try:
        return msgspec.msgpack.decode(data, type=Saved)
    except msgspec.DecodeError as exc:
        raise SnapshotMismatch(
            f"the snapshot is not one this server reads: {exc}", "format"
        ) from exc


# --- the store ------------------------------------------------------------------------------


class StoreFull(Exception):
    """No room for a snapshot: `scope` is `owner` (too many), `size` (too big) or `store`."""

    def __init__(self, message: str, scope: str, limit: int) -> None:
        super().__init__(message)
        self.scope = scope
        self.limit = limit


@attrs.define(slots=True)
class SnapshotStore:
    """The server's snapshots, by id, each with its owner's key; bounded."""

    max_per_owner: int
    max_bytes: int
    max_total: int
    _items: dict[str, tuple[object, Saved]] = attrs.field(factory=dict, init=False)
    _count: dict[object, int] = attrs.field(factory=dict, init=False)
    total: int = attrs.field(default=0, init=False)
    """Bytes held."""

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[tuple[str, Saved]]:
        return ((sid, saved) for sid, (_, saved) in list(self._items.items()))

    def put(self, owner: object, saved: Saved) -> str:
        """Keep `saved` for `owner`; its id.

        Raises:
            StoreFull: It does not fit.
        """
        size = saved.size
        if size > self.max_bytes:
            raise StoreFull(
                f"the snapshot is {size} bytes; one may be {self.max_bytes} at most "
                "(max_snapshot_bytes)",
                "size",
                self.max_bytes,
            )
        held = self._count.get(owner, 0)
        if held >= self.max_per_owner:
            raise StoreFull(
                f"this owner holds {held} of the {self.max_per_owner} snapshots it may hold "
                "(max_snapshots): drop some",
                "owner",
                self.max_per_owner,
            )
        if self.total + size > self.max_total:
            raise StoreFull(
                f"the server's snapshot store is full ({self.total} of {self.max_total} bytes, "
                "max_snapshot_store_bytes)",
                "store",
                self.max_total,
            )
        sid = "snap-" + secrets.token_hex(8)
        self._items[sid] = (owner, saved)
        self._count[owner] = held + 1
        self.total += size
        return sid

    def get(self, owner: object, sid: str) -> Saved | None:
        """`owner`'s snapshot `sid`, or None (unknown, or another's)."""
        item = self._items.get(sid)
        if item is None or item[0] != owner:
            return None
        return item[1]

    def drop(self, owner: object, sid: str) -> bool:
        """Forget `owner`'s snapshot `sid`; whether there was one."""
        item = self._items.get(sid)
        if item is None or item[0] != owner:
            return False
        del self._items[sid]
        self._forget(owner, item[1])
        return True

    def drop_owner(self, owner: object) -> int:
        """Forget every snapshot of `owner` (its connection closed); how many."""
        gone = [sid for sid, (who, _) in self._items.items() if who == owner]
        for sid in gone:
            self._forget(owner, self._items.pop(sid)[1])
        return len(gone)

    def _forget(self, owner: object, saved: Saved) -> None:
        self.total -= saved.size
        left = self._count.get(owner, 0) - 1
        if left > 0:
            self._count[owner] = left
        else:
            self._count.pop(owner, None)


# --- forks: one episode saved, copied into new envs ----------------------------------------


def _close_quietly(envs: list[Any]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # the fork failed already: that is what the client hears
            pass


def fork(env: Any, spec: EnvSpec, episode_ids: list[str]) -> tuple[Saved, list[Any]]:
    """Save a plain env's episode and make one new env holding it per id in `episode_ids`
    (all or none: on a failure, those made are closed)."""
    saved = capture(env, spec)
    made: list[Any] = []
    try:
        for episode_id in episode_ids:
            made.append(spec.make())
            apply(made[-1], spec, saved, episode_id)
    except BaseException:
        _close_quietly(made)
        raise
    return saved, made


async def afork(env: Any, spec: EnvSpec, episode_ids: list[str]) -> tuple[Saved, list[Any]]:
    """`fork` for an env whose methods are coroutines (or wrapped in some)."""
    saved = await acapture(env, spec)
    made: list[Any] = []
    try:
        for episode_id in episode_ids:
            made.append(spec.make())
            await aapply(made[-1], spec, saved, episode_id)
    except BaseException:
        with anyio.CancelScope(shield=True):  # cancelled at its deadline: close them still
            for each in made:
                try:
                    await _maybe(each.close())
                except Exception:
                    pass
        raise
    return saved, made
