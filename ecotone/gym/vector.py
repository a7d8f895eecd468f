"""`ecotone.gym.make_vec`: a `gymnasium.vector.VectorEnv` over remote sub-envs.

The Gymnasium face of `ecotone.VectorEnv`: batched spaces (`single_observation_space`,
`observation_space`, ...) rebuilt from the env's schemas as `ecotone.gym.make` does, batched
numpy observations, Gymnasium's autoreset modes (`metadata["autoreset_mode"]`), and one
`step_many` round trip per server underneath. Existing Gymnasium vector training code runs
against remote envs unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import gymnasium
import msgspec
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ecotone.client.vector import VectorEnv
from ecotone.gym import batch
from ecotone.gym.batched import BatchedRemoteVectorEnv, probe, vector_form
from ecotone.gym.spaces import _FieldNode, _nodes
from ecotone.specs import EnvInfo


class BridgedObservation(msgspec.Struct, kw_only=True, gc=False):
    """An observation of the Gymnasium bridge (`gymnasium:ID`) as `make_vec` decodes it: a
    struct rather than a dict per sub-env (half the decoding), its flags read as attributes.
    Fields it does not name are skipped."""

    obs: Any = None
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = {}


def _dict_of(observation: Any) -> Any:
    return observation


def _bridged_dict(observation: BridgedObservation) -> dict[str, Any]:
    """A bridged observation as the wire dict the space nodes read."""
    return {"obs": observation.obs}


def _by_obs(read: batch.Reader) -> batch.Reader:
    """A batch reader of bridged observations: `read` over their `obs` fields."""
    return lambda observations: read([o.obs for o in observations])


class RemoteVectorEnv(gymnasium.vector.VectorEnv[Any, Any, Any]):
    """`num_envs` remote sub-envs as one `gymnasium.vector.VectorEnv`. Build with `make_vec`."""

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        env: str | None = None,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        info: EnvInfo | None = None,
        **vector_kwargs: Any,
    ) -> None:
        if info is None:
            first = urls if isinstance(urls, str) else urls[0]
            info = probe(first, env, vector_kwargs.get("codec", "json"))
        self.env_info = info
        self._action, self._observation, self._bridged = _nodes(self.env_info)
        mode = AutoresetMode(autoreset_mode)
        self.num_envs = num_envs
        self.single_action_space = self._action.space
        self.single_observation_space = self._observation.space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.metadata = {"autoreset_mode": mode}
        self.render_mode = None
        self._buffer: Any = create_empty_array(self.single_observation_space, n=num_envs)
        self._read_batch = batch.reader(self._observation)
        self._write_batch = batch.writer(self._action)
        self._wire = _dict_of
        node = self._observation
        if self._bridged and isinstance(node, _FieldNode) and node.name == "obs":
            # The bridge's observations decode into a struct (no dict per sub-env, flags read
            # as attributes); the batch is read from their `obs` fields.
            vector_kwargs.setdefault("observation_type", BridgedObservation)
            if vector_kwargs["observation_type"] is BridgedObservation:
                child = batch.reader(node.child)
                self._read_batch = None if child is None else _by_obs(child)
                self._wire = _bridged_dict
        self.vector = VectorEnv(urls, num_envs, env, autoreset_mode=mode.value, **vector_kwargs)

    def _batch(self, observations: list[Any]) -> Any:
        if self._read_batch is not None:
            try:
                return self._read_batch(observations)  # new arrays: nothing to copy
            except batch.Unbatchable:
                pass  # the per-item path says what is wrong, or copes
        items = [self._observation.from_wire(self._wire(o)) for o in observations]
        space = self.single_observation_space
        n = len(items)
        out: Any = self._buffer if n == self.num_envs else create_empty_array(space, n=n)
        return copy.deepcopy(concatenate(space, items, out))

    def _wire_actions(self, actions: Any, n: int) -> list[Any]:
        if self._write_batch is not None:
            try:
                return self._write_batch(actions, n)
            except batch.Unbatchable:
                pass
        space = self.action_space
        if n != self.num_envs:
            space = batch_space(self.single_action_space, n)
        return [self._action.to_wire(a) for a in iterate(space, actions)]

    def _infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        final = infos.get("final_obs")
        if final is not None:  # wire observations: give them back as space values
            converted = np.empty(len(final), dtype=object)
            for i, obs in enumerate(final):
                converted[i] = None if obs is None else self._observation.from_wire(self._wire(obs))
            infos = {**infos, "final_obs": converted}
        return infos

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        observations, infos = self.vector.reset(seed=seed, options=options)
        return self._batch(observations), self._infos(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        wire = self._wire_actions(actions, self.num_envs)
        observations, rewards, terminated, truncated, infos = self.vector.step(wire)
        return self._batch(observations), rewards, terminated, truncated, self._infos(infos)

    # --- EnvPool-style asynchronous stepping ---------------------------------------------------

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step of the sub-envs `env_ids` (all when None; `actions` is their batch of
        actions, in that order) without waiting for it; `recv` returns the results. The
        sub-envs of one server go in one request and answer together, so while one server
        steps its batch the caller can work on another's (EnvPool's `send`)."""
        n = self.num_envs if env_ids is None else len(np.asarray(env_ids).reshape(-1))
        self.vector.send(self._wire_actions(actions, n), env_ids, batched=True)

    def recv(
        self, min_ready: int | None = None, max_ready: int | None = None
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Wait until at least `min_ready` sent sub-envs have answered (default: all of those
        in flight), and return at most `max_ready` of them, in the order they answered, as
        `step` does for all: (observations, rewards, terminated, truncated, infos), with
        `infos["env_id"]` the sub-envs' indices (EnvPool's `recv`). Autoreset applies to
        each sub-env as in `step`."""
        got = self.vector.recv(min_ready, max_ready)
        infos = self._infos(got.infos)
        infos["env_id"] = got.env_ids
        return self._batch(got.observations), got.rewards, got.terminated, got.truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.vector.close()


def make_vec(
    urls: str | Sequence[str],
    num_envs: int,
    env: str | None = None,
    *,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    **vector_kwargs: Any,
) -> RemoteVectorEnv | BatchedRemoteVectorEnv:
    """A `gymnasium.vector.VectorEnv` of `num_envs` sub-envs spread over `urls`: a session
    each, or, for an env served as batches (`gymnasium-vector:ID`), one batch per server
    (`BatchedRemoteVectorEnv`).

    `vector_kwargs` go to `ecotone.VectorEnv` (`errors=`, `step_timeout=`, `codec=`, ...).
    Frames travel as MessagePack unless `codec=` says otherwise: the vector form's arrays as
    bins (JSON carries them as base64 text), the sub-envs' observations as binary numbers
    (JSON text costs the client 10% of a CartPole step over two servers).
    """
    first = urls if isinstance(urls, str) else urls[0]
    info = probe(first, env, vector_kwargs.get("codec", "json"))
    vector_kwargs.setdefault("codec", "msgpack")
    if vector_form(info) is not None:
        return BatchedRemoteVectorEnv(
            urls, num_envs, env, info, autoreset_mode=autoreset_mode, **vector_kwargs
        )
    return RemoteVectorEnv(
        urls, num_envs, env, autoreset_mode=autoreset_mode, info=info, **vector_kwargs
    )
