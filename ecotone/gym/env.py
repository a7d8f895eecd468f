"""Any ecotone env as a `gymnasium.Env`: `make(url, **connect_kwargs)`.

`make` opens a session (blocking client, any URL: `ws://`, `tcp://`, `http://`,
`inproc://ENV`...) and returns a `RemoteEnv` whose spaces are rebuilt from the env's schemas
(`describe`) by `ecotone.gym.spaces`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec as GymEnvSpec

from ecotone.client.sync import EnvClient, connect
from ecotone.gym.spaces import RESERVED_RESET_OPTIONS, _nodes
from ecotone.wire import EnvInfo

# --- the gymnasium.Env -------------------------------------------------------------------------


def _spec_id(name: str) -> str:
    return "ecotone/" + (re.sub(r"[^\w:.-]", "_", name) or "env")


class RemoteEnv(gymnasium.Env[Any, Any]):
    """A `gymnasium.Env` backed by one ecotone session. Build it with `make(url)`."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, client: EnvClient[Any, Any], info: EnvInfo) -> None:
        self.client = client
        self.env_info = info
        self._action, self._observation, self._bridged = _nodes(info)
        self.action_space = self._action.space
        self.observation_space = self._observation.space
        self.render_mode = None

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
        result = self.client.reset(seed=None if seed is None else int(seed), **options)
        data: Mapping[str, Any] = result.observation
        return self._observation.from_wire(data), self._info(data)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        result = self.client.step(self._action.to_wire(action))
        data: Mapping[str, Any] = result.observation
        return (
            self._observation.from_wire(data),
            float(result.reward or 0.0),
            bool(result.done),
            bool(result.truncated),
            self._info(data),
        )

    def close(self) -> None:
        """Close the session (and its connection). Idempotent."""
        self.client.close()
        super().close()

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.env_info.name} url={self.client.connection.url}>"


def _remake(url: str, connect_kwargs: dict[str, Any], **kwargs: Any) -> RemoteEnv:
    if kwargs.get("render_mode") is not None:
        raise ValueError("ecotone's remote envs do not render (render_mode must be None)")
    return make(url, **connect_kwargs)


def make(url: str, **connect_kwargs: Any) -> RemoteEnv:
    """A `gymnasium.Env` for the env served at `url` (one new session).

    `connect_kwargs` go to `ecotone.connect` (`env=`, `codec=`, `timeout=`,
    `connect_timeout=`). Raises SpaceError when a field of the env's action or observation has
    no Gymnasium space. `env.spec.make()` opens another session on the same URL.
    """
    client = connect(url, **connect_kwargs)
    try:
        info = client.describe()
        env = RemoteEnv(client, info)
    except BaseException:
        client.close()
        raise
    env.spec = GymEnvSpec(
        id=_spec_id(client.env),
        entry_point=functools.partial(_remake, url, dict(connect_kwargs)),
        nondeterministic=False,  # ecotone's contract: same seed and actions, same episode
        max_episode_steps=None,  # the server ends episodes itself
    )
    return env


__all__ = ["RemoteEnv", "make"]
