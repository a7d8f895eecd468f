"""`pettingzoo:MODULE`: any PettingZoo env, AEC or parallel, served by ecotone with a seat per
agent.

    ecotone serve pettingzoo:classic/connect_four_v3
    ecotone serve 'pettingzoo:classic/tictactoe_v3?screen_height=400'
    ecotone serve pettingzoo:classic/rps_v2:parallel_env
    ecotone serve pettingzoo:mypackage.envs.tag_v1

MODULE is a module under `pettingzoo` (`classic/connect_four_v3`, slashes or dots), or any
importable module's dotted path. An optional `:NAME` picks its constructor (`env` by default,
else `parallel_env`); the part after `?` holds its keyword arguments, read as `gymnasium:`
reads them (a value is JSON where it parses). The env's class is built (and cached) by the
`ecotone_resolve_environment` hook from one probe instance.

* **An AEC env** (what `env()` gives) is a turn-based `ecotone.MultiAgentEnvironment`: its
  seats are the env's `possible_agents`, whose turn it is its `agent_selection`. A seat's view
  is `{"obs": O, "info": {...}, "reward", "done", "truncated"}`: `obs` what `observe(agent)`
  gives (a classic env's action mask included, in `obs["action_mask"]`), `reward` the
  agent's reward since its last move (PettingZoo's cumulative reward, what `last()` says),
  `done` and `truncated` its termination and truncation. A move out of its action mask is
  refused (`invalid_action`, the legal actions in the details) without reaching the env.
  Agents that are done are stepped out of the game (PettingZoo's dead steps) by the server
  once their last view is kept: a seat's view stays the one it ended with.
* **A parallel env** (what `parallel_env()` gives) is an `ecotone.SimultaneousEnvironment`:
  each round waits for every live agent's move (no deadline), then `step(actions)`; each
  seat's view holds its observation, reward, termination, truncation and info of that round.
* Spaces become types as in the Gymnasium bridge (`ecotone.plugins.gymnasium`), the exact
  space under `x-gym-space`: `ecotone.pettingzoo.env(url)` rebuilds them. The public view
  (spectators) is the agents still in the game and the last step's rewards.

Reset options are PettingZoo's `options`. Rendering is not served. PettingZoo is optional
(`ecotone[pettingzoo]`); its classic board games need `pygame-ce` too, which that extra
installs. This module imports them only when a `pettingzoo:` name is resolved.
"""

from __future__ import annotations

import importlib
import itertools
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import msgspec

import ecotone
from ecotone.plugins.gymnasium import (
    GymnasiumBridgeError,
    _described_type,
    _has_structs,
    _stem,
    parse_name,
)

PREFIX = "pettingzoo:"
INLINE_MODULES = ("pettingzoo.classic.",)
"""Modules whose envs run inline (on the event loop): small board games."""
MAX_DEAD_STEPS = 1024
"""Dead steps the server makes after one move at most (a guard against an env that never
lets its done agents go)."""


class PettingZooBridgeError(GymnasiumBridgeError):
    """A `pettingzoo:` name that cannot be served: a bad name, a module that does not import,
    a constructor that fails or gives no PettingZoo env, or a space with no schema."""


class PettingZooView(ecotone.Observation, kw_only=True):
    """The public view of a PettingZoo env: who is still in the game, and the last step's
    rewards (PettingZoo's `rewards`, public to every agent)."""

    agents: list[str] = []
    rewards: dict[str, float] = {}


# --- names, modules, constructors ---------------------------------------------------------


def parse(name: str) -> tuple[str, str | None, dict[str, Any]]:
    """`pettingzoo:PATH[:NAME][?k=v&...]` -> (dotted module path, constructor name or None,
    keyword arguments)."""
    try:
        path, kwargs = parse_name(name, PREFIX)
    except GymnasiumBridgeError as exc:
        raise PettingZooBridgeError(str(exc)) from None
    path, _, ctor = path.partition(":")
    dotted = path.strip("/").replace("/", ".")
    if not dotted or any(not part.isidentifier() for part in dotted.split(".")):
        raise PettingZooBridgeError(
            f"{name!r}: {path!r} is not a module path (try pettingzoo:classic/connect_four_v3)"
        )
    if ctor and not ctor.isidentifier():
        raise PettingZooBridgeError(f"{name!r}: {ctor!r} is not a constructor's name")
    return dotted, ctor or None, kwargs


def _module(name: str, dotted: str) -> Any:
    """The module `dotted` names: under `pettingzoo` first, else as it is."""
    for candidate in (f"pettingzoo.{dotted}", dotted):
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if candidate == missing or candidate.startswith(missing + "."):
                continue  # this module (or its package) is not there: try the next
            raise PettingZooBridgeError(
                f"{name!r}: importing {candidate} needs {missing!r}, which is not installed "
                "(PettingZoo's classic games need `pip install 'ecotone[pettingzoo]'`)"
            ) from exc
        except Exception as exc:
            raise PettingZooBridgeError(
                f"{name!r}: importing {candidate} failed: {type(exc).__name__}: {exc}"
            ) from exc
    raise PettingZooBridgeError(
        f"{name!r}: no module pettingzoo.{dotted} nor {dotted} (is pettingzoo installed?)"
    )


def constructor(name: str) -> tuple[Callable[..., Any], dict[str, Any], str]:
    """The constructor `name` names, its keyword arguments, and its module's name."""
    dotted, ctor, kwargs = parse(name)
    try:
        import pettingzoo  # noqa: F401
    except ImportError as exc:
        raise PettingZooBridgeError(
            f"{name!r} needs pettingzoo: install the extra, ecotone[pettingzoo] ({exc})"
        ) from exc
    module = _module(name, dotted)
    if ctor is None:
        ctor = "env" if callable(getattr(module, "env", None)) else "parallel_env"
    make = getattr(module, ctor, None)
    if not callable(make):
        raise PettingZooBridgeError(f"{name!r}: module {module.__name__} has no {ctor}()")
    return make, kwargs, module.__name__


def _made(name: str, make: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """One env from the constructor; PettingZooBridgeError when it fails or is not one."""
    from pettingzoo import AECEnv, ParallelEnv

    try:
        env = make(**kwargs)
    except Exception as exc:
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise PettingZooBridgeError(
            f"{name!r}: {getattr(make, '__name__', 'the constructor')}({args}) failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(env, AECEnv | ParallelEnv):
        raise PettingZooBridgeError(
            f"{name!r}: the constructor gave a {type(env).__name__}, not a PettingZoo AECEnv "
            "or ParallelEnv"
        )
    return env


# --- what each session holds --------------------------------------------------------------


def _mask(obs: Any, info: Any) -> Any:
    """An agent's action mask, from its observation or its info (None: it has none)."""
    if isinstance(obs, Mapping) and "action_mask" in obs:
        return obs["action_mask"]
    if isinstance(info, Mapping) and "action_mask" in info:
        return info["action_mask"]
    return None


class _Bridge:
    """What both kinds of bridged env share: the env, each seat's conversions."""

    make: ClassVar[Callable[..., Any]]
    make_kwargs: ClassVar[dict[str, Any]] = {}
    seats: ClassVar[tuple[str, ...]]
    seat_action_types: ClassVar[dict[str, type[Any]]]
    seat_observation_types: ClassVar[dict[str, type[Any]]]

    def _open(self) -> None:
        from ecotone.gym.spaces import info_writer, wire_reader, wire_writer

        env = self.make(**self.make_kwargs)
        self._env = env
        self._raw = getattr(env, "unwrapped", env)
        """The env inside PettingZoo's wrappers: its dicts are read there (a wrapper forwards
        each attribute through a `__getattr__` per layer, the most of a move's time)."""
        self._read = {s: wire_reader(env.action_space(s)) for s in self.seats}
        self._plain = {s: not _has_structs(env.action_space(s)) for s in self.seats}
        self._write = {s: wire_writer(env.observation_space(s)) for s in self.seats}
        self._write_info = info_writer()
        self._state = ecotone.State()
        self._views: dict[str, Any] = {}
        """Each seat's view, as of the last reset or move."""
        self._closed = False

    def _start(self, episode_id: str | None) -> None:
        self._state = ecotone.State(episode_id=episode_id or uuid.uuid4().hex)

    def _action(self, seat: str, action: Any, view: Any) -> Any:
        """The move as the env takes it; InvalidAction when its action mask rules it out."""
        data = action.action
        value = self._read[seat](data if self._plain[seat] else msgspec.to_builtins(data))
        mask = None if view is None else _mask(view.obs, view.info)
        if mask is not None and isinstance(data, int) and not 0 <= data < len(mask):
            raise ecotone.InvalidAction(f"action {data} is out of range", field="action")
        if mask is not None and isinstance(data, int) and not mask[data]:
            legal = [i for i, allowed in enumerate(mask) if allowed]
            raise ecotone.InvalidAction(
                f"action {data} is masked out for {seat}", field="action", legal=legal
            )
        return value

    def _view(
        self, seat: str, obs: Any, reward: Any, done: bool, truncated: bool, info: Any
    ) -> Any:
        return self.seat_observation_types[seat](
            obs=self._write[seat](obs),
            info=self._write_info(info),
            reward=None if reward is None else float(reward),
            done=bool(done),
            truncated=bool(truncated),
        )

    def _public(self, agents: list[str], rewards: Mapping[str, Any]) -> PettingZooView:
        return PettingZooView(
            agents=[str(a) for a in agents],
            rewards={str(a): float(r) for a, r in rewards.items()},
            done=not agents,
        )

    def state(self) -> Any:
        return self._state

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()


class PettingZooTurns(_Bridge, ecotone.MultiAgentEnvironment[Any, Any, Any]):
    """Base of the env classes the bridge builds for AEC envs (see the module docstring)."""

    def __init__(self) -> None:
        self._open()
        self._kept: dict[str, Any] = {}
        """The last views of agents stepped out of the game."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> Any:
        self._env.reset(seed=seed, options=options or None)
        self._start(episode_id)
        self._kept = {}
        self._settle()
        return self.observe(None)

    def _live_view(self, seat: str) -> Any:
        raw = self._raw
        return self._view(
            seat,
            self._env.observe(seat),
            raw._cumulative_rewards.get(seat, 0.0),
            raw.terminations.get(seat, False),
            raw.truncations.get(seat, False),
            raw.infos.get(seat, {}),
        )

    def _settle(self) -> None:
        """Step the agents that are done out of the game (PettingZoo's dead steps), each
        once its last view is kept."""
        raw = self._raw
        for _ in range(MAX_DEAD_STEPS):
            seat = raw.agent_selection if raw.agents else None
            if seat is None or not (raw.terminations[seat] or raw.truncations[seat]):
                return
            self._kept[seat] = self._live_view(seat)
            self._env.step(None)
        raise RuntimeError(f"the env still has agents that are done after {MAX_DEAD_STEPS} steps")

    def current_seat(self) -> str | None:
        raw = self._raw
        return str(raw.agent_selection) if raw.agents else None

    def step(self, seat: str, action: Any) -> None:
        self._env.step(self._action(seat, action, self._views.get(seat)))
        self._state.step_count += 1
        self._settle()

    def observe(self, seat: str | None) -> Any:
        env, raw = self._env, self._raw
        if seat is None:
            return self._public(list(raw.agents), raw.rewards)
        if seat in raw.agents:
            view = self._live_view(seat)
        else:
            view = self._kept.get(seat)
            if view is None:  # not in the game yet: a sample of its space stands in
                space = env.observation_space(seat)
                space.seed(0)
                view = self._view(seat, space.sample(), None, False, False, {})
        self._views[seat] = view
        return view


class PettingZooRounds(_Bridge, ecotone.SimultaneousEnvironment[Any, Any, Any]):
    """Base of the env classes the bridge builds for parallel envs (see the module
    docstring)."""

    def __init__(self) -> None:
        self._open()
        self._rewards: dict[str, float] = {}

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> Any:
        observations, infos = self._env.reset(seed=seed, options=options or None)
        self._start(episode_id)
        self._rewards = {}
        self._views = {
            seat: self._view(seat, observations[seat], None, False, False, infos.get(seat, {}))
            for seat in self.seats
            if seat in observations
        }
        return self.observe(None)

    def live_seats(self) -> tuple[str, ...]:
        return tuple(str(a) for a in self._env.agents)

    def step(self, actions: dict[str, Any]) -> None:
        moves = {s: self._action(s, a, self._views.get(s)) for s, a in actions.items()}
        observations, rewards, terminations, truncations, infos = self._env.step(moves)
        self._state.step_count += 1
        self._rewards = dict(rewards)
        for seat, obs in observations.items():
            self._views[seat] = self._view(
                seat,
                obs,
                rewards.get(seat, 0.0),
                terminations.get(seat, False),
                truncations.get(seat, False),
                infos.get(seat, {}),
            )

    def observe(self, seat: str | None) -> Any:
        if seat is None:
            return self._public(list(self._env.agents), self._rewards)
        view = self._views.get(seat)
        if view is None:
            space = self._env.observation_space(seat)
            space.seed(0)
            view = self._views[seat] = self._view(seat, space.sample(), None, False, False, {})
        return view


# --- the env class for a name -------------------------------------------------------------


def _seat_types(name: str, probe: Any, stem: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each seat's action and observation types (seats with equal spaces share them)."""
    actions: dict[str, Any] = {}
    observations: dict[str, Any] = {}
    made: list[tuple[Any, Any, Any, Any]] = []
    count = itertools.count(1)
    for seat in probe.possible_agents:
        action_space, obs_space = probe.action_space(seat), probe.observation_space(seat)
        for a_space, o_space, a_type, o_type in made:
            if a_space == action_space and o_space == obs_space:
                actions[seat], observations[seat] = a_type, o_type
                break
        else:
            n = next(count)
            try:
                a_field = _described_type(
                    action_space, f"{name}: {seat}'s action space", f"{stem}Action{n}_"
                )
                o_field = _described_type(
                    obs_space, f"{name}: {seat}'s observation space", f"{stem}Obs{n}_"
                )
            except GymnasiumBridgeError as exc:
                raise PettingZooBridgeError(str(exc)) from None
            a_type = msgspec.defstruct(
                f"{stem}Action{n}",
                [("action", a_field)],
                bases=(ecotone.Action,),
                kw_only=True,
                forbid_unknown_fields=True,
            )
            o_type = msgspec.defstruct(
                f"{stem}Observation{n}",
                [("obs", o_field), ("info", dict[str, Any], msgspec.field(default_factory=dict))],
                bases=(ecotone.Observation,),
                kw_only=True,
            )
            made.append((action_space, obs_space, a_type, o_type))
            actions[seat], observations[seat] = a_type, o_type
    return actions, observations


def build_env_class(name: str) -> type:
    """The ecotone env class serving the PettingZoo env `name` names (uncached)."""
    from pettingzoo import ParallelEnv

    make, kwargs, module = constructor(name)
    probe = _made(name, make, kwargs)
    try:
        seats = tuple(str(a) for a in probe.possible_agents)
        if not seats or len(set(seats)) != len(seats):
            raise PettingZooBridgeError(
                f"{name!r}: possible_agents {seats!r} are not distinct names"
            )
        parallel = isinstance(probe, ParallelEnv)
        stem = _stem(module)
        actions, observations = _seat_types(name, probe, stem)
        metadata = dict(getattr(probe, "metadata", {}) or {})
        doc = (type(probe.unwrapped).__doc__ or "").strip()
    finally:
        probe.close()
    first = seats[0]
    made = f"{module}.{getattr(make, '__name__', 'env')}(" + ", ".join(
        f"{k}={v!r}" for k, v in kwargs.items()
    )
    namespace: dict[str, Any] = {
        "__doc__": f"PettingZoo's {metadata.get('name', module)}, served by ecotone.",
        "__module__": __name__,
        "make": staticmethod(make),
        "make_kwargs": kwargs,
        "name": name,
        "description": f"PettingZoo's {metadata.get('name', module)} as {made}), served by ecotone",
        "readme": doc,
        "inline": module.startswith(INLINE_MODULES),
        "seats": seats,
        "action_type": actions[first],
        "observation_type": PettingZooView,
        "state_type": ecotone.State,
        "seat_action_types": {s: t for s, t in actions.items() if t is not actions[first]},
        "seat_observation_types": observations,
    }
    base = PettingZooRounds if parallel else PettingZooTurns
    return type(f"{stem}Env", (base,), namespace)


_classes: dict[str, type] = {}
_lock = threading.Lock()


def env_class(name: str) -> type:
    """The env class for `pettingzoo:MODULE[:NAME][?kwargs]`, built once per name."""
    with _lock:
        cls = _classes.get(name)
        if cls is None:
            cls = _classes[name] = build_env_class(name)
        return cls


@ecotone.hookimpl
def ecotone_environment_patterns() -> dict[str, str]:
    return {
        f"{PREFIX}MODULE[:NAME][?kw=...]": "any PettingZoo env, a seat per agent, e.g. "
        "pettingzoo:classic/connect_four_v3 (needs pettingzoo)",
    }


@ecotone.hookimpl
def ecotone_resolve_environment(name: str) -> type | None:
    if name.startswith(PREFIX):
        return env_class(name)
    return None


__all__: list[str] = [
    "PettingZooBridgeError",
    "PettingZooRounds",
    "PettingZooTurns",
    "PettingZooView",
    "build_env_class",
    "constructor",
    "env_class",
    "parse",
]
