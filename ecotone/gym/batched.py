"""`make_vec` over the vector form (`gymnasium-vector:ID`): one session per server, each a
whole batch of sub-envs stepped by Gymnasium's `SyncVectorEnv` on the server.

Sub-envs 0..N-1 are cut into one contiguous batch per server URL (sizes differing by at most
one). A step sends each server its batch's actions and reads back its observations, rewards
and flags as binary arrays (`ecotone.plugins.gymnasium_vector`), so the client does one
`frombuffer` per array and server, and no work per sub-env. Autoreset is Gymnasium's
NEXT_STEP, done on the servers. `send`/`recv` work a batch at a time: `send` takes whole
batches, `recv` returns whole batches.

Two paths, one for the common case and one for the rest:

* **A batch's step** is one `step` request on its session, sent with `Connection.send` (the
  servers' requests all leave before any answer is read) and answered into
  `BatchObservation` in one decode; several servers are waited on with one `select`
  (`ecotone.client.sync.poll_any`). That is the whole of the hot path: a few calls per
  server per step, where a general vector env's bookkeeping per sub-env would cost the
  client as much as a server's step of 32 CartPoles.
* **Everything else** (connecting, opening the sessions, resets, reopening a lost session,
  starting a replacement server, closing) goes through an `ecotone.VectorEnv` of one sub-env
  per batch (`vector`), whose rules for those are the library's. It takes every answer a
  connection brings while it waits, so before it resets a batch the steps in flight on that
  batch's connection are read first (two batches share one when a URL is given twice); and
  a connection that carries one request at a time (HTTP) gets a batch's step only once the
  step before it there is answered.

Client-side recording (`record_to`) is refused: a batch's steps are byte arrays; record on
the servers (`ecotone serve --record DIR`).

A step that fails (an error answer, a lost connection, no answer within `step_timeout`)
fails its batch as `ecotone.VectorEnv` fails a sub-env (`Failure`): the same codes, infos and
exceptions.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium
import msgspec
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.client.sync import DEFAULT_TIMEOUT, Connection, poll_any
from ecotone.client.vector import (
    ErrorPolicy,
    Failure,
    SubEnvError,
    VectorEnv,
    add_info,
    pipelines,
    raise_failures,
    seeds_for,
)
from ecotone.gym.spaces import space_from_description
from ecotone.specs import EnvInfo, Error, Step

GYM_VECTOR_KEY = "x-gym-vector"  # ecotone.plugins.gymnasium_vector's (no numpy import here)


def vector_form(info: EnvInfo) -> dict[str, Any] | None:
    """The vector form's description in an env's schemas, or None for another env."""
    obs = info.observation_schema.get("properties", {}).get("obs", {})
    marker = obs.get(GYM_VECTOR_KEY) if isinstance(obs, dict) else None
    return marker if isinstance(marker, dict) else None


class BatchObservation(msgspec.Struct, kw_only=True, gc=False):
    """A batch session's observation, as the vector form answers it: the batch's arrays as
    C-order bytes (a MessagePack bin; base64 text in JSON, which decodes to bytes here), its
    infos batched as Gymnasium's (`infos[key][i]`, masks `_key`), and the session's own
    flags (never set: a batch's session never ends)."""

    obs: bytes
    rewards: bytes = b""
    terminations: bytes = b""
    truncations: bytes = b""
    infos: dict[str, Any] = {}
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    metadata: dict[str, Any] = {}


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


class BatchOutcome(NamedTuple):
    """A batch's result: its last good observation (None if it never had one), and why it
    has no fresh one (None: it has)."""

    batch: int
    data: BatchObservation | None
    failure: Failure | None


class Sent(NamedTuple):
    """A batch's step in flight: the connection it went on, its request id, its deadline."""

    conn: Connection
    rid: int
    deadline: float | None


class BatchedRemoteVectorEnv(gymnasium.vector.VectorEnv[Any, Any, Any]):
    """`num_envs` sub-envs as one batch per server of a `gymnasium-vector:` env.

    A batch whose step failed (its env raised, its server died, its step timed out) lost its
    episodes: with `errors="info"` its sub-envs report it (`truncated`, `infos["error"]`,
    `infos["episode_lost"]`) and the next step resets that batch instead of stepping it (its
    session reopened first if it is gone), as Gymnasium's NEXT_STEP autoreset would; with
    `errors="raise"` the step raises `ecotone.SubEnvError` (its `errors` keyed by batch, its
    `result` what `errors="info"` would have returned) and the next step does the same
    reset. A refused batch (`invalid_action`) keeps its episodes."""

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
        if vector_kwargs.get("record_to") is not None:
            raise ValueError(
                f"{info.name}: a batch's steps are not recorded client-side (record_to); "
                "record them on the servers (`ecotone serve --record DIR`)"
            )
        if "observation_type" in vector_kwargs:
            raise TypeError(f"make_vec over {info.name} sets observation_type itself")
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
        self._sizes = sizes
        self._ids = [list(range(start, stop)) for start, stop in self.bounds]
        """Each batch's sub-envs, as `send` compares them."""
        self._env_ids = [np.arange(start, stop, dtype=np.int64) for start, stop in self.bounds]
        self._starts = {start: s for s, (start, _) in enumerate(self.bounds)}
        self._obs_shapes = [(n, *self._shape) for n in sizes]
        item = self._dtype.itemsize * int(np.prod(self._shape))
        self._lengths = [(n * item, n * 8, n, n) for n in sizes]
        """Bytes of each batch's arrays (observations, float64 rewards, bool flags)."""
        self._raise = vector_kwargs.get("errors", ErrorPolicy.RAISE) == ErrorPolicy.RAISE
        self._step_timeout: float | None = vector_kwargs.get("step_timeout", DEFAULT_TIMEOUT)
        self._inflight: dict[int, Sent] = {}  # batches whose step was sent, not answered
        self._ready: collections.deque[BatchOutcome] = collections.deque()
        """Results no one has taken yet: answers read while waiting for another batch's,
        resets done in `send`, steps that failed as they were sent."""
        self._broken: set[int] = set()  # batches whose episodes were lost: reset them next
        self._gone: set[int] = set()  # ... and whose session is gone: reopen it first
        self._last: list[BatchObservation | None] = [None] * servers
        # The batches' sessions never end on their own: the VectorEnv must not autoreset them
        # (a lost one is reset here, with its size).
        vector_kwargs.pop("reset_options", None)
        self.vector = VectorEnv(
            url_list[:servers],
            servers,
            env,
            observation_type=BatchObservation,
            autoreset_mode="disabled",
            **vector_kwargs,
        )
        self._lanes: list[tuple[Connection, str] | None] = []
        self._one_at_a_time: set[int] = set()
        self._find_lanes()

    def _find_lanes(self) -> None:
        """Each batch's connection and session, as the VectorEnv has them now."""
        vector = self.vector
        self._lanes = [
            None if session is None or conn is None else (conn, session)
            for conn, session in zip(vector.env_connections, vector.session_ids, strict=True)
        ]
        self._one_at_a_time = {
            id(conn)
            for url, conn in zip(vector.urls, vector.connections, strict=True)
            if not pipelines(url)
        }
        """Connections that carry one request at a time (HTTP): a batch's step goes on one
        only once the step before it there is answered."""

    # --- results -------------------------------------------------------------------------------

    def _gather(self, results: Sequence[BatchOutcome]) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Batches' outcomes as one result, in the order given."""
        if len(results) == 1:
            s, data, failure = results[0]
            if failure is None and data is not None and not data.infos:  # EnvPool's loop
                obs = np.frombuffer(data.obs, self._dtype).reshape(self._obs_shapes[s])
                return (  # copies: the caller's to keep and change
                    obs.copy(),
                    np.frombuffer(data.rewards, np.float64).copy(),
                    np.frombuffer(data.terminations, np.bool_).copy(),
                    np.frombuffer(data.truncations, np.bool_).copy(),
                    {},
                )
        obs_parts, rewards, terminated, truncated = [], [], [], []
        per_env: list[dict[str, Any]] | None = None
        at = 0
        for s, data, failure in results:
            n = self._sizes[s]
            if data is None:  # never had an observation (its first reset failed)
                obs_parts.append(np.zeros((n, *self._shape), dtype=self._dtype))
            else:
                obs_parts.append(np.frombuffer(data.obs, self._dtype).reshape(n, *self._shape))
            if failure is not None:  # the batch's last good observation, its episodes lost
                rewards.append(np.zeros(n))
                terminated.append(np.zeros(n, dtype=np.bool_))
                truncated.append(np.full(n, failure.ends_episode))
                if per_env is None:
                    per_env = [{} for _ in range(at)]
                per_env.extend(failure.info() for _ in range(n))
            else:
                assert data is not None
                rewards.append(np.frombuffer(data.rewards, np.float64))
                terminated.append(np.frombuffer(data.terminations, np.bool_))
                truncated.append(np.frombuffer(data.truncations, np.bool_))
                if data.infos and per_env is None:
                    per_env = [{} for _ in range(at)]
                if per_env is not None:
                    per_env.extend(_unbatch(data.infos, n) if data.infos else [{}] * n)
            at += n
        merged: dict[str, Any] = {}
        if per_env is not None:
            for i, sub in enumerate(per_env):
                if sub:
                    add_info(merged, sub, i, at)
        return (
            np.concatenate(obs_parts),
            np.concatenate(rewards),
            np.concatenate(terminated),
            np.concatenate(truncated),
            merged,
        )

    def _checked(
        self, results: Sequence[BatchOutcome], result: tuple[Any, Any, Any, Any, dict[str, Any]]
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """`result`, or with `errors="raise"` the SubEnvError of the batches that failed."""
        if self._raise:
            raise_failures({s: f for s, _, f in results if f is not None}, result)
        return result

    def _misfit(self, s: int, data: BatchObservation) -> Failure | None:
        """None if `data` holds batch `s`'s arrays, else why not (a server of another env)."""
        got = (len(data.obs), len(data.rewards), len(data.terminations), len(data.truncations))
        if got == self._lengths[s]:
            return None
        problem = (
            f"batch {s}: {self._sizes[s]} sub-envs of {self._dtype} observations shaped "
            f"{self._shape} need {self._lengths[s]} bytes of observations, rewards, "
            f"terminations and truncations; the server sent {got}"
        )
        return Failure.mismatch(ValueError(problem))

    def _outcome(
        self, s: int, data: BatchObservation | None, failure: Failure | None
    ) -> BatchOutcome:
        """A batch's answer (or failure) recorded: its last observation, its episodes."""
        if failure is None:
            self._last[s] = data
        elif failure.ends_episode:
            self._broken.add(s)  # a refused batch (invalid_action) keeps its episodes
            if failure.session_lost:
                self._gone.add(s)
        return BatchOutcome(s, self._last[s], failure)

    def _inner_failure(self, infos: dict[str, Any], j: int) -> Failure | None:
        """Sub-env `j`'s failure as the VectorEnv's infos report it (errors="info")."""
        mask = infos.get("_error")
        if mask is None or not mask[j]:
            return None
        code = str(infos["error_code"][j])
        message = str(infos["error"][j]).removeprefix(f"[{code}] ")
        lost = bool(infos["episode_lost"][j]) if "_episode_lost" in infos else True
        return Failure(code, EcotoneError(message), ends_episode=lost, session_lost=False)

    def _reset_batches(
        self,
        sessions: Sequence[int],
        seeds: list[int | None] | None,
        options: dict[str, Any] | None,
    ) -> list[BatchOutcome]:
        """Reset each of `sessions` (a round trip each: each has its size and seeds); a gone
        session is reopened first."""
        out = []
        try:
            for s in sessions:
                start, stop = self.bounds[s]
                reset_options: dict[str, Any] = {
                    "num_envs": stop - start,
                    "seeds": [None] * (stop - start) if seeds is None else seeds[start:stop],
                }
                if options:
                    reset_options["options"] = dict(options)
                try:
                    if s in self._gone or self.vector.lost[s]:
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
                failure = self._inner_failure(infos, s)
                if failure is None and observations[s] is not None:
                    failure = self._misfit(s, observations[s])
                if failure is None:
                    self._broken.discard(s)
                    self._gone.discard(s)
                    self._last[s] = observations[s]
                else:
                    self._broken.add(s)
                out.append(BatchOutcome(s, self._last[s], failure))
        finally:
            self._find_lanes()
        return out

    # --- the hot path: a step request per batch -----------------------------------------------

    def _send_steps(self, sessions: Sequence[int], batch: np.ndarray) -> None:
        """Send each batch of `sessions` its slice of `batch` (the actions of those batches,
        in order), as one `step` request on its session."""
        timeout = self._step_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        at = 0
        for s in sessions:
            size = self._sizes[s]
            lane = self._lanes[s]
            if lane is None:  # pragma: no cover - a batch without a session is broken
                raise RuntimeError(f"batch {s} has no session")
            conn, session = lane
            if id(conn) in self._one_at_a_time:
                self._settle([s])
            core = conn.core
            rid = core.next_id()
            action = core.raw({"actions": batch[at : at + size].tolist()})
            at += size
            try:
                conn.send(Step(id=rid, session=session, action=action))
            except ConnectionLost as exc:
                self._lost(conn, exc)
                self._ready.append(self._outcome(s, None, Failure.lost(exc)))
                continue
            self._inflight[s] = Sent(conn, rid, deadline)

    def _settle(self, batches: Sequence[int]) -> None:
        """Wait until no step is in flight on the connections of `batches` (the answers
        wait in `_ready`): before the vector env underneath uses one (it takes every answer
        a connection brings, and would drop theirs), or before another request goes on one
        that carries one at a time."""
        lanes = self._lanes
        conns = {id(lane[0]) for s in batches if (lane := lanes[s]) is not None}
        while any(id(sent.conn) in conns for sent in self._inflight.values()):
            self._pump()

    def _lost(self, conn: Connection, exc: ConnectionLost) -> None:
        """`conn` is gone: every step in flight on it fails, every session on it is gone."""
        for s, sent in list(self._inflight.items()):
            if sent.conn is conn:
                del self._inflight[s]
                self._ready.append(self._outcome(s, None, Failure.lost(exc)))
        for s, lane in enumerate(self._lanes):
            if lane is not None and lane[0] is conn:
                self._gone.add(s)

    def _answered(self, conn: Connection, answers: list[Any]) -> None:
        """Answers read from `conn`, each to the batch whose step it answers (late ones,
        abandoned, were dropped by the connection)."""
        inflight = self._inflight
        for answer in answers:
            rid = answer.id
            if rid is None:  # an error the server could not tie to a request: the oldest
                rid = min((t.rid for t in inflight.values() if t.conn is conn), default=0)
                conn.abandon(rid)  # its own answer, should one come, is dropped
            s = -1
            for batch, sent in inflight.items():
                if sent.rid == rid and sent.conn is conn:
                    s = batch
                    break
            if s < 0:
                continue
            del inflight[s]
            obs = getattr(answer, "observation", None)
            if type(obs) is BatchObservation:
                misfit = self._misfit(s, obs)
                if misfit is None:
                    self._last[s] = obs
                    self._ready.append(BatchOutcome(s, obs, None))
                    continue
                failure = misfit
            elif type(answer) is Error:
                failure = Failure.from_frame(answer)
            else:
                problem = f"a {type(answer).__name__} frame"
                if isinstance(obs, msgspec.Raw):  # the typed decode failed: say what does not fit
                    try:
                        conn.core.codec.decode_as(obs, BatchObservation)
                    except msgspec.ValidationError as exc:
                        problem = str(exc)
                failure = Failure.mismatch(ValueError(problem))
            self._ready.append(self._outcome(s, None, failure))

    def _pump(self) -> None:
        """Wait for the next answers: whichever servers answered are read; steps past their
        deadline fail (their late answers will be dropped)."""
        inflight = self._inflight
        if len(inflight) == 1:
            (sent,) = inflight.values()
            conns = [sent.conn]
            deadline = sent.deadline
        else:
            conns = list({id(t.conn): t.conn for t in inflight.values()}.values())
            deadlines = [t.deadline for t in inflight.values() if t.deadline is not None]
            deadline = min(deadlines) if deadlines else None
        try:
            for index, answers in poll_any(conns, deadline):
                if isinstance(answers, ConnectionLost):
                    self._lost(conns[index], answers)
                else:
                    self._answered(conns[index], answers)
        except BaseException:
            self._cancel()
            raise
        if deadline is not None and time.monotonic() >= deadline:
            now = time.monotonic()
            for s, sent in list(inflight.items()):
                if sent.deadline is not None and sent.deadline <= now:
                    del inflight[s]
                    sent.conn.abandon(sent.rid)
                    what = f"batch {s}: no answer to step within {self._step_timeout}s"
                    failure = Failure.timed_out(TimeoutError(what))
                    self._ready.append(self._outcome(s, None, failure))

    def _cancel(self) -> None:
        """The wait was interrupted: what became of the steps in flight is unknown, so their
        batches' episodes are lost (reset at their next step); late answers are dropped."""
        for s, sent in list(self._inflight.items()):
            del self._inflight[s]
            sent.conn.abandon(sent.rid)
            what = f"batch {s}: the wait for its step was interrupted"
            self._ready.append(self._outcome(s, None, Failure.cancelled(TimeoutError(what))))

    # --- the gymnasium.vector.VectorEnv API ----------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._inflight or self._ready:
            raise ValueError("reset with batches in flight: recv() them first")
        seeds = seeds_for(seed, self.num_envs)  # Gymnasium's rule: seed + i
        results = self._reset_batches(range(len(self.bounds)), seeds, options)
        obs, _, _, _, infos = self._checked(results, self._gather(results))
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self._inflight or self._ready:
            raise ValueError("step with batches in flight: recv() them first")
        ready = self._ready
        by_batch: list[Any] = [None] * len(self.bounds)
        try:
            self._start(range(len(self.bounds)), np.asarray(actions))
            for _ in self.bounds:
                while not ready:
                    self._pump()
                outcome = ready.popleft()
                by_batch[outcome.batch] = outcome
        except BaseException:  # this call's results go with it (a lost batch is reset next)
            self._cancel()
            ready.clear()
            raise
        return self._checked(by_batch, self._gather(by_batch))

    def _start(self, sessions: Sequence[int], batch: np.ndarray) -> None:
        """Reset the broken batches of `sessions` (their outcomes ready at once), send the
        others their slices of `batch`."""
        if self._broken and not self._broken.isdisjoint(sessions):
            broken = [s for s in sessions if s in self._broken]
            self._settle(broken)
            self._ready.extend(self._reset_batches(broken, None, None))
            keep = [s not in broken for s in sessions for _ in range(self._sizes[s])]
            sessions = [s for s in sessions if s not in broken]
            batch = batch[np.asarray(keep, dtype=np.bool_)]
        self._send_steps(sessions, batch)

    # --- EnvPool-style asynchronous stepping ---------------------------------------------------

    def _sessions_of(self, env_ids: Any) -> list[int]:
        ids = np.asarray(env_ids, dtype=np.int64).reshape(-1).tolist()
        sessions: list[int] = []
        at = 0
        while at < len(ids):
            s = self._starts.get(ids[at], -1)
            want = self._ids[s] if s >= 0 else ()
            if not want or ids[at : at + len(want)] != want:
                spans = ", ".join(f"{a}..{b - 1}" for a, b in self.bounds)
                raise ValueError(
                    f"send takes whole batches, each server's sub-envs in order ({spans})"
                )
            sessions.append(s)
            at += len(want)
        return sessions

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step of whole batches (`env_ids`: their sub-envs, batch after batch; all
        when None) without waiting; `recv` returns them as they answer. A batch that lost its
        episodes is reset instead (before this returns)."""
        sessions = range(len(self.bounds)) if env_ids is None else self._sessions_of(env_ids)
        for s in sessions:
            if s in self._inflight or any(o.batch == s for o in self._ready):
                raise ValueError("a batch in `send` has a step in flight: recv() it first")
        self._start(sessions, np.asarray(actions))

    def recv(
        self, min_ready: int | None = None, max_ready: int | None = None
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Whole batches as they answer, at least `min_ready` sub-envs of them (default: every
        batch in flight) and at most `max_ready`; `infos["env_id"]` says which sub-envs."""
        sizes, ready = self._sizes, self._ready
        pending = [sizes[s] for s in self._inflight]
        if ready:
            pending += [sizes[o.batch] for o in ready]
        if not pending:
            raise ValueError("recv: no batch has a step in flight (send first)")
        total = sum(pending)
        want = total if min_ready is None else min_ready
        if not 1 <= want <= total:
            raise ValueError(f"recv(min_ready={want}) but {total} sub-envs can answer")
        largest = max(pending)
        if max_ready is not None and max_ready < max(want, largest):
            raise ValueError(
                f"recv(max_ready={max_ready}): batches answer whole, and one in flight has "
                f"{largest} sub-envs"
            )
        results: list[BatchOutcome] = []
        count = 0
        try:
            while count < want:
                if max_ready is not None and count + largest > max_ready:
                    raise ValueError(
                        f"recv(min_ready={want}, max_ready={max_ready}): batches of "
                        f"{sorted(set(pending))} sub-envs answer whole; none fits"
                    )
                while not ready:
                    self._pump()
                outcome = ready.popleft()
                results.append(outcome)
                count += sizes[outcome.batch]
        except BaseException:  # interrupted, or none fits: what was taken is given back
            ready.extendleft(reversed(results))
            raise
        obs, rewards, terminated, truncated, infos = self._gather(results)
        infos["env_id"] = np.concatenate([self._env_ids[o.batch] for o in results])
        return self._checked(results, (obs, rewards, terminated, truncated, infos))

    def close_extras(self, **kwargs: Any) -> None:
        self._inflight.clear()
        self._ready.clear()
        self.vector.close()


def probe(url: str, env: str | None, codec: str) -> EnvInfo:
    """The env's description, from a connection of its own."""
    connection = Connection(url, codec=codec)
    try:
        return connection.describe(env)
    finally:
        connection.close()
