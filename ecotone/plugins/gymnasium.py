"""`gymnasium:ID`: any registered Gymnasium env, served by ecotone.

    ecotone serve gymnasium:CartPole-v1
    ecotone serve 'gymnasium:FrozenLake-v1?is_slippery=false&map_name=8x8'

The part after `?` holds keyword arguments for `gymnasium.make(ID, **kwargs)` (made once per
session, when it opens), in URL query syntax; each value is read as JSON when it parses
(`false`, `3`, `0.5`, `null`, `["SFFF","FHFH","FFFH","HFFG"]`) and kept as a string otherwise
(`8x8`). `max_episode_steps=N` works as it does in `gymnasium.make`.

The env class for a name is built (and cached) by the `ecotone_resolve_environment` hook from
one probe instance's spaces. Its msgspec types:

* Action `{"action": A}`; Observation `{"obs": O, "info": {...}, "reward", "done",
  "truncated"}` with `done` = Gymnasium's `terminated`, `truncated` kept apart, and `info`
  converted to JSON data; State `{"episode_id", "step_count", "obs"}` (the last observation).
* Spaces become types whose JSON Schema keeps the exact space under `x-gym-space` (what
  `ecotone.gym.make` rebuilds the spaces from), with constraints msgspec checks on actions, so
  a bad action is an `invalid_action` error naming the field (`action`, `action.2`,
  `action.pos.0`):

  | Gymnasium space         | wire value and checks                                         |
  |-------------------------|---------------------------------------------------------------|
  | Discrete(n, start)      | int, start <= x <= start + n - 1                               |
  | Box(low, high, shape)   | number (shape ()) or nested lists of exactly `shape`; each    |
  |                         | item within its finite bounds (int items for integer dtypes)  |
  | MultiDiscrete(nvec)     | nested lists of ints, start <= x < start + nvec per item       |
  | MultiBinary(n)          | nested lists of 0/1 of exactly `n`                            |
  | Text                    | string, min/max length, only the space's characters            |
  | Dict / Tuple            | object with the space's keys / array of the subspaces' values |
  | Graph, Sequence, OneOf  | not supported: a ValueError when the env is resolved          |

  Boxes whose bounds differ per item are checked item by item up to 4,096 items; larger ones
  are checked against the loosest bounds only.

Reset options are passed as Gymnasium's `options` dict. Classic-control and toy-text envs run
inline (on the event loop); others in worker threads. Rendering is not served. JSON has no
inf or nan: msgspec writes them as null (`ecotone.gym` reads null back as nan in float arrays);
the msgpack codec keeps them.

Gymnasium and numpy are optional (`ecotone[gymnasium]`): this module imports them only when a
`gymnasium:` name is resolved, so ecotone works without them.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import pickle
import random
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar
from urllib.parse import parse_qsl

import msgspec

import ecotone

if TYPE_CHECKING:
    import numpy as np
    from gymnasium import spaces

PREFIX = "gymnasium:"
MAX_ITEMWISE = 4096
"""Boxes with per-item bounds are validated item by item up to this many items."""
INLINE_ENTRY_POINTS = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")


class GymnasiumBridgeError(ValueError):
    """A `gymnasium:` name that cannot be served: a bad name, an env Gymnasium cannot make,
    a space with no schema, or Gymnasium not installed."""


def parse_name(name: str, prefix: str = PREFIX) -> tuple[str, dict[str, Any]]:
    """`gymnasium:ID?k=v&...` -> (ID, make kwargs). Values are JSON where they parse.

    `prefix` is another bridge's (`pettingzoo:`), whose names are read the same way.
    """
    if not name.startswith(prefix):
        raise GymnasiumBridgeError(f"{name!r} does not start with {prefix!r}")
    gym_id, _, query = name[len(prefix) :].partition("?")
    if not gym_id:
        what = "Gymnasium env" if prefix == PREFIX else "env"
        raise GymnasiumBridgeError(f"{name!r} names no {what}: use {prefix}ID")
    kwargs: dict[str, Any] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError as exc:
        raise GymnasiumBridgeError(f"{name!r}: bad make arguments after '?': {exc}") from exc
    for key, text in pairs:
        if key in kwargs:
            raise GymnasiumBridgeError(f"{name!r}: make argument {key!r} is given twice")
        try:
            kwargs[key] = json.loads(text)
        except ValueError:
            kwargs[key] = text
    return gym_id, kwargs


# --- spaces -> msgspec types ---------------------------------------------------------------


def _scalar(kind: str, low: Any, high: Any) -> Any:
    import numpy as np

    if kind == "b":
        return bool
    if kind in "iu":
        return Annotated[int, msgspec.Meta(ge=int(low), le=int(high))]
    ge = float(low) if np.isfinite(low) else None
    le = float(high) if np.isfinite(high) else None
    if ge is None and le is None:
        return float
    return Annotated[float, msgspec.Meta(ge=ge, le=le)]


def _array_type(low: np.ndarray[Any, Any], high: np.ndarray[Any, Any], kind: str) -> Any:
    """Nested lists of exactly low.shape, each item within its bounds."""
    import numpy as np

    if low.ndim == 0:
        return _scalar(kind, low, high)
    uniform = (
        bool(np.all(low == low.flat[0]) and np.all(high == high.flat[0])) if low.size else True
    )
    if uniform or low.size > MAX_ITEMWISE:
        item = _scalar(kind, low.min(), high.max()) if low.size else _scalar(kind, 0, 0)
        for n in reversed(low.shape):
            item = Annotated[list[item], msgspec.Meta(min_length=n, max_length=n)]  # type: ignore[valid-type]
        return item

    def build(lo: np.ndarray[Any, Any], hi: np.ndarray[Any, Any]) -> Any:
        if lo.ndim == 0:
            return _scalar(kind, lo, hi)
        return tuple[tuple(build(lo[i], hi[i]) for i in range(lo.shape[0]))]  # type: ignore[misc]

    return build(low, high)


def _charset_pattern(chars: str) -> str:
    """A regex (Python's and ECMA's alike) for strings of `chars` only. It ends in `$(?!\\n)`
    because Python's `$` also matches before a final newline."""
    escaped = "".join("\\" + c if c in "\\]^-[" else c for c in chars)
    return "^[" + escaped + r"]*$(?!\n)"


def _space_type(space: spaces.Space[Any], where: str, names: Iterator[str]) -> Any:
    """The msgspec type of a space's values (constraints included); `where` names the place
    in errors, `names` gives unique names to the Structs of Dict spaces."""
    import numpy as np
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return Annotated[int, msgspec.Meta(ge=start, le=start + int(space.n) - 1)]
    if isinstance(space, spaces.Box):
        assert space.dtype is not None
        kind = space.dtype.kind
        if kind not in "fiub":
            raise GymnasiumBridgeError(f"{where}: Box of dtype {space.dtype} is not supported")
        return _array_type(space.low, space.high, kind)
    if isinstance(space, spaces.MultiDiscrete):
        return _array_type(space.start, space.start + space.nvec - 1, "i")
    if isinstance(space, spaces.MultiBinary):
        zeros = np.zeros(space.shape, dtype=np.int64)
        return _array_type(zeros, zeros + 1, "i")
    if isinstance(space, spaces.Text):
        chars = "".join(sorted(space.character_set))
        return Annotated[
            str,
            msgspec.Meta(
                min_length=int(space.min_length),
                max_length=int(space.max_length),
                pattern=_charset_pattern(chars),
            ),
        ]
    if isinstance(space, spaces.Dict):
        fields: list[tuple[str, Any]] = []
        rename: dict[str, str] = {}
        for i, (key, sub) in enumerate(space.spaces.items()):
            if not isinstance(key, str):
                raise GymnasiumBridgeError(f"{where}: Dict space key {key!r} is not a string")
            attr = f"f{i}"  # any string can be a key: fields get safe names, renamed on the wire
            fields.append((attr, _space_type(sub, f"{where}[{key!r}]", names)))
            rename[attr] = key
        return msgspec.defstruct(
            next(names), fields, kw_only=True, forbid_unknown_fields=True, rename=rename
        )
    if isinstance(space, spaces.Tuple):
        items = tuple(
            _space_type(sub, f"{where}[{i}]", names) for i, sub in enumerate(space.spaces)
        )
        return tuple[items]  # type: ignore[valid-type]
    raise GymnasiumBridgeError(
        f"{where} is a {type(space).__name__} space, which has no ecotone schema (supported: "
        "Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple)"
    )


def _described_type(space: spaces.Space[Any], where: str, stem: str) -> Any:
    """The space's type with its exact description under `x-gym-space` in the schema."""
    from ecotone.gym.spaces import GYM_SPACE_KEY, SpaceError, describe_space

    names = (f"{stem}{i}" for i in itertools.count(1))
    type_ = _space_type(space, where, names)
    try:
        desc = describe_space(space, where)
    except SpaceError as exc:
        raise GymnasiumBridgeError(str(exc)) from exc
    return Annotated[type_, msgspec.Meta(extra_json_schema={GYM_SPACE_KEY: desc})]


# --- the env -------------------------------------------------------------------------------


def _has_structs(space: spaces.Space[Any]) -> bool:
    """Whether the space's actions decode to msgspec Structs or tuples (Dict and Tuple
    spaces), which `from_wire` reads as plain data."""
    from gymnasium import spaces

    return isinstance(space, spaces.Dict | spaces.Tuple)


class GymnasiumEnv(ecotone.Environment[Any, Any, Any]):
    """Base of the env classes the bridge builds: one `gymnasium.make(...)` per session."""

    gym_id: ClassVar[str] = ""
    make_kwargs: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        import gymnasium

        from ecotone.gym.spaces import info_writer, wire_reader, wire_writer

        self._env = gymnasium.make(self.gym_id, **self.make_kwargs)
        self._state: Any = self.state_type()
        self._closed = False
        # The conversions, decided once per session (a step is the hot path).
        action_space = self._env.action_space
        self._env_step = self._env.step
        self._read_action = wire_reader(action_space)
        self._plain_action = not _has_structs(action_space)
        self._write_obs = wire_writer(self._env.observation_space)
        self._write_info = info_writer()

    def _obs(self, obs: Any, reward: float | None, done: bool, truncated: bool, info: Any) -> Any:
        data = self._write_obs(obs)
        self._state.obs = data
        return self.observation_type(
            obs=data, info=self._write_info(info), reward=reward, done=done, truncated=truncated
        )

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> Any:
        obs, info = self._env.reset(seed=seed, options=options or None)
        self._state = self.state_type(episode_id=episode_id or os.urandom(16).hex())
        return self._obs(obs, None, False, False, info)

    def step(self, action: Any) -> Any:
        data = action.action
        value = self._read_action(data if self._plain_action else msgspec.to_builtins(data))
        obs, reward, terminated, truncated, info = self._env_step(value)
        self._state.step_count += 1
        return self._obs(obs, float(reward), bool(terminated), bool(truncated), info)

    def sample_action(self, rng: random.Random) -> Any:
        """A random valid action, drawn from the action space seeded from `rng`."""
        from ecotone.gym.spaces import to_wire

        space = self._env.action_space
        space.seed(rng.getrandbits(32))
        return msgspec.convert({"action": to_wire(space, space.sample())}, self.action_type)

    def state(self) -> Any:
        return self._state

    def snapshot(self) -> bytes:
        """The Gymnasium env as `gymnasium.make` wrapped it (the unwrapped env with its
        `np_random`, and the wrappers' state such as `TimeLimit`'s step count) and the
        episode's State, pickled: the server keeps it, and seals what leaves it."""
        return saved_episode(self._env, self._state)

    def restore(self, data: bytes, *, episode_id: str | None) -> None:
        """Put back a `snapshot()`, as episode `episode_id` (the env it replaces is closed)."""
        env, self._state = loaded_episode(data, self.state_type, episode_id)
        old, self._env = self._env, env
        self._env_step = env.step
        old.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()


def _stem(gym_id: str) -> str:
    parts = re.split(r"[^0-9A-Za-z]+", gym_id.rsplit("/", 1)[-1])
    stem = "".join(p[:1].upper() + p[1:] for p in parts if p)
    return stem if stem[:1].isalpha() else f"Gym{stem}"


def _inline(entry_point: Any, kwargs: dict[str, Any]) -> bool:
    return (
        isinstance(entry_point, str)
        and entry_point.startswith(INLINE_ENTRY_POINTS)
        and kwargs.get("render_mode") is None
    )


def make_probe(name: str, gym_id: str, kwargs: dict[str, Any]) -> Any:
    """One instance of the Gymnasium env `name` serves, to read its spaces and spec (the
    caller closes it); GymnasiumBridgeError when Gymnasium is missing or cannot make it."""
    try:
        import gymnasium
    except ImportError as exc:
        raise GymnasiumBridgeError(
            f"{name!r} needs gymnasium and numpy: install the extra, ecotone[gymnasium] ({exc})"
        ) from exc
    try:
        return gymnasium.make(gym_id, **kwargs)
    except Exception as exc:
        raise GymnasiumBridgeError(
            f"{name!r}: gymnasium.make({gym_id!r}"
            + "".join(f", {k}={v!r}" for k, v in kwargs.items())
            + f") failed: {type(exc).__name__}: {exc}"
        ) from exc


def saved_episode(env: Any, state: Any) -> bytes:
    """A bridged env's `snapshot()`: the Gymnasium object pickled (its State types are made at
    run time and do not pickle: it goes as MessagePack beside it)."""
    return pickle.dumps((env, msgspec.msgpack.encode(state)))


def loaded_episode(data: bytes, state_type: Any, episode_id: str | None) -> tuple[Any, Any]:
    """What `saved_episode` saved: the Gymnasium object, and the State as episode
    `episode_id`. `data` is the server's own, or a blob its seal passed."""
    env, encoded = pickle.loads(data)
    state = msgspec.msgpack.decode(encoded, type=state_type)
    return env, msgspec.structs.replace(state, episode_id=episode_id)


def snapshot_identity(gym_id: str, kwargs: dict[str, Any]) -> dict[str, str]:
    """What a snapshot of a bridged env must match besides its schema: the Gymnasium env id
    with its arguments, and gymnasium's version (its envs' pickled state is its own)."""
    import gymnasium

    made = gym_id + "".join(f",{k}={v!r}" for k, v in sorted(kwargs.items()))
    return {"gymnasium_env": made, "gymnasium": gymnasium.__version__}


def build_env_class(name: str) -> type[GymnasiumEnv]:
    """The ecotone env class serving the Gymnasium env `name` names (uncached)."""
    gym_id, kwargs = parse_name(name)
    probe = make_probe(name, gym_id, kwargs)
    try:
        action_space, obs_space, spec = probe.action_space, probe.observation_space, probe.spec
        readme = inspect.getdoc(type(probe.unwrapped)) or ""
    finally:
        probe.close()
    stem = _stem(gym_id)
    action_t = _described_type(action_space, f"{name}: action space", f"{stem}Action")
    obs_t = _described_type(obs_space, f"{name}: observation space", f"{stem}Obs")
    action_type = msgspec.defstruct(
        f"{stem}Action",
        [("action", action_t)],
        bases=(ecotone.Action,),
        kw_only=True,
        forbid_unknown_fields=True,
    )
    observation_type = msgspec.defstruct(
        f"{stem}Observation",
        [("obs", obs_t), ("info", dict[str, Any], msgspec.field(default_factory=dict))],
        bases=(ecotone.Observation,),
        kw_only=True,
    )
    state_type = msgspec.defstruct(
        f"{stem}State", [("obs", obs_t | None, None)], bases=(ecotone.State,), kw_only=True
    )
    entry_point = spec.entry_point if spec is not None else None
    where = entry_point if isinstance(entry_point, str) else getattr(entry_point, "__name__", "?")
    made = f"gymnasium.make({gym_id!r}" + "".join(f", {k}={v!r}" for k, v in kwargs.items())
    namespace: dict[str, Any] = {
        "__doc__": f"Gymnasium's {gym_id} ({where}), served by ecotone.",
        "__module__": __name__,
        "gym_id": gym_id,
        "make_kwargs": kwargs,
        "name": name,
        "description": f"Gymnasium's {gym_id} ({where}) as {made}), served by ecotone",
        "version": str(spec.version) if spec is not None and spec.version is not None else "0",
        "readme": readme,
        "inline": _inline(entry_point, kwargs),
        "snapshot_identity": snapshot_identity(gym_id, kwargs),
        "action_type": action_type,
        "observation_type": observation_type,
        "state_type": state_type,
    }
    return type(f"{stem}Env", (GymnasiumEnv,), namespace)


_classes: dict[str, type[GymnasiumEnv]] = {}
_lock = threading.Lock()


def env_class(name: str) -> type[GymnasiumEnv]:
    """The env class for `gymnasium:ID[?kwargs]`, built once per name."""
    with _lock:
        cls = _classes.get(name)
        if cls is None:
            cls = _classes[name] = build_env_class(name)
        return cls


@ecotone.hookimpl
def ecotone_environment_patterns() -> dict[str, str]:
    return {
        f"{PREFIX}ID[?kw=...]": "any registered Gymnasium env, e.g. gymnasium:CartPole-v1 "
        "(needs gymnasium)",
    }


@ecotone.hookimpl
def ecotone_resolve_environment(name: str) -> type | None:
    if name.startswith(PREFIX):
        return env_class(name)
    return None


__all__: list[str] = [
    "GymnasiumBridgeError",
    "GymnasiumEnv",
    "build_env_class",
    "env_class",
    "parse_name",
]
