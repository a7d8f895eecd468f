# unasync: the source of ecotone/client/_sync/vector.py
"""N remote sub-envs stepped as one, for training loops: written once, for both faces.

The source is ecotone/client/_async/vector.py (trio or asyncio); scripts/unasync.py generates
ecotone/client/_sync/vector.py from it (blocking). Either is a thin I/O loop around the
sans-IO `VectorCore` (ecotone/client/_vector/), which holds every decision: which frames to
send, autoreset, errors, results. Needs numpy (`pip install ecotone[gymnasium]` brings it);
`import ecotone` does not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np

from ecotone.client._async import io
from ecotone.client._async.connection import AsyncConnection
from ecotone.client._async.exchange import DEFAULT_TIMEOUT
from ecotone.client._async.resuming import RESUME_TIMEOUT
from ecotone.client._async.vector_resuming import VectorResumer
from ecotone.client._core import EnvTypes
from ecotone.client._vector.batching import seeds_for, split_actions
from ecotone.client._vector.core import VectorCore, reset_plan, select_subs
from ecotone.client._vector.failures import SubEnvError
from ecotone.client._vector.policy import AutoresetMode, Policy, VectorOptions, check_options
from ecotone.client._vector.results import take_ready, wanted
from ecotone.client._vector.subenvs import Link, StepBatch, Tally
from ecotone.client._vector.trails import Trails
from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.recording import ClientRecorder
from ecotone.specs import (
    DropSnapshot,
    ExportSnapshot,
    Restore,
    Restored,
    Snapshot,
    SnapshotExport,
    Snapshotted,
)


class AsyncVectorEnv:
    """N sub-envs (sessions) spread round robin over one or more servers, stepped together.

        venv = await ecotone.AsyncVectorEnv(["ws://a:8000", "ws://b:8000"], 64).aopen()
        observations, infos = await venv.reset(seed=0)     # sub-env i gets seed 0 + i
        observations, rewards, terminated, truncated, infos = await venv.step(actions)

    (or `async with ecotone.AsyncVectorEnv(urls, num_envs) as venv:`). The blocking face,
    `ecotone.VectorEnv`, opens its sessions as it is made, and also works as a context manager.

    Sub-env `i` lives on `urls[i % len(urls)]`; the sub-envs of one URL share one connection,
    and a `step` is one `step_many` round trip per connection, the connections' requests sent
    before any answer is read. `observations` is a list (the env's Observation type when
    `observation_type` is given, else dicts); `rewards` (float64), `terminated` and
    `truncated` (bool) are numpy arrays; `infos` is batched as in Gymnasium: `infos[key][i]`
    with the mask `infos["_" + key]`, from each observation's `metadata`.

    **Autoreset** (`autoreset_mode`, matching Gymnasium 1.x's `AutoresetMode`). Say sub-env
    i's episode ends at step t (terminated or truncated):

    * `next_step` (default): step t returns i's final observation with the last reward and
      flags. At step t+1, i is reset instead of stepped (actions[i] is ignored): its new
      episode's first observation, reward 0.0, terminated = truncated = False, the reset's
      infos.
    * `same_step`: i is reset within step t, which returns the new episode's first observation
      with the last transition's reward and flags; `infos["final_obs"][i]` (an object array,
      mask `infos["_final_obs"]`) is the final observation and `infos["final_info"]` its
      infos, beside the reset's infos. Step t+1 is an ordinary step.
    * `disabled`: step t is as with `next_step`; stepping i again raises ValueError until it
      is reset: `reset(options={"reset_mask": mask})` (a bool array) resets only the masked
      sub-envs and returns every observation, with infos for the masked ones.

    Automatic resets carry no seed (the env goes on with its own random stream, as Gymnasium's
    do) and the `reset_options` given here; `reset(seed=..., options=...)` seeds and
    configures explicitly (a seed list gives each sub-env its own).

    **Failures** (`errors`). With `errors="info"` a failed sub-env is reported in place:

    * an invalid action: observation unchanged, reward 0.0, terminated = truncated = False,
      `infos["error"]` / `["error_code"]`, `infos["episode_lost"]` False; the episode goes on.
    * the env raised, `step_timeout` passed, the connection dropped, the observation did not
      fit `observation_type` (`bad_observation`, an `ObservationMismatch` naming the field),
      any other server error:
      the last good observation, reward 0.0, terminated False, **truncated True**,
      `infos["error"]` / `["error_code"]`, `infos["episode_lost"]` True. A lost episode ends
      like a truncated one (don't bootstrap from it) and is reset as the mode says
      (`same_step`: within the call, the last good observation in `final_obs`).

    A sub-env whose session is gone (its connection dropped) reports `episode_lost` on every
    call until `restart([i])` reopens it, reconnecting if needed; the other sub-envs never
    notice. With `errors="raise"` (default) the call raises `SubEnvError` naming the first
    failed sub-env and its cause (`EpisodeLost`, a subclass, when an episode was lost); its
    `.result` is what `errors="info"` would have returned (the others did step).

    `replace_server(index, url) -> new_url`, when given, is called by `restart` for a server
    that cannot be reconnected (its process or container is gone): it starts a replacement
    (through its provider; `ecotone.launch_vector` passes one) and returns its URL, and the
    restarted sub-envs open their sessions there. Sub-envs on other servers never notice.

    **Resuming** (`resume=True`, on servers that keep checkpoints: `serve --checkpoint-dir`).
    Each sub-env's episode is checkpointed at its start and every `checkpoint_every` steps;
    when `step` or `reset` finds a server gone (its connection dropped) or going
    (`shutting_down`), its sub-envs are reopened at the same URL (the server restarted on its
    directory, or another replica sharing it and the snapshot key), restored, the steps the
    checkpoint does not hold made again, and the call completed: the caller sees an ordinary
    result. `step_many` of deterministic envs then goes on step for step as it would have. An
    episode that can be neither restored nor replayed (no checkpoint, no seed) is reported
    lost at its next step. `send`/`recv` do not resume.

    **Asynchronous stepping**, EnvPool style: `send(actions, env_ids)` then `recv(min_ready=k)`
    returns the first k (or more) sub-envs to answer, in the order they answered, so a slow
    sub-env never holds back the fast ones (each is its own `step` frame here).

    Args:
        urls: The servers' URLs (one str: one server); sub-env `i` lives on
            `urls[i % len(urls)]`.
        num_envs: How many sub-envs (sessions).
        env: Which env, when the servers serve several (None: their default).
        replace_server: Called by `restart` as `replace_server(index, url)` for a server
            that cannot be reconnected: it starts a replacement and returns its URL (see
            above).
        **options: `VectorOptions`, each optional: `observation_type`, the type to decode
            observations into (None: dicts); `autoreset_mode`, `"next_step"` (the default),
            `"same_step"` or `"disabled"` (Gymnasium's `AutoresetMode` members too);
            `errors`, `"raise"` (the default) or `"info"`; `step_timeout`, seconds each step
            (or reset) may take (60; None: forever); `reset_options`, passed to every
            automatic reset and merged into explicit ones (None); `codec`, `json` (the
            default) or `msgpack`; `connect_timeout`, seconds to connect to each server
            (10); `record_to`, a directory where every sub-env episode is recorded (None:
            none; see `ecotone.recording`), in `record_format`, `"jsonl"` (the default) or
            `"msgpack"`; `token`, for servers that require one (else each URL's `?token=`,
            else `$ECOTONE_TOKEN`); `resume`, resume the sub-envs of a server that goes
            (False; see **Resuming**), with `checkpoint_every`, a checkpoint every this many
            steps (None: one at each episode's start), and `resume_timeout`, seconds to keep
            trying to reach a server again (60).

    Raises:
        TypeError: A keyword that is not one of the options.
        ValueError: No URL, fewer than one sub-env, an autoreset mode, error policy or
            recording format that is not one, or `resume=True` with a server that keeps no
            checkpoints.
        ConnectionLost: The blocking face opens as it is made, and raises what `aopen`
            raises: a server cannot be reached (see `aopen`).

    Example:
        >>> async with ecotone.AsyncVectorEnv("inproc://counter", 3) as venv:
        ...     observations, infos = await venv.reset(seed=0)
        ...     observations, rewards, terminated, truncated, infos = await venv.step(
        ...         [{"delta": 1}, {"delta": 2}, {"delta": 3}]
        ...     )
        >>> rewards
        array([1., 2., 3.])
        >>> [observation["count"] for observation in observations]
        [1, 2, 3]
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        env: str | None = None,
        *,
        replace_server: io.ReplaceServer | None = None,
        **options: Unpack[VectorOptions],
    ) -> None:
        check_options(options, type(self))
        policy = Policy.from_options(options, DEFAULT_TIMEOUT)
        record_to = options.get("record_to")
        recorder = None
        if record_to is not None:
            record_format: Any = options.get("record_format", "jsonl")  # checked by the recorder
            recorder = ClientRecorder(record_to, env or "env", format=record_format)
        self._core = VectorCore(
            urls,
            num_envs,
            env=env,
            types=EnvTypes(options.get("observation_type")),
            policy=policy,
            recorder=recorder,
        )
        self._codec = options.get("codec", "json")
        self._replace_server = replace_server
        self._connect_timeout = options.get("connect_timeout", 10.0)
        self._token = options.get("token")
        self._resumer: VectorResumer | None = None
        if options.get("resume", False):
            trails = Trails(num_envs, options.get("checkpoint_every"))
            self._resumer = VectorResumer(trails, options.get("resume_timeout", RESUME_TIMEOUT))
        self._opened = False
        self._closed = False
        self._started = False
        if io.OPENS_IN_CONSTRUCTOR:
            io.call_now(self.aopen)

    async def aopen(self) -> AsyncVectorEnv:
        """Connect and open every sub-env's session. Idempotent.

        What `async with` does; the blocking face does it as it is made. If it fails,
        everything it opened is closed.

        Returns:
            The vector env.

        Raises:
            ValueError: A URL no installed transport handles, or a malformed one.
            ConnectionLost: A server cannot be reached.
            AccessDenied: A server refused the token (or wants one).
            EcotoneError: What answered is not a server of this transport.
            SubEnvError: Sessions could not be opened (`unknown_env`, `capacity`...): each
                failed sub-env's error, by index, in its `errors`.
        """
        if self._opened:
            return self
        self._opened = True
        core = self._core
        try:
            for link in core.links:
                core.attach(link, await self._connect(link))
            tally = Tally()
            core.plan_open(core.subs, tally)
            timeout = max(self._connect_timeout, core.step_timeout or 0.0)
            await self._run(tally, time.monotonic() + timeout)
            failures = core.failures(tally.outcomes.values())
            if failures:
                raise SubEnvError({i: f.error for i, f in failures.items()})
            if self._resumer is not None:
                keyless = [sub.link.url for sub in core.subs if sub.resume_key is None]
                if keyless:
                    raise ValueError(
                        f"resume=True: the server at {keyless[0]} keeps no checkpoints (start "
                        "it with --checkpoint-dir DIR)"
                    )
                self._resumer.trails.keys(core.subs)
        except BaseException:
            with io.shielded():
                await self.aclose()
            raise
        return self

    async def _connect(self, link: Link) -> AsyncConnection:
        return await AsyncConnection.open_url(
            link.url,
            codec=self._codec,
            timeout=self._core.step_timeout,
            connect_timeout=self._connect_timeout,
            token=self._token,
        )

    # --- properties ----------------------------------------------------------------------------

    @property
    def num_envs(self) -> int:
        """How many sub-envs."""
        return self._core.num_envs

    @property
    def autoreset_mode(self) -> AutoresetMode:
        """When a sub-env whose episode ended is reset (a str enum: `"next_step"`...)."""
        return self._core.autoreset_mode

    @property
    def urls(self) -> list[str]:
        """The distinct server URLs, one connection each."""
        return [link.url for link in self._core.links]

    @property
    def env_urls(self) -> list[str]:
        """Each sub-env's server URL."""
        return [sub.link.url for sub in self._core.subs]

    @property
    def connections(self) -> list[AsyncConnection]:
        """Each server's connection, in the order of `urls`."""
        return [link.conn for link in self._core.links]

    @property
    def env_connections(self) -> list[AsyncConnection | None]:
        """Each sub-env's connection: the one its session lives on (None before it has one)."""
        return [sub.conn for sub in self._core.subs]

    @property
    def session_ids(self) -> list[str | None]:
        """Each sub-env's session id (None while it has no session)."""
        return [sub.session for sub in self._core.subs]

    @property
    def observations(self) -> list[Any]:
        """Each sub-env's latest observation."""
        return [sub.obs for sub in self._core.subs]

    @property
    def lost(self) -> np.ndarray:
        """Mask of the sub-envs whose session is gone (`restart` them)."""
        return np.fromiter((s.lost is not None for s in self._core.subs), np.bool_, self.num_envs)

    # --- the Gymnasium-style calls -----------------------------------------------------------

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """Reset every sub-env, or those in `options["reset_mask"]`.

        Args:
            seed: An int gives sub-env i `seed + i`; a list gives each its own (None: no
                seed).
            options: Reset options for every sub-env reset (merged over `reset_options`);
                `reset_mask`, a numpy bool array of `num_envs`, resets only the masked ones.

        Returns:
            `(observations, infos)`: every sub-env's observation, and the resets' infos
            batched as in Gymnasium.

        Raises:
            ValueError: A sub-env has a request in flight (`recv` it first), a seed list or
                mask of the wrong size, or a mask with nothing in it.
            TypeError: A mask that is not a numpy bool array.
            SubEnvError: With `errors="raise"`, the first failed sub-env and its cause
                (`EpisodeLost`, a subclass, when an episode was lost); its `result` is what
                `errors="info"` would have returned.
        """
        core = self._core
        subs, seeds, merged = reset_plan(core, seed, options)
        core.check_idle(subs)
        if self._resumer is not None:
            result = await self._resumer.reset(self, subs, seeds, merged)
            self._started = True
            return result
        tally = Tally()
        core.plan_reset(subs, seeds, merged, tally)
        await self._run(tally, self._deadline())
        self._started = True
        return core.check(tally.outcomes.values(), core.reset_result(tally, core.num_envs))

    async def step(
        self, actions: Any
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action (see the class docstring for autoreset).

        Args:
            actions: One action per sub-env (a dict, or the env's Action type), as a list, or
                a dict of per-field arrays (`{"delta": np.array([...])}`).

        Returns:
            `(observations, rewards, terminated, truncated, infos)`: a list, three numpy
            arrays (float64, bool, bool) and the infos batched as in Gymnasium.

        Raises:
            RuntimeError: No `reset` yet.
            ValueError: Not one action per sub-env, a sub-env with a request in flight, or
                (autoreset `disabled`) a sub-env whose episode is over.
            TypeError: An action that cannot be encoded.
            SubEnvError: With `errors="raise"`, the first failed sub-env and its cause
                (`EpisodeLost`, a subclass, when an episode was lost); its `result` is what
                `errors="info"` would have returned.
        """
        core = self._core
        if not self._started:
            raise RuntimeError(
                f"{type(self).__name__}.step before reset(): reset the sub-envs first"
            )
        actions = split_actions(actions, core.num_envs)
        core.check_steppable(core.subs)
        if self._resumer is not None:
            return await self._resumer.step(self, actions)
        tally = Tally()
        core.plan_step(actions, core.subs, tally)
        await self._run(tally, self._deadline())
        return core.step_all_result(tally)

    async def restart(
        self,
        env_ids: Any,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """Reopen the sessions of some sub-envs and reset them; the others are untouched.

        The old sessions are closed; a dropped connection is reconnected first, and a server
        that cannot be reached is replaced through `replace_server`, when given.

        Args:
            env_ids: The sub-envs' indices (an int, or a sequence or array of them).
            seed: As for `reset`: an int gives sub-env i `seed + i` (None: no seed).
            options: Reset options, merged over `reset_options`.

        Returns:
            `(observations, infos)` like a masked reset: every sub-env's observation, and the
            restarted ones' infos.

        Raises:
            IndexError: An index out of range.
            ValueError: An index named twice, a seed list of the wrong size, or a sub-env
                with a request in flight (`recv` it first).
            SubEnvError: With `errors="raise"`, the first failed sub-env and its cause
                (`EpisodeLost`, a subclass, when an episode was lost); its `result` is what
                `errors="info"` would have returned.
        """
        core = self._core
        subs = select_subs(core, env_ids)
        for link in {sub.link.index: sub.link for sub in subs}.values():
            if not link.alive:
                if link.conn is not None:
                    await link.conn.aclose()
                try:
                    core.attach(link, await self._connect(link))
                except (EcotoneError, OSError) as exc:
                    link.down = exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc))
                    if self._replace_server is not None:
                        try:  # the server itself is gone: a new one from its provider
                            link.url = await self._replace_server(link.index, link.url)
                            core.attach(link, await self._connect(link))
                            link.down = None
                        except (EcotoneError, OSError, RuntimeError) as again:
                            link.down = ConnectionLost(f"{link.url}: replacing it failed: {again}")
        all_seeds = seeds_for(seed, core.num_envs)
        merged = {**core.reset_options, **(options or {})}
        tally = Tally()
        seeds = [all_seeds[s.index] for s in subs]
        core.plan_restart(subs, seeds, merged, tally)
        await self._run(tally, self._deadline())
        self._started = True
        if self._resumer is not None:
            await self._resumer.started(self, subs, seeds)
        return core.check(tally.outcomes.values(), core.reset_result(tally, core.num_envs))

    async def fork(self, source: int, into: Any) -> list[Any]:
        """Copy sub-env `source`'s episode, where it stands, into the sub-envs `into`.

        Each of them drops its own episode and goes on from `source`'s state with an episode
        id of its own (a GRPO group from one prefix, a search from one state). One snapshot
        on `source`'s server; sub-envs on another server get it exported, so every server
        needs the same snapshot key (`--snapshot-key-file`).

        Args:
            source: The sub-env whose episode is copied.
            into: The sub-envs that take it (an int, or a sequence or array of them).

        Returns:
            The observation each of `into` now holds (`source`'s last one), in `into`'s order.

        Raises:
            IndexError: An index out of range.
            ValueError: `source` among `into`, an index named twice, `source` with no
                episode running, or a sub-env with a request in flight.
            ServerError: The server refused (`unsupported`: the env cannot be saved;
                `snapshot_mismatch`: servers with different snapshot keys).
            EcotoneError: A connection broke; the sub-envs not yet restored keep their own
                episodes, the one that failed needs a reset.
        """
        core = self._core
        (origin,) = select_subs(core, [source])
        targets = select_subs(core, into)
        if origin in targets:
            raise ValueError(f"sub-env {source} cannot be forked into itself")
        core.check_idle([origin, *targets])
        if origin.needs_reset or origin.conn is None or origin.session is None:
            raise ValueError(f"sub-env {source} has no episode running: reset it first")
        conn, timeout = origin.conn, core.step_timeout
        taken = conn.core.check(
            await conn.request(Snapshot(id=conn.core.next_id(), session=origin.session), timeout)
        )
        assert isinstance(taken, Snapshotted), taken
        blob: bytes | None = None
        observations: list[Any] = []
        moved: dict[int, Restored] = {}
        try:
            for sub in targets:
                there, session = sub.conn, sub.session or ""
                if there is conn:
                    sid = taken.snapshot
                    frame = Restore(id=conn.core.next_id(), session=session, snapshot=sid)
                else:
                    if blob is None:
                        ask = ExportSnapshot(id=conn.core.next_id(), snapshot=taken.snapshot)
                        exported = conn.core.check(await conn.request(ask, timeout))
                        assert isinstance(exported, SnapshotExport), exported
                        blob = exported.blob
                    frame = Restore(id=there.core.next_id(), session=session, blob=blob)
                try:
                    answer = there.core.check(await there.request(frame, timeout))
                except EcotoneError:
                    sub.needs_reset = True  # its episode is unknown now: reset it
                    raise
                assert isinstance(answer, Restored), answer
                moved[sub.index] = answer
                result = core.result(answer.observation)
                sub.obs, sub.needs_reset = result.observation, result.done or result.truncated
                observations.append(result.observation)
        finally:
            with io.shielded():
                drop = DropSnapshot(id=conn.core.next_id(), snapshot=taken.snapshot)
                try:
                    await conn.request(drop, timeout)
                except (ConnectionLost, TimeoutError):
                    pass
            if self._resumer is not None:
                await self._resumer.forked(self, moved)
        return observations

    # --- EnvPool-style asynchronous stepping ---------------------------------------------------

    async def send(self, actions: Any, env_ids: Any = None, *, batched: bool = False) -> None:
        """Start a step of some sub-envs without waiting; `recv` collects the results.

        A sub-env with a step in flight cannot be sent another. Autoreset applies as in
        `step` (next_step: a finished sub-env is reset). Each sub-env answers on its own by
        default, as soon as its step is done.

        Args:
            actions: One action per sub-env of `env_ids`, as `step` takes them.
            env_ids: The sub-envs' indices (None: all of them).
            batched: The sub-envs of one server go in one `step_many` and answer together,
                which costs much less per step (EnvPool's way: send a batch to one server,
                work on another server's batch meanwhile).

        Raises:
            RuntimeError: No `reset` yet.
            IndexError: An index out of range.
            ValueError: An index named twice, not one action per sub-env, a sub-env with a
                request in flight, or (autoreset `disabled`) a sub-env whose episode is over.
            TypeError: An action that cannot be encoded.
        """
        core = self._core
        if not self._started:
            raise RuntimeError(
                f"{type(self).__name__}.send before reset(): reset the sub-envs first"
            )
        subs = select_subs(core, env_ids)
        actions = split_actions(actions, len(subs))
        core.check_steppable(subs)
        core.plan_step(actions, subs, None, batched=batched)
        await self._flush()

    async def recv(self, min_ready: int | None = None, max_ready: int | None = None) -> StepBatch:
        """Wait for sub-envs sent a step to answer, and return their results.

        Args:
            min_ready: How many to wait for at least (None: all in flight).
            max_ready: How many to return at most (None: all that answered).

        Returns:
            `StepBatch(env_ids, observations, rewards, terminated, truncated, infos)`, in the
            order they answered.

        Raises:
            ValueError: No sub-env has a step in flight, or `min_ready` is more than can
                answer (or less than 1).
            SubEnvError: With `errors="raise"`, the first failed sub-env and its cause
                (`EpisodeLost`, a subclass, when an episode was lost); its `result` is what
                `errors="info"` would have returned.
        """
        core = self._core
        want = wanted(core, min_ready)
        while core.ready_count < want:
            await self._flush()
            await self._pump(None, None)
        return take_ready(core, max_ready)

    # --- I/O -----------------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        timeout = self._core.step_timeout
        return None if timeout is None else time.monotonic() + timeout

    async def _flush(self) -> None:
        """Send what the core queued (shielded: a frame taken from the outbox must go out)."""
        core = self._core
        with io.shielded():
            for link in core.links:
                if not link.outbox:
                    continue
                for frame in core.take_outbox(link):
                    try:
                        await link.conn.send(frame)
                    except ConnectionLost as exc:
                        core.on_link_lost(link, exc)
                        break

    async def _run(self, tally: Tally, deadline: float | None) -> None:
        """Move frames and answers until every sub-env of `tally` has its outcome."""
        try:
            while True:
                await self._flush()
                if tally.complete:
                    return
                await self._pump(deadline, tally)
        except BaseException:  # interrupted or cancelled: what the sub-envs did is unknown
            for link, rid in self._core.cancel(tally):
                link.conn.abandon(rid)
            raise

    async def _pump(self, deadline: float | None, tally: Tally | None) -> None:
        """Read one round: whichever links have answers, then enforce the deadline.

        At least one link is read, or none when the deadline passes; then `tally`'s requests
        all expire at `deadline` (without a call, each request at its own).

        Raises:
            RuntimeError: Nothing is in flight (a bug of the caller's).
        """
        core = self._core
        links = [link for link in core.links if link.unanswered > 0]
        if not links:  # pragma: no cover - the callers only pump with requests in flight
            raise RuntimeError("nothing in flight")
        if tally is None:
            deadline = core.next_deadline()
        await io.read_some(links, deadline, self._answered)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            for link in core.links:
                for rid in core.expire(link, now, tally):
                    link.conn.abandon(rid)

    def _answered(self, link: Link, responses: list[Any] | ConnectionLost) -> None:
        core = self._core
        if isinstance(responses, ConnectionLost):
            core.on_link_lost(link, responses)
            return
        for response in responses:
            core.on_response(link, response)

    # --- lifetime ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection (the servers close the sessions with them). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with io.shielded():
            for link in self._core.links:
                if link.conn is not None:
                    await link.conn.aclose()
        self._core.close_recording()

    async def __aenter__(self) -> AsyncVectorEnv:
        return await self.aopen()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} num_envs={self.num_envs} urls={self.urls}>"
