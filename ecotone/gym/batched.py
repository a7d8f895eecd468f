"""`make_vec` over the vector form (`gymnasium-vector:ID`): one session per server, each a
whole batch of sub-envs stepped by Gymnasium's `SyncVectorEnv` on the server.

Sub-envs 0..N-1 are cut into one contiguous batch per server URL (sizes differing by at most
one). A step sends each server its batch's actions and reads back its observations, rewards
and flags as binary arrays (`ecotone.plugins.gymnasium_vector`), so the client does one
`frombuffer` per array and server, and no work per sub-env. Autoreset is Gymnasium's
NEXT_STEP, done on the servers. `send`/`recv` work a batch at a time: `send` takes whole
batches, `recv` returns whole batches.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ecotone.client.sync import Connection
from ecotone.client.vector import VectorEnv, add_info, seeds_for
from ecotone.gym.spaces import space_from_description
from ecotone.wire import EnvInfo

GYM_VECTOR_KEY = "x-gym-vector"  # ecotone.plugins.gymnasium_vector's (no numpy import here)


def vector_form(info: EnvInfo) -> dict[str, Any] | None:
    """The vector form's description in an env's schemas, or None for another env."""
    obs = info.observation_schema.get("properties", {}).get("obs", {})
    marker = obs.get(GYM_VECTOR_KEY) if isinstance(obs, dict) else None
    return marker if isinstance(marker, dict) else None


def _bytes(data: Any) -> bytes:
    """A binary field as decoded: bytes (MessagePack) or base64 text (JSON)."""
    return base64.b64decode(data) if isinstance(data, str) else bytes(data)


def _unbatch(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A batch's Gymnasium-style infos (`infos[key][i]`, masks `_key`) as one dict per
    sub-env."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if isinstance(value, dict):
            for i, sub in enumerate(_unbatch(value, n)):
                if sub:
                    out[i][key] = sub
            continue
        for i in range(n):
            if mask is None or mask[i]:
                out[i][key] = value[i]
    return out


class BatchedRemoteVectorEnv(gymnasium.vector.VectorEnv[Any, Any, Any]):
    """`num_envs` sub-envs as one batch per server of a `gymnasium-vector:` env."""

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        env: str | None,
        info: EnvInfo,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        **vector_kwargs: Any,
    ) -> None:
        mode = AutoresetMode(autoreset_mode)
        if mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"{info.name} autoresets as Gymnasium's NEXT_STEP on its servers; for "
                f"{mode.value} serve the env one per session (gymnasium:ID)"
            )
        marker = vector_form(info)
        if marker is None:
            raise ValueError(f"env {info.name!r} is not a gymnasium-vector: env")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, not {num_envs}")
        self.env_info = info
        url_list = [urls] if isinstance(urls, str) else list(urls)
        servers = min(len(url_list), num_envs)
        sizes = [num_envs // servers + (s < num_envs % servers) for s in range(servers)]
        starts = np.cumsum([0, *sizes]).tolist()
        self.bounds: list[tuple[int, int]] = list(itertools.pairwise(starts))
        """Sub-envs `[start, stop)` of each server's batch (its session)."""
        self.num_envs = num_envs
        self.single_observation_space = space_from_description(marker["observation_space"])
        self.single_action_space = space_from_description(marker["action_space"])
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": mode}
        self.render_mode = None
        self._dtype = np.dtype(marker["obs_dtype"])
        self._shape = tuple(self.single_observation_space.shape or ())
        self._inflight: set[int] = set()
        self.vector = VectorEnv(url_list[:servers], servers, env, **vector_kwargs)

    # --- results -------------------------------------------------------------------------------

    def _gather(
        self, sessions: Sequence[int], observations: Sequence[Any], infos: dict[str, Any]
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """The batches of `sessions` (their last observations) as one result, in order."""
        obs_parts, rewards, terminated, truncated = [], [], [], []
        per_env: list[dict[str, Any]] = []
        errors = infos.get("_error")
        for j, (s, data) in enumerate(zip(sessions, observations, strict=True)):
            start, stop = self.bounds[s]
            n = stop - start
            obs_parts.append(
                np.frombuffer(_bytes(data["obs"]), self._dtype).reshape(n, *self._shape)
            )
            if errors is not None and errors[j]:  # this server's batch failed: its last obs
                rewards.append(np.zeros(n))
                terminated.append(np.zeros(n, dtype=np.bool_))
                truncated.append(np.full(n, bool(infos["episode_lost"][j])))
                detail = {k: infos[k][j] for k in ("error", "error_code", "episode_lost")}
                per_env.extend(dict(detail) for _ in range(n))
                continue
            rewards.append(np.frombuffer(_bytes(data["rewards"]), np.float64))
            terminated.append(np.frombuffer(_bytes(data["terminations"]), np.bool_))
            truncated.append(np.frombuffer(_bytes(data["truncations"]), np.bool_))
            batch_infos = data.get("infos") or {}
            per_env.extend(_unbatch(batch_infos, n) if batch_infos else [{}] * n)
        total = len(per_env)
        merged: dict[str, Any] = {}
        for i, sub in enumerate(per_env):
            if sub:
                add_info(merged, sub, i, total)
        return (
            np.concatenate(obs_parts),
            np.concatenate(rewards),
            np.concatenate(terminated),
            np.concatenate(truncated),
            merged,
        )

    # --- the gymnasium.vector.VectorEnv API ----------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._inflight:
            raise ValueError("reset with batches in flight: recv() them first")
        seeds = seeds_for(seed, self.num_envs)  # Gymnasium's rule: seed + i
        sessions = list(range(len(self.bounds)))
        observations: list[Any] = []
        merged: dict[str, Any] = {}
        for s, (start, stop) in enumerate(self.bounds):  # each batch its own seeds and size
            mask = np.zeros(len(self.bounds), dtype=np.bool_)
            mask[s] = True
            reset_options: dict[str, Any] = {
                "reset_mask": mask,
                "num_envs": stop - start,
                "seeds": seeds[start:stop],
            }
            if options:
                reset_options["options"] = dict(options)
            obs, infos = self.vector.reset(options=reset_options)
            observations.append(obs[s])
            if infos:
                merged = infos
        obs, _, _, _, infos = self._gather(sessions, observations, merged)
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self._inflight:
            raise ValueError("step with batches in flight: recv() them first")
        batch = np.asarray(actions)
        wire = [{"actions": batch[start:stop].tolist()} for start, stop in self.bounds]
        observations, _, _, _, infos = self.vector.step(wire)
        return self._gather(range(len(self.bounds)), observations, infos)

    # --- EnvPool-style asynchronous stepping ---------------------------------------------------

    def _sessions_of(self, env_ids: Any) -> list[int]:
        ids = np.asarray(env_ids, dtype=np.int64).reshape(-1).tolist()
        starts = {start: s for s, (start, _) in enumerate(self.bounds)}
        sessions: list[int] = []
        at = 0
        while at < len(ids):
            s = starts.get(ids[at])
            start, stop = self.bounds[s] if s is not None else (0, 0)
            if s is None or ids[at : at + stop - start] != list(range(start, stop)):
                spans = ", ".join(f"{a}..{b - 1}" for a, b in self.bounds)
                raise ValueError(
                    f"send takes whole batches, each server's sub-envs in order ({spans})"
                )
            sessions.append(s)
            at += stop - start
        return sessions

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step of whole batches (`env_ids`: their sub-envs, batch after batch; all
        when None) without waiting; `recv` returns them as they answer."""
        sessions = list(range(len(self.bounds))) if env_ids is None else self._sessions_of(env_ids)
        if self._inflight & set(sessions):
            raise ValueError("a batch in `send` has a step in flight: recv() it first")
        batch = np.asarray(actions)
        wire, at = [], 0
        for s in sessions:
            start, stop = self.bounds[s]
            wire.append({"actions": batch[at : at + stop - start].tolist()})
            at += stop - start
        self.vector.send(wire, sessions, batched=True)
        self._inflight.update(sessions)

    def recv(
        self, min_ready: int | None = None, max_ready: int | None = None
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Whole batches as they answer, until at least `min_ready` sub-envs (default: every
        batch in flight), at most `max_ready`; `infos["env_id"]` says which sub-envs."""
        if not self._inflight:
            raise ValueError("recv: no batch has a step in flight (send first)")
        sizes = {s: self.bounds[s][1] - self.bounds[s][0] for s in self._inflight}
        want = sum(sizes.values()) if min_ready is None else min_ready
        if not 1 <= want <= sum(sizes.values()):
            raise ValueError(f"recv(min_ready={want}) but {sum(sizes.values())} can answer")
        if max_ready is not None and max_ready < max(want, max(sizes.values())):
            raise ValueError(
                f"recv(max_ready={max_ready}): batches answer whole, the largest in flight "
                f"has {max(sizes.values())} sub-envs"
            )
        sessions: list[int] = []
        observations: list[Any] = []
        errors: list[dict[str, Any]] = []
        count = 0
        while count < want:
            if max_ready is not None and count + max(sizes[s] for s in self._inflight) > max_ready:
                break  # another batch might not fit
            got = self.vector.recv(min_ready=1, max_ready=1)
            (s,) = got.env_ids.tolist()
            self._inflight.discard(s)
            sessions.append(s)
            observations.append(got.observations[0])
            errors.append({k: v[0] for k, v in got.infos.items()})
            count += sizes[s]
        infos: dict[str, Any] = {}
        for j, info in enumerate(errors):
            if info:
                add_info(
                    infos,
                    {k: v for k, v in info.items() if not k.startswith("_")},
                    j,
                    len(sessions),
                )
        obs, rewards, terminated, truncated, out = self._gather(sessions, observations, infos)
        out["env_id"] = np.concatenate(
            [np.arange(*self.bounds[s], dtype=np.int64) for s in sessions]
        )
        return obs, rewards, terminated, truncated, out

    def close_extras(self, **kwargs: Any) -> None:
        self.vector.close()


def probe(url: str, env: str | None, codec: str) -> EnvInfo:
    """The env's description, from a connection of its own."""
    connection = Connection(url, codec=codec)
    try:
        return connection.describe(env)
    finally:
        connection.close()
