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
from ecotone.client.vector import SubEnvError, VectorEnv, add_info, seeds_for
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


Failure = dict[str, Any]
"""Why a batch has no fresh result: `error`, `error_code`, `episode_lost` (a vector env's)."""


class BatchedRemoteVectorEnv(gymnasium.vector.VectorEnv[Any, Any, Any]):
    """`num_envs` sub-envs as one batch per server of a `gymnasium-vector:` env.

    A batch whose step failed (its env raised, its server died, its step timed out) lost its
    episodes: with `errors="info"` its sub-envs report it (`truncated`, `infos["error"]`,
    `infos["episode_lost"]`) and the next step resets that batch instead of stepping it (its
    session reopened first if it is gone), as Gymnasium's NEXT_STEP autoreset would; with
    `errors="raise"` the step raises `ecotone.SubEnvError` (its `errors` keyed by batch) and
    the next step does the same reset."""

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
        self._broken: set[int] = set()  # batches whose episodes were lost: reset them next
        self._last: list[Any] = [None] * servers  # each batch's last observation
        self._early: list[tuple[int, Any, Failure | None]] = []  # reset in `send`, for `recv`
        # The batches' sessions never end on their own: the core must not autoreset them (a
        # lost one is reset here, with its size).
        vector_kwargs.pop("reset_options", None)
        self.vector = VectorEnv(
            url_list[:servers], servers, env, autoreset_mode="disabled", **vector_kwargs
        )

    def _size(self, s: int) -> int:
        start, stop = self.bounds[s]
        return stop - start

    # --- results -------------------------------------------------------------------------------

    def _gather(
        self, results: Sequence[tuple[int, Any, Failure | None]]
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """(batch, its observation, why it failed) for each batch, as one result in order."""
        obs_parts, rewards, terminated, truncated = [], [], [], []
        per_env: list[dict[str, Any]] = []
        for s, data, failure in results:
            n = self._size(s)
            if data is None:  # never had an observation (its first reset failed)
                obs_parts.append(np.zeros((n, *self._shape), dtype=self._dtype))
            else:
                obs_parts.append(
                    np.frombuffer(_bytes(data["obs"]), self._dtype).reshape(n, *self._shape)
                )
            if failure is not None:  # the batch's last good observation, its episodes lost
                rewards.append(np.zeros(n))
                terminated.append(np.zeros(n, dtype=np.bool_))
                truncated.append(np.full(n, bool(failure.get("episode_lost", True))))
                per_env.extend(dict(failure) for _ in range(n))
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

    def _failure(self, infos: dict[str, Any], j: int) -> Failure | None:
        mask = infos.get("_error")
        if mask is None or not mask[j]:
            return None
        return {k: infos[k][j] for k in ("error", "error_code", "episode_lost") if k in infos}

    def _took(
        self, sessions: Sequence[int], observations: Sequence[Any], infos: dict[str, Any]
    ) -> list[tuple[int, Any, Failure | None]]:
        """Results the core returned for `sessions` (at positions 0..): failures marked."""
        out: list[tuple[int, Any, Failure | None]] = []
        for j, s in enumerate(sessions):
            failure = self._failure(infos, j)
            if failure is None:
                self._last[s] = observations[j]
            elif failure.get("episode_lost", True):
                self._broken.add(s)  # a refused batch (invalid_action) keeps its episodes
            out.append((s, self._last[s], failure))
        return out

    def _reset_batches(
        self,
        sessions: Sequence[int],
        seeds: list[int | None] | None,
        options: dict[str, Any] | None,
    ) -> list[tuple[int, Any, Failure | None]]:
        """Reset each of `sessions` (a round trip each: each has its size and seeds); a gone
        session is reopened first."""
        out = []
        for s in sessions:
            start, stop = self.bounds[s]
            reset_options: dict[str, Any] = {
                "num_envs": stop - start,
                "seeds": [None] * (stop - start) if seeds is None else seeds[start:stop],
            }
            if options:
                reset_options["options"] = dict(options)
            try:
                if self.vector.lost[s]:
                    observations, infos = self.vector.restart([s], options=reset_options)
                else:
                    mask = np.zeros(len(self.bounds), dtype=np.bool_)
                    mask[s] = True
                    observations, infos = self.vector.reset(
                        options={"reset_mask": mask, **reset_options}
                    )
            except SubEnvError:
                self._broken.add(s)
                raise
            failure = self._failure(infos, s)
            if failure is None:
                self._broken.discard(s)
                self._last[s] = observations[s]
            out.append((s, self._last[s], failure))
        return out

    def _exchange(
        self, sessions: list[int], wire: list[Any]
    ) -> list[tuple[int, Any, Failure | None]]:
        """Step `sessions` with `wire` and wait for all of them."""
        self.vector.send(wire, sessions, batched=True)
        self._inflight.update(sessions)
        return self._receive(len(sessions))

    def _receive(self, count: int) -> list[tuple[int, Any, Failure | None]]:
        """The next `count` batches to answer (each whole), failures marked."""
        try:
            got = self.vector.recv(min_ready=count, max_ready=count)
        except SubEnvError as exc:  # errors="raise": what was received is no longer in flight
            if exc.result is not None:
                self._inflight.difference_update(exc.result.env_ids.tolist())
                self._took(exc.result.env_ids.tolist(), exc.result.observations, exc.result.infos)
            else:
                self._inflight.difference_update(exc.errors)
                self._broken.update(exc.errors)
            raise
        sessions = got.env_ids.tolist()
        self._inflight.difference_update(sessions)
        return self._took(sessions, got.observations, got.infos)

    # --- the gymnasium.vector.VectorEnv API ----------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._inflight or self._early:
            raise ValueError("reset with batches in flight: recv() them first")
        seeds = seeds_for(seed, self.num_envs)  # Gymnasium's rule: seed + i
        results = self._reset_batches(range(len(self.bounds)), seeds, options)
        obs, _, _, _, infos = self._gather(results)
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self._inflight or self._early:
            raise ValueError("step with batches in flight: recv() them first")
        batch = np.asarray(actions)
        revived = self._reset_batches(sorted(self._broken), None, None) if self._broken else []
        done = {s for s, _, failure in revived}
        live = [s for s in range(len(self.bounds)) if s not in done]
        wire = [{"actions": batch[slice(*self.bounds[s])].tolist()} for s in live]
        stepped = self._exchange(live, wire) if live else []
        by_session = {s: (s, data, failure) for s, data, failure in [*revived, *stepped]}
        return self._gather([by_session[s] for s in range(len(self.bounds))])

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
        when None) without waiting; `recv` returns them as they answer. A batch that lost its
        episodes is reset instead (before this returns)."""
        sessions = list(range(len(self.bounds))) if env_ids is None else self._sessions_of(env_ids)
        waiting = self._inflight | {s for s, _, _ in self._early}
        if waiting & set(sessions):
            raise ValueError("a batch in `send` has a step in flight: recv() it first")
        batch = np.asarray(actions)
        wire, live, at = [], [], 0
        broken = [s for s in sessions if s in self._broken]
        if broken:
            self._early.extend(self._reset_batches(broken, None, None))
        for s in sessions:
            size = self._size(s)
            if s not in broken:
                wire.append({"actions": batch[at : at + size].tolist()})
                live.append(s)
            at += size
        if live:
            self.vector.send(wire, live, batched=True)
            self._inflight.update(live)

    def recv(
        self, min_ready: int | None = None, max_ready: int | None = None
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Whole batches as they answer, at least `min_ready` sub-envs of them (default: every
        batch in flight) and at most `max_ready`; `infos["env_id"]` says which sub-envs."""
        pending = {s: self._size(s) for s in self._inflight} | {
            s: self._size(s) for s, _, _ in self._early
        }
        if not pending:
            raise ValueError("recv: no batch has a step in flight (send first)")
        total = sum(pending.values())
        want = total if min_ready is None else min_ready
        if not 1 <= want <= total:
            raise ValueError(f"recv(min_ready={want}) but {total} sub-envs can answer")
        if max_ready is not None and max_ready < max(want, max(pending.values())):
            raise ValueError(
                f"recv(max_ready={max_ready}): batches answer whole, and one in flight has "
                f"{max(pending.values())} sub-envs"
            )
        results: list[tuple[int, Any, Failure | None]] = []
        count = 0
        while count < want:
            if self._early:
                result = self._early.pop(0)
                results.append(result)
                count += self._size(result[0])
                continue
            if (
                max_ready is not None
                and count + max(pending[s] for s in self._inflight) > max_ready
            ):
                raise ValueError(
                    f"recv(min_ready={want}, max_ready={max_ready}): batches of "
                    f"{sorted(set(pending.values()))} sub-envs answer whole; none fits"
                )
            (result,) = self._receive(1)
            results.append(result)
            count += self._size(result[0])
        obs, rewards, terminated, truncated, infos = self._gather(results)
        infos["env_id"] = np.concatenate(
            [np.arange(*self.bounds[s], dtype=np.int64) for s, _, _ in results]
        )
        return obs, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.vector.close()


def probe(url: str, env: str | None, codec: str) -> EnvInfo:
    """The env's description, from a connection of its own."""
    connection = Connection(url, codec=codec)
    try:
        return connection.describe(env)
    finally:
        connection.close()
