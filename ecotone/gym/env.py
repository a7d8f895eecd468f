"""Any ecotone env as a `gymnasium.Env`: `make(url, **connect_kwargs)`.

`make` opens a session (blocking client, any URL: `ws://`, `tcp://`, `http://`,
`inproc://ENV`...) and returns a `RemoteEnv` whose spaces are rebuilt from the env's schemas
(`describe`) by `ecotone.gym.spaces`.

An action of the action space that the env rejects (`invalid_action`: a word not in the
list, an illegal move, which a space sampled at random gives often) is, by default, a step
that changes nothing: the last observation again, reward `invalid_action_reward` (0.0),
neither terminated nor truncated, and `info["invalid_action"]` = {"reason", "field",
"details"}; the server does not count it. `make(url, invalid_action="raise")` raises
`ecotone.InvalidActionError` instead; an action outside the space always raises it. Since a
refused step does not count, a random policy on a word game may never end an episode: bound
it with `gymnasium.wrappers.TimeLimit`, which counts every step, refused ones included.

Seeds follow Gymnasium: `reset(seed=s)` seeds the episode, and a later `reset()` without a
seed goes on reproducibly from it (for a native env, the seed it sends is drawn from the
`RemoteEnv`'s own `np_random`; an env served by the Gymnasium bridge continues its own).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any, Literal

import gymnasium
from gymnasium.envs.registration import EnvSpec as GymEnvSpec

from ecotone.client.errors import InvalidActionError
from ecotone.client.sync import EnvClient, connect
from ecotone.gym.spaces import RESERVED_RESET_OPTIONS, _nodes
from ecotone.specs import EnvInfo

# --- the gymnasium.Env -------------------------------------------------------------------------


def _spec_id(name: str) -> str:
    return "ecotone/" + (re.sub(r"[^\w:.-]", "_", name) or "env")


@dataclasses.dataclass(frozen=True)
class RemoteEnvState:
    """What `RemoteEnv.get_state` returns: the server's sealed snapshot of the episode
    (`blob`, opaque) and the wrapper's random generator's state."""

    blob: bytes
    np_random: dict[str, Any]


class RemoteEnv(gymnasium.Env[Any, Any]):
    """A `gymnasium.Env` backed by one ecotone session. Build it with `make(url)`."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        client: EnvClient[Any, Any],
        info: EnvInfo,
        *,
        invalid_action: Literal["observation", "raise"] = "observation",
        invalid_action_reward: float = 0.0,
    ) -> None:
        if invalid_action not in ("observation", "raise"):
            raise ValueError(
                f"invalid_action must be 'observation' or 'raise', not {invalid_action!r}"
            )
        self.client = client
        self.env_info = info
        self.invalid_action = invalid_action
        self.invalid_action_reward = float(invalid_action_reward)
        self._action, self._observation, self._bridged = _nodes(info)
        self.action_space = self._action.space
        self.observation_space = self._observation.space
        self.render_mode = None
        self._last: Mapping[str, Any] | None = None

    def _info(self, data: Mapping[str, Any]) -> dict[str, Any]:
        info = dict(data.get("metadata") or {})
        if self._bridged:
            info.update(data.get("info") or {})
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode on the server; `options` are the env's reset options (for the
        Gymnasium bridge, the `options` dict handed to the served env's reset)."""
        super().reset(seed=seed)
        options = dict(options or {})
        clash = sorted(RESERVED_RESET_OPTIONS & set(options))
        if clash:
            raise ValueError(f"reset options may not be named {', '.join(clash)}")
        if seed is None and not self._bridged:
            # Gymnasium's rule: a reset without a seed goes on from the last seeded one. A
            # native env starts afresh from its seed, so draw the next one from our generator.
            seed = int(self.np_random.integers(2**31))
        result = self.client.reset(seed=None if seed is None else int(seed), **options)
        data: Mapping[str, Any] = result.observation
        self._last = data
        return self._observation.from_wire(data), self._info(data)

    def _in_space(self, action: Any) -> bool:
        try:
            return bool(self.action_space.contains(action))
        except Exception:
            return False

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        try:
            result = self.client.step(self._action.to_wire(action))
        except InvalidActionError as exc:
            if self.invalid_action == "raise" or self._last is None or not self._in_space(action):
                raise
            info = self._info(self._last)  # fresh objects: Gymnasium's callers keep them
            info["invalid_action"] = {
                "reason": str(exc.details.get("reason", exc.message)),
                "field": exc.field,
                "details": dict(exc.details),
            }
            return (
                self._observation.from_wire(self._last),
                self.invalid_action_reward,
                False,
                False,
                info,
            )
        data: Mapping[str, Any] = result.observation
        self._last = data
        return (
            self._observation.from_wire(data),
            float(result.reward or 0.0),
            bool(result.done),
            bool(result.truncated),
            self._info(data),
        )

    def get_state(self) -> RemoteEnvState:
        """The episode where it stands, to `set_state` later on this env or another of the
        same env (on a server with the same snapshot key): the server's sealed snapshot, with
        this wrapper's own random generator (which seeds resets without a seed).

        Raises:
            ecotone.ServerError: `unsupported` (the env cannot be saved), `reset_required`.
        """
        taken = self.client.snapshot()
        try:
            blob = self.client.export_snapshot(taken)
        finally:
            self.client.drop_snapshot(taken)
        return RemoteEnvState(blob=blob, np_random=dict(self.np_random.bit_generator.state))

    def set_state(self, state: RemoteEnvState) -> tuple[Any, dict[str, Any]]:
        """Put back what `get_state` returned, abandoning the current episode.

        Returns:
            The observation and info of the episode's last step (or reset), as Gymnasium
            returns them.

        Raises:
            ecotone.ServerError: `snapshot_mismatch` (another env, or a server with another
                snapshot key).
        """
        resumed = self.client.restore(state.blob)
        self.np_random.bit_generator.state = dict(state.np_random)
        data: Mapping[str, Any] = resumed.result.observation
        self._last = data
        return self._observation.from_wire(data), self._info(data)

    def close(self) -> None:
        """Close the session (and its connection). Idempotent."""
        self.client.close()
        super().close()

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.env_info.name} url={self.client.connection.url}>"


def _remake(url: str, make_kwargs: dict[str, Any], **kwargs: Any) -> RemoteEnv:
    if kwargs.get("render_mode") is not None:
        raise ValueError("ecotone's remote envs do not render (render_mode must be None)")
    return make(url, **make_kwargs)


def make(
    url: str,
    *,
    invalid_action: Literal["observation", "raise"] = "observation",
    invalid_action_reward: float = 0.0,
    **connect_kwargs: Any,
) -> RemoteEnv:
    """A `gymnasium.Env` for the env served at `url` (one new session).

    `connect_kwargs` go to `ecotone.connect` (`env=`, `codec=`, `timeout=`,
    `connect_timeout=`). `invalid_action` says what a rejected action is (see the module's
    docstring). Raises SpaceError when a field of the env's action or observation has no
    Gymnasium space. `env.spec.make()` opens another session on the same URL.
    """
    client = connect(url, **connect_kwargs)
    try:
        info = client.describe()
        env = RemoteEnv(
            client,
            info,
            invalid_action=invalid_action,
            invalid_action_reward=invalid_action_reward,
        )
    except BaseException:
        client.close()
        raise
    make_kwargs = dict(
        connect_kwargs,
        invalid_action=invalid_action,
        invalid_action_reward=invalid_action_reward,
    )
    env.spec = GymEnvSpec(
        id=_spec_id(client.env),
        entry_point=functools.partial(_remake, url, make_kwargs),
        nondeterministic=False,  # ecotone's contract: same seed and actions, same episode
        max_episode_steps=None,  # the server ends episodes itself
    )
    return env


__all__ = ["RemoteEnv", "make"]
