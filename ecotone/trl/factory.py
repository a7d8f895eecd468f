"""`environment_factory`: an ecotone env as TRL's `GRPOTrainer(environment_factory=...)`.

    from trl import GRPOConfig, GRPOTrainer
    import ecotone.trl

    trainer = GRPOTrainer(
        model=model,
        args=GRPOConfig(...),
        train_dataset=dataset,          # rows: {"prompt": [...], "task": "crane", ...}
        environment_factory=ecotone.trl.environment_factory("ws://127.0.0.1:8000"),
    )

The factory is a class TRL instantiates with no arguments and pools ("construct once, reset
often"). Its instances:

* `reset(**row)`: TRL passes the dataset row; the row's `seed`, `task`, `split`, `index` and
  `episode_id` (and any names in `reset_keys`) start the episode, the rest (`prompt`...) is
  left out. A row with a `snapshot` (an exported one, `env.export_snapshot(...)`: bytes or
  their base64) starts from that state instead: a GRPO group whose rows share one snapshot
  plays its rollouts from one prefix (docs/snapshots.md). It returns the first observation as
  text, which TRL appends to the prompt.
* one public method for the action and one per env tool, named and typed from the env's
  schemas with Google-style docstrings (TRL exposes every public method to the model and
  builds the tool schemas from them; nothing else is public). The action's method is named
  after its only field (`guess`, `move`, `code`) or else `step` (`action_tool=` overrides);
  it steps the env and returns the observation as text. An action the env rejects raises
  with the env's reason, which TRL hands back to the model (`{"error": ...}`) while the
  episode goes on.
* `get_reward()`: the episode's reward, the sum of its step rewards (`reward="last"`: the last
  one's), which is what rubrics' trajectory scores land in.

All instances of one factory share one connection (opened on first use); each holds one
session, reset for every rollout. TRL never calls `close`: a session is closed when its
instance is garbage-collected (at the next reset of any instance on the connection) and the
server's idle timeout covers the rest. Text: an observation's `text` field if it has one,
else its `prompt` (after reset), else its fields as JSON; `text=` takes a function of the
observation (a dict) instead.

The class pickles (TRL's AsyncGRPO hands it to a spawned rollout process): it is pickled as
the call that built it, `environment_factory(target, **options)`, and rebuilt from that where
it is unpickled (one class per set of arguments in a process; in the process that built it,
the class itself). An instance pickles as a new instance of that class: its session stays
where it was, so the episode in hand does not travel. A `text=` function must be picklable
itself (a module-level function, not a lambda) for its factory to be.
"""

from __future__ import annotations

import base64
import copyreg
import json
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypedDict, Unpack

import attrs

from ecotone.client.errors import ConnectionLost, InvalidActionError, ServerError
from ecotone.client.llm import (
    action_description,
    action_tool_name,
    identifier,
    observation_text,
    tool_name,
)
from ecotone.client.sync import DEFAULT_TIMEOUT, Connection, EnvClient
from ecotone.specs import EnvInfo, ToolInfo
from ecotone.specs.keywords import from_keywords
from ecotone.trl.signature import make_method

RESET_KEYS = frozenset({"seed", "task", "split", "index", "episode_id"})
"""The dataset columns `reset(**row)` hands to the env's reset by default."""
_RESERVED = frozenset({"reset", "get_reward"})


class FactoryOptions(TypedDict, total=False):
    """`environment_factory`'s keyword options, as its callers pass them (see there)."""

    env: str | None
    reward: Literal["sum", "last"]
    text: Callable[[Mapping[str, Any]], str] | None
    reset_keys: Iterable[str]
    action_tool: str | None
    action: bool
    token: str | None
    codec: str
    timeout: float | None
    connect_timeout: float


@attrs.frozen(kw_only=True, slots=True)
class FactorySettings:
    """A factory's settings: `environment_factory`'s options once checked, with their
    defaults (the last four are `ecotone.Connection`'s, and its defaults)."""

    env: str | None = None
    reward: Literal["sum", "last"] = "sum"
    text: Callable[[Mapping[str, Any]], str] | None = None
    reset_keys: Iterable[str] = ()
    action_tool: str | None = None
    action: bool = True
    token: str | None = None
    codec: str = "json"
    timeout: float | None = DEFAULT_TIMEOUT
    connect_timeout: float = 10.0


class FactoryClass(type):
    """The type of `environment_factory`'s classes: pickled as the call that built them
    (`copyreg` registers `_reduce_class` for it; pickle ignores a metaclass's `__reduce__`)."""

    _ecotone_recipe: tuple[str, dict[str, Any]]


_BUILT: weakref.WeakValueDictionary[Any, FactoryClass] = weakref.WeakValueDictionary()
"""The classes built in this process, by their arguments (`_recipe_key`)."""


def _recipe_key(target: str, options: Mapping[str, Any]) -> Any:
    """A hashable key for a factory's arguments (None: an option's value is not hashable)."""
    try:
        key = (target, tuple(sorted(options.items())))
        hash(key)
    except TypeError:
        return None
    return key


def _reduce_class(cls: FactoryClass) -> tuple[Callable[..., FactoryClass], tuple[Any, ...]]:
    target, options = cls._ecotone_recipe
    return _rebuild, (target, options)


def _rebuild(target: str, options: dict[str, Any]) -> FactoryClass:
    """An unpickled factory class: the one built here with these arguments, else a new one."""
    key = _recipe_key(target, options)
    if key is not None and (built := _BUILT.get(key)) is not None:
        return built
    return environment_factory(target, **options)


def _instance_of(cls: type) -> Any:
    """An unpickled instance: a new one of its (unpickled) class."""
    return cls()


def _reduce_instance(self: Any) -> tuple[Callable[[type], Any], tuple[type]]:
    return _instance_of, (type(self),)


copyreg.pickle(FactoryClass, _reduce_class)


class _Shared:
    """The connection a factory's instances share, and the sessions dropped instances left."""

    def __init__(self, url: str, settings: FactorySettings) -> None:
        self.url = url
        self.env = settings.env
        self.settings = settings
        self.lock = threading.RLock()
        self.connection: Connection | None = None
        self.orphans: list[EnvClient[Any, Any]] = []

    def connect(self) -> Connection:
        """A new connection to the factory's server, as the settings say."""
        settings = self.settings
        return Connection(
            self.url,
            codec=settings.codec,
            timeout=settings.timeout,
            connect_timeout=settings.connect_timeout,
            token=settings.token,
        )

    def open(self) -> EnvClient[Any, Any]:
        with self.lock:
            if self.connection is None:
                self.connection = self.connect()
            self.reap()
            return self.connection.open(self.env)

    def lost(self, connection: Any) -> None:
        """`connection` broke (the server restarted, the network blinked): the next `open`
        makes a new one; the sessions of the old are gone with it."""
        with self.lock:
            if self.connection is connection and connection is not None:
                try:
                    self.connection.close()
                except Exception:
                    pass
            self.connection = None
            self.orphans.clear()

    def describe(self) -> tuple[EnvInfo, list[ToolInfo]]:
        """The env's description and its tools (asked of a session of a probe connection)."""
        probe = self.connect()
        try:
            info = probe.describe(self.env)
            client = probe.open(self.env)
            try:
                tools = client.list_tools()
            except ServerError as exc:
                if exc.code != "unsupported":
                    raise
                tools = []
        finally:
            probe.close()
        return info, tools

    def drop(self, client: EnvClient[Any, Any]) -> None:
        """An instance went away: close its session at the next chance (a finalizer must not
        talk on a connection another thread may be reading)."""
        self.orphans.append(client)

    def reap(self) -> None:
        while self.orphans:
            client = self.orphans.pop()
            try:
                client.close()
            except Exception:  # the connection's end closes it anyway
                pass


def environment_factory(target: str, **options: Unpack[FactoryOptions]) -> FactoryClass:
    """A class for `GRPOTrainer(environment_factory=...)` playing the env at `target`: a URL
    (`ws://`, `http://`, `tcp://`...), or an env name, served in this process (`inproc://`).

    Keyword options (`FactoryOptions`; any other keyword is a TypeError that names it):

    - `env` (None: the server's default): which of the server's envs;
    - `reward` ("sum"): what `get_reward()` returns, the episode's sum of rewards, or
      "last", its last reward;
    - `text` (None: `observation_text`): `text(observation)` is the text the model is shown;
    - `reset_keys` (()): more dataset columns to pass to the env's reset;
    - `action_tool` (None: the action's only field, else `step`): the action's method name;
    - `action` (True): False leaves the action's method out (an env played through its
      tools alone, such as an MCP server's);
    - `token` (None), `codec` ("json"), `timeout` (60.0), `connect_timeout` (10.0): as
      `ecotone.Connection` takes them, for the factory's connections."""
    recipe: dict[str, Any] = dict(options)
    if "reset_keys" in recipe:  # a list would make the recipe unhashable
        recipe["reset_keys"] = tuple(recipe["reset_keys"])
    settings = from_keywords(FactorySettings, options, "environment_factory")
    reward = settings.reward
    if reward not in ("sum", "last"):
        raise ValueError(f"reward must be 'sum' or 'last', not {reward!r}")
    url = target if "://" in target or target.startswith("stdio:") else f"inproc://{target}"
    shared = _Shared(url, settings)
    info, tools = shared.describe()
    keys = RESET_KEYS | frozenset(settings.reset_keys)
    show = settings.text or observation_text

    schema = info.action_schema
    name = action_tool_name(info, settings.action_tool)
    if name in _RESERVED or name.startswith("_"):
        raise ValueError(f"the action's tool cannot be named {name!r}")

    def act(self: Any, arguments: dict[str, Any]) -> str:
        return str(self._step(arguments))

    description = action_description(info)
    namespace: dict[str, Any] = {
        "__doc__": f"The ecotone env {info.name!r} at {url}, for TRL's GRPOTrainer.",
        "__module__": __name__,
        "_shared": shared,
        "_show": staticmethod(show),
        "_keys": keys,
        "_reward_mode": reward,
        "env_info": info,
        "__init__": _init,
        "__reduce__": _reduce_instance,
        "_ecotone_recipe": (target, recipe),
        "reset": _reset,
        "get_reward": _get_reward,
        "_step": _step,
        "_tool": _tool,
        "_client": _client,
    }
    if settings.action:
        namespace[name] = make_method(name, description, schema, act, skip=frozenset({"metadata"}))
    taken = {name}
    for tool in tools:
        method_name = tool_name(tool.name, taken)
        taken.add(method_name)
        namespace[method_name] = make_method(
            method_name,
            tool.description or f"The env's tool {tool.name!r}.",
            tool.input_schema,
            _tool_body(tool.name),
        )
    class_name = "Ecotone_" + identifier(info.name)
    cls = FactoryClass(class_name, (), namespace)
    key = _recipe_key(target, recipe)
    if key is not None:
        _BUILT[key] = cls
    return cls


def _init(self: Any) -> None:
    self._session = None
    self._rewards = []
    self._over = False


def _client(self: Any) -> Any:
    if self._session is not None and self._session.connection is not self._shared.connection:
        self._session = None  # of a connection that broke and was replaced
    if self._session is None:
        self._session = self._shared.open()
        weakref.finalize(self, self._shared.drop, self._session)
    return self._session


def _reset(self: Any, **row: Any) -> str:
    """Start an episode for one rollout: the row's seed/task/split/index go to the env; a
    row with a `snapshot` (an exported one: bytes, or their base64) starts from it instead."""
    saved = _snapshot_of(row.get("snapshot"))
    options = {k: v for k, v in row.items() if k in self._keys and v is not None}
    seed = options.pop("seed", None)
    episode_id = options.pop("episode_id", None)
    with self._shared.lock:
        for attempt in (1, 2):  # a broken connection is replaced once, then the reset again
            broken = self._shared.connection
            try:
                client = self._client()
                self._shared.reap()
                if saved is not None:
                    result = client.restore(saved).result
                else:
                    result = client.reset(seed=seed, episode_id=episode_id, **options)
                break
            except ConnectionLost:
                if attempt == 2:
                    raise
                self._shared.lost(broken)
                self._session = None
    self._rewards = []
    self._over = result.finished
    if self._show is observation_text:
        return observation_text(result.observation, first=True)
    return str(self._show(result.observation))


def _snapshot_of(value: Any) -> bytes | None:
    """A row's `snapshot` as bytes (None: the row has none)."""
    if value is None or isinstance(value, bytes | bytearray):
        return None if value is None else bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise ValueError("a row's `snapshot` must be bytes or their base64") from None
    raise ValueError(f"a row's `snapshot` must be bytes or their base64, not {type(value)}")


def _step(self: Any, action: dict[str, Any]) -> str:
    if self._session is None:
        raise RuntimeError("the episode has not started (reset first)")
    if self._over:
        raise RuntimeError("the episode is over: stop calling tools")
    try:
        with self._shared.lock:
            result = self._session.step(action)
    except InvalidActionError as exc:
        raise ValueError(str(exc.details.get("reason") or exc.message)) from None
    except ServerError as exc:
        raise RuntimeError(exc.message) from None
    self._rewards.append(float(result.reward or 0.0))
    self._over = result.finished
    shown = str(self._show(result.observation))
    return shown + ("\n(the episode is over)" if self._over else "")


def _tool_body(name: str) -> Callable[[Any, dict[str, Any]], str]:
    def body(self: Any, arguments: dict[str, Any]) -> str:
        return str(self._tool(name, arguments))

    return body


def _tool(self: Any, name: str, arguments: dict[str, Any]) -> str:
    if self._session is None:
        raise RuntimeError("the episode has not started (reset first)")
    try:
        with self._shared.lock:
            result = self._session.call_tool(name, arguments)
    except ServerError as exc:
        raise RuntimeError(exc.message) from None
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _get_reward(self: Any) -> float:
    """The episode's reward (TRL calls this once per rollout)."""
    if not self._rewards:
        return 0.0
    if self._reward_mode == "last":
        return self._rewards[-1]
    return float(sum(self._rewards))


__all__ = [
    "RESET_KEYS",
    "FactoryClass",
    "FactoryOptions",
    "FactorySettings",
    "environment_factory",
    "observation_text",
]
