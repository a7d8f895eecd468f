"""`ecotone collect`: a policy over an env's tasks, N episodes in flight, trajectories written
in the recording format (`ecotone.recording`), and a summary per task.

Episodes share one connection; each runs in its own session. A job is (task, repeat): every
chosen task of the split (or, for an env without tasks, `episodes` plain episodes) is played
`repeats` times, repeat r with seed `seed + r`, so a run is reproducible. An episode ends
when the env says so (done or truncated), when the policy returns None, after `max_steps`
steps, or after `max_steps` refused actions in a row; it is recorded whatever ends it.

Success is the env's word, the final observation's `metadata["is_success"]` (Gymnasium's
and Stable-Baselines' `is_success` convention) when it gives one; otherwise an episode that
terminated (`done`, not cut short) with a positive last reward.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Required, TypedDict, Unpack

import attrs
import msgspec
import trio

from ecotone.client.aio import AsyncConnection, AsyncEnvClient
from ecotone.client.errors import InvalidActionError, ServerError
from ecotone.collect.policies import ChatPolicy, PolicyLike, as_policy
from ecotone.collect.protocol import Decision, Episode, Policy, PolicyError
from ecotone.collect.seats import SeatedRun, actors, play_seats, seat_policies
from ecotone.recording.dataset import require_datasets, write_parquet
from ecotone.recording.reader import is_success, read_episode
from ecotone.recording.recorder import EpisodeWriter
from ecotone.specs import EnvInfo, TaskRef
from ecotone.specs.keywords import from_keywords


def _safe(name: str) -> str:
    """`name` as one path component: never empty, never `.`, `..` or hidden."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".") or "_"


RESERVED_OPTIONS = frozenset({"seed", "episode_id", "task", "split", "index"})
"""Reset options a run sets itself."""


@attrs.frozen
class Job:
    index: int
    """The job's number (its file's name)."""
    split: str | None
    task_index: int | None
    repeat: int
    seed: int


@attrs.define
class Outcome:
    job: Job
    task: str
    """The task's id ("-" for an env without tasks)."""
    steps: int = 0
    total: float = 0.0
    success: bool = False
    reason: str = ""
    error: str | None = None
    seconds: float = 0.0
    path: str | None = None
    """The episode's recording."""
    model_turns: int = 0
    """The model's answers (a chat policy's), recorded beside the steps."""
    token_turns: int = 0
    """Of them, those recorded with token ids and log-probabilities."""
    continued_turns: int = 0
    """Of those, the calls made with the episode's ids as token input."""
    returns: dict[str, float] = attrs.field(factory=dict)
    """A multi-agent env's return per seat (`total` is their sum)."""


@attrs.frozen
class TaskSummary:
    task: str
    episodes: int
    mean_return: float
    success_rate: float
    mean_steps: float
    errors: int
    seat_returns: dict[str, float] = attrs.field(factory=dict)
    """A multi-agent env's mean return per seat."""


@attrs.frozen
class Summary:
    env: str
    policy: str
    episodes: int
    seconds: float
    tasks: tuple[TaskSummary, ...]
    overall: TaskSummary
    out: str
    model_turns: int = 0
    """The model's answers over the run (0 for a policy that records none)."""
    token_turns: int = 0
    """Of them, those with token ids and log-probabilities."""
    continued_turns: int = 0
    """Of those, the calls continued from the episode's ids (token input)."""

    def tokens(self) -> str:
        """What the run recorded of the model's turns, in a line; "" when it recorded none."""
        n, ids, continued = self.model_turns, self.token_turns, self.continued_turns
        if n == 0:
            return ""
        if ids == 0:
            return f"model turns: {n}, text only (the endpoint returned no token ids)"
        kept = "all" if ids == n else f"{ids} of {n}"
        return (
            f"model turns: {n}, {kept} with token ids and logprobs; {continued} continued "
            "from the episode's ids (token input)"
        )

    def table(self) -> str:
        rows = [*self.tasks, self.overall] if len(self.tasks) > 1 else [*self.tasks]
        width = max([len("task"), *(len(r.task) for r in rows)])
        head = f"{'task':<{width}}  episodes  mean return  success  mean steps  errors"
        lines = [head, "-" * len(head)]
        for r in rows:
            lines.append(
                f"{r.task:<{width}}  {r.episodes:>8}  {r.mean_return:>11.3f}  "
                f"{r.success_rate:>6.0%}  {r.mean_steps:>10.1f}  {r.errors:>6}"
            )
        for seat, mean in self.overall.seat_returns.items():
            lines.append(f"seat {seat}: mean return {mean:.3f}")
        if self.tokens():
            lines.append(self.tokens())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.to_builtins(attrs.asdict(self))
        return data


class CollectOptions(TypedDict, total=False):
    """`collect`'s keyword options, as its callers pass them (see `collect`)."""

    out: Required[str | Path]
    env: str | None
    split: str | None
    tasks: int | None
    task_ids: Sequence[int] | None
    repeats: int
    episodes: int
    concurrency: int
    max_steps: int
    seed: int
    options: dict[str, Any] | None
    fmt: str
    progress: Callable[[Outcome], None] | None
    token: str | None
    planned: Progress | None
    fork: int
    fork_at: int


@attrs.frozen(kw_only=True, slots=True)
class CollectSettings:
    """A run's settings: `collect`'s options once checked, with their defaults."""

    out: Path = attrs.field(converter=Path)
    env: str | None = None
    split: str | None = None
    tasks: int | None = None
    task_ids: Sequence[int] | None = None
    repeats: int = 1
    episodes: int = 10
    concurrency: int = 8
    max_steps: int = 100
    seed: int = 0
    options: dict[str, Any] | None = None
    """Reset options for every episode."""
    fmt: str = "jsonl"
    """`jsonl` or `msgpack` (the recording format), or `parquet`: recorded as jsonl, and the
    run's episodes a dataset in `out/episodes.parquet` at the end."""
    progress: Callable[[Outcome], None] | None = None
    token: str | None = None
    planned: Progress | None = None
    fork: int = 1
    """Episodes played from each job's state after `fork_at` steps (`fork` copies of it,
    one request: a GRPO group); 1: no fork."""
    fork_at: int = 0
    """Steps the policy plays before the fork (0: from the reset)."""

    @property
    def recording(self) -> str:
        """The episodes' recording format (jsonl for `parquet`)."""
        return "jsonl" if self.fmt == "parquet" else self.fmt


FORMATS = ("jsonl", "msgpack", "parquet")
PARQUET = "episodes.parquet"
"""`fmt="parquet"`'s file, under `out`."""


def _summarize(task: str, outcomes: Sequence[Outcome]) -> TaskSummary:
    n = len(outcomes)
    return TaskSummary(
        task=task,
        episodes=n,
        mean_return=statistics.fmean(o.total for o in outcomes) if n else math.nan,
        success_rate=sum(o.success for o in outcomes) / n if n else math.nan,
        mean_steps=statistics.fmean(o.steps for o in outcomes) if n else math.nan,
        errors=sum(o.error is not None for o in outcomes),
        seat_returns={
            seat: statistics.fmean(o.returns.get(seat, 0.0) for o in outcomes)
            for seat in dict.fromkeys(seat for o in outcomes for seat in o.returns)
        },
    )


def plan(info: EnvInfo, run: CollectSettings) -> list[Job]:
    """The jobs of `run`: each chosen task (the first `run.tasks` of `run.split`, or the
    indices `run.task_ids`) `run.repeats` times, repeat r with seed `run.seed + r`; for an
    env without tasks, `run.episodes` episodes, episode i with seed `run.seed + i`."""
    if not info.tasks:
        if run.split is not None or run.tasks is not None or run.task_ids:
            raise ValueError(f"env {info.name!r} publishes no tasks: use --episodes")
        return [Job(i, None, None, i, run.seed + i) for i in range(run.episodes)]
    name = run.split if run.split is not None else next(iter(info.tasks))
    if name not in info.tasks:
        raise ValueError(
            f"env {info.name!r} has no task split {name!r}; splits: {', '.join(info.tasks)}"
        )
    count = info.tasks[name]
    if run.task_ids:
        bad = [i for i in run.task_ids if not 0 <= i < count]
        if bad:
            raise ValueError(f"task index {bad[0]} is out of range: split {name!r} has {count}")
        chosen = list(run.task_ids)
    else:
        chosen = list(range(count if run.tasks is None else min(run.tasks, count)))
    jobs: list[Job] = []
    for index in chosen:
        for r in range(run.repeats):
            jobs.append(Job(len(jobs), name, index, r, run.seed + r))
    return jobs


class _Tools:
    def __init__(self, client: AsyncEnvClient[Any, Any]) -> None:
        self.client = client

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.client.call_tool(name, arguments)


@attrs.define
class _Run:
    """One episode's play: its session, actor, recording, where it stands."""

    client: AsyncEnvClient[Any, Any]
    actor: Any
    writer: EpisodeWriter
    outcome: Outcome
    observation: Any
    first: Any = None
    """The episode's first observation (its reset's)."""
    done: bool = False
    truncated: bool = False
    reward: float | None = None
    steps: list[tuple[Any, Any, float | None, bool, bool, float]] = attrs.field(factory=list)
    """What was played, to copy into the recordings of the forks made from here."""


async def _play(run: _Run, limit: int, settings: CollectSettings) -> None:
    """The actor plays `run` for at most `limit` more steps, or to its end (done, truncated,
    the policy's None, `max_steps` refused actions in a row)."""
    outcome = run.outcome
    refusals = 0
    played = 0
    while not (run.done or run.truncated):
        if played >= limit or refusals >= settings.max_steps:
            outcome.reason = "max_steps"
            return
        action = await run.actor.act(run.observation)
        if isinstance(action, Decision):
            _decided(run, action)
            action = action.action
        if action is None:
            outcome.reason = "policy"
            return
        t0 = time.perf_counter()
        try:
            step = await run.client.step(action)
        except InvalidActionError as exc:
            refusals += 1
            await run.actor.refused(action, exc.message)
            continue
        refusals = 0
        played += 1
        outcome.steps += 1
        run.observation, run.reward = step.observation, step.reward
        run.done, run.truncated = step.done, step.truncated
        outcome.total += float(run.reward or 0.0)
        record = (action, run.observation, run.reward, run.done, run.truncated)
        run.writer.step(*record, time.perf_counter() - t0)
        run.steps.append((*record, time.perf_counter() - t0))
    outcome.reason = "done" if run.done else "truncated"


def _decided(run: _Run, decision: Decision) -> None:
    """Record how the actor chose (its messages, its model calls in token ids) and count it."""
    _count_decision(run.outcome, run.writer, decision)


def _count_decision(outcome: Outcome, writer: EpisodeWriter, decision: Decision) -> None:
    outcome.model_turns += sum(1 for m in decision.messages if m.get("role") == "assistant")
    outcome.token_turns += len(decision.turns)
    outcome.continued_turns += sum(turn.continued for turn in decision.turns)
    turns = [attrs.asdict(turn) for turn in decision.turns]
    writer.policy(list(decision.messages), turns)


def _ended(run: _Run) -> Outcome:
    outcome = run.outcome
    outcome.success = is_success(run.observation, run.done, run.truncated, run.reward)
    return outcome


async def _played(run: _Run, limit: int, settings: CollectSettings) -> Outcome:
    """`_play`, then the run's outcome (`_ended`)."""
    await _play(run, limit, settings)
    return _ended(run)


async def _episode(
    client: AsyncEnvClient[Any, Any],
    info: EnvInfo,
    policy: Policy | dict[str, Policy],
    job: Job,
    run: CollectSettings,
) -> list[Outcome]:
    """One job: an episode (or, with `run.fork`, its prefix and the forks made from it),
    recorded whatever ends it; its outcomes."""
    started = time.perf_counter()
    task_options: dict[str, Any] = {}
    if job.split is not None:
        task_options = {"split": job.split, "index": job.task_index}
    outcome = Outcome(job, "-")
    play: _Run | None = None
    writer: EpisodeWriter | None = None
    try:
        result = await client.reset(seed=job.seed, **(run.options or {}), **task_options)
        ref: TaskRef | None = result.task
        outcome.task = ref.id if ref is not None else "-"
        record = None
        if ref is not None and ref.split is not None and ref.index is not None:
            record = (await client.get_task(split=ref.split, index=ref.index)).task
        header = {
            "source": "collect",
            "env": info.name,
            "session": client.session_id,
            "episode_id": None,
            "seed": job.seed,
            "task": None if ref is None else msgspec.to_builtins(ref),
            "policy": policy_name(policy),
        }
        episode = Episode(info=info, task=ref, record=record, tools=_Tools(client))
        name = f"{job.index:05d}-{_safe(outcome.task)}-r{job.repeat}"
        if run.fork > 1:
            header["forks"], header["forked_at"] = run.fork, run.fork_at
        fmt = run.recording
        writer = EpisodeWriter(run.out / _safe(info.name) / f"{name}.{fmt}", fmt, header)
        outcome.path = str(writer.path)
        writer.reset(result.observation)
        if isinstance(policy, dict):  # a multi-agent env: an actor per seat
            seated = SeatedRun(client, info, actors(policy, episode), writer, {})
            seated.returns, seated.first = dict.fromkeys(policy, 0.0), result.observation
            if run.fork > 1:
                await _seated(seated, outcome, run.fork_at, run)
                if outcome.reason == "max_steps":  # neither over nor ended by a policy
                    outcome.reason = "forked"  # its file holds the prefix; the forks, the rest
                    base = {**header, "forked_at": outcome.steps}
                    return await _seat_forks(seated, outcome, episode, policy, base, (name, run))
                return [outcome]
            return [await _seated(seated, outcome, run.max_steps, run)]
        play = _Run(client, policy.actor(episode), writer, outcome, result.observation)
        play.first = result.observation
        play.done, play.truncated, play.reward = result.done, result.truncated, result.reward
        if run.fork > 1:
            await _play(play, run.fork_at, run)
            if not (play.done or play.truncated or outcome.reason == "policy"):
                outcome.reason = "forked"  # its file holds the prefix; the forks, the rest
                base = {**header, "forked_at": outcome.steps}
                return await _forks(play, episode, policy, base, (name, run))
        else:
            await _play(play, run.max_steps, run)
        return [_ended(play)]
    except Exception as exc:  # the policy's, the env's or the connection's: this episode's
        outcome.error = (
            str(exc)
            if isinstance(exc, PolicyError | ServerError)
            else (f"{type(exc).__qualname__}: {exc}")
        )
        outcome.reason = "error"
        return [outcome]
    finally:
        if play is not None:
            play.writer.end(outcome.reason or "error", outcome.error)
        elif writer is not None:
            writer.end(outcome.reason or "error", outcome.error)
        outcome.seconds = time.perf_counter() - started


async def _seated(seated: SeatedRun, outcome: Outcome, limit: int, run: CollectSettings) -> Outcome:
    """A multi-agent env's episode (ecotone/collect/seats.py), played to `limit` moves in all:
    its outcome, each seat's return in `returns`, their sum in `total`."""
    writer = seated.writer
    seated.on_decision = lambda decision: _count_decision(outcome, writer, decision)
    try:
        await play_seats(seated, limit, run.max_steps)
    finally:
        outcome.steps, outcome.reason = seated.moves, seated.reason
        outcome.returns = dict(seated.returns)
        outcome.total = sum(seated.returns.values())
    outcome.success = seated.done and not seated.truncated
    return outcome


def policy_name(policy: Policy | dict[str, Policy]) -> str:
    """A policy's name, or a policy per seat's (`seat=name, ...`; one name when every seat
    has the same policy: self-play)."""
    if not isinstance(policy, dict):
        return policy.name
    names = {p.name for p in policy.values()}
    if len(names) == 1 and len(set(map(id, policy.values()))) == 1:
        return f"{names.pop()} (every seat)"
    return ", ".join(f"{seat}={p.name}" for seat, p in policy.items())


async def _seat_forks(
    prefix: SeatedRun,
    first: Outcome,
    episode: Episode,
    policies: dict[str, Policy],
    header: dict[str, Any],
    where: Any,
) -> list[Outcome]:
    """`run.fork` copies of a multi-agent episode (one `fork` request; each copy a session
    of this run's owner, which moves every seat), each played to its end by an actor per
    seat (`Episode.fork` and `Episode.seat` say which), in turn, its seats' returns going on
    from the prefix's (`first`'s), and recorded with the prefix's moves in front of its
    own."""
    run = where[1]
    copies = await prefix.client.fork(run.fork)
    outcomes: list[Outcome] = []
    try:
        for i, copy in enumerate(copies):
            started = time.perf_counter()
            outcome = Outcome(first.job, first.task)
            writer = _fork_writer(outcome, copy, i, episode, (header, where, prefix.first))
            for move in prefix.played:
                writer.move(*move)
            own = attrs.evolve(episode, fork=i, tools=_Tools(copy))
            branch = prefix.fork(copy, actors(policies, own))
            branch.writer = writer
            play = _seated(branch, outcome, run.max_steps, run)
            outcomes.append(await _branch(play, outcome, writer, started))
    finally:
        for copy in copies:
            await copy.aclose()
    return outcomes


def _fork_writer(
    outcome: Outcome, copy: Any, i: int, episode: Episode, made: tuple[dict[str, Any], Any, Any]
) -> EpisodeWriter:
    """The recording of fork `i` of an episode (`copy`, its session), begun with the prefix's
    first observation; its path is `outcome`'s. `made`: the run's header, (name, settings),
    and that first observation."""
    header, (name, run), first = made
    path = run.out / _safe(episode.info.name) / f"{name}-f{i}.{run.recording}"
    writer = EpisodeWriter(path, run.recording, {**header, "fork": i, "session": copy.session_id})
    outcome.path = str(path)
    writer.reset(first)
    return writer


async def _branch(
    play: Awaitable[Outcome], outcome: Outcome, writer: EpisodeWriter, started: float
) -> Outcome:
    """A fork's copy played to its end (`play`): its outcome, or `outcome` with the error
    that stopped it; its recording ended either way."""
    try:
        return await play
    except Exception as exc:
        outcome.error, outcome.reason = f"{type(exc).__qualname__}: {exc}", "error"
        return outcome
    finally:
        writer.end(outcome.reason or "error", outcome.error)
        outcome.seconds = time.perf_counter() - started


async def _forks(
    prefix: _Run, episode: Episode, policy: Policy, header: dict[str, Any], where: Any
) -> list[Outcome]:
    """`run.fork` copies of the prefix's episode (one `fork` request), each played to its end
    by an actor of its own (`Episode.fork` says which), in turn, and recorded with the prefix
    copied in front of its own steps; their outcomes."""
    run = where[1]
    copies = await prefix.client.fork(run.fork)
    outcomes: list[Outcome] = []
    try:
        for i, copy in enumerate(copies):
            started = time.perf_counter()
            job = prefix.outcome.job
            outcome = Outcome(job, prefix.outcome.task, steps=prefix.outcome.steps)
            outcome.total = prefix.outcome.total
            writer = _fork_writer(outcome, copy, i, episode, (header, where, prefix.first))
            actor = policy.actor(attrs.evolve(episode, fork=i, tools=_Tools(copy)))
            branch = _Run(copy, actor, writer, outcome, prefix.observation, prefix.first)
            for step in prefix.steps:
                writer.step(*step)
            play = _played(branch, run.max_steps - prefix.outcome.steps, run)
            outcomes.append(await _branch(play, outcome, writer, started))
    finally:
        for copy in copies:
            await copy.aclose()
    return outcomes


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, every 10% otherwise."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        self.returns = 0.0
        self.successes = 0
        self._shown = -1

    def update(self, outcome: Outcome) -> None:
        self.done += 1
        self.returns += outcome.total
        self.successes += outcome.success
        decile = self.done * 10 // max(1, self.total)
        if not self.tty and decile == self._shown and self.done != self.total:
            return
        self._shown = decile
        width = 24
        filled = width * self.done // max(1, self.total)
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} episodes  "
            f"mean return {self.returns / self.done:.3f}  success {self.successes / self.done:.0%}"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


async def collect(
    url: str, policy: PolicyLike | Mapping[str, PolicyLike], **options: Unpack[CollectOptions]
) -> Summary:
    """Run `policy` over the env at `url` (see the module): trajectories under `out`, the
    summary returned (and written to `out/summary.json`).

    `policy` is anything `as_policy` takes (see ecotone/collect/protocol.py): a callable
    `observation -> action` (sync or async), `"MODULE:NAME"`, or a `Policy`. For a
    multi-agent env it plays every seat (self-play: each seat an actor of its own), or
    `policy` is a mapping from every seat to its policy (ecotone/collect/seats.py); each
    outcome then has a return per seat (`Outcome.returns`), the summary a mean per seat.

    Keyword options (`CollectOptions`; any other keyword is a TypeError that names it):

    - `out` (required): the folder for the trajectories and `summary.json`;
    - `env` (None: the server's default): which of the server's envs;
    - `split` (None: the env's first), `tasks` (None: all) or `task_ids` (None): the tasks
      played, the first `tasks` of `split` or those indices; `repeats` (1): plays of each,
      repeat r with seed `seed + r`; for an env without tasks, `episodes` (10) episodes;
    - `seed` (0): the first episode's seed;
    - `concurrency` (8): episodes in flight; `max_steps` (100): steps of an episode, and
      refused actions in a row, before it is cut off;
    - `options` (None): reset options for every episode (not collect's own: `seed`,
      `episode_id`, `task`, `split`, `index`);
    - `fmt` (`"jsonl"`): the recording format, `jsonl` or `msgpack`; or `parquet`: the
      episodes recorded as jsonl and, when the run ends, one row each in
      `out/episodes.parquet` (`ecotone.recording.write_parquet`; the `datasets` package,
      `pip install 'ecotone[datasets]'`, checked first);
    - `progress` (None): called with each episode's Outcome; `planned` (None): a Progress,
      told the number of episodes first;
    - `token` (None): the server's token;
    - `fork` (1) and `fork_at` (0): play each job's first `fork_at` steps once, then `fork`
      copies of its episode from there (one `fork` request; each an episode of the summary,
      recorded with the prefix copied in front, its actor told `Episode.fork`): rollouts
      that share a prefix, as a GRPO group does (docs/snapshots.md). For a multi-agent
      env `fork_at` counts moves, and each copy's seats are played by an actor each (its
      seat's policy), their returns going on from the prefix's."""
    run = from_keywords(CollectSettings, options, "collect")
    chosen: Policy | dict[str, Policy]
    if isinstance(policy, Mapping):
        chosen = {seat: as_policy(p) for seat, p in policy.items()}
    else:
        chosen = as_policy(policy)
    if run.concurrency < 1 or run.repeats < 1 or run.max_steps < 1 or run.fork < 1:
        raise ValueError("concurrency, repeats, max_steps and fork must be at least 1")
    if run.fmt not in FORMATS:
        raise ValueError(f"unknown format {run.fmt!r}; expected one of {', '.join(FORMATS)}")
    if run.fmt == "parquet":
        require_datasets()
    if not 0 <= run.fork_at < run.max_steps:
        raise ValueError(f"fork_at must be from 0 to max_steps - 1, not {run.fork_at}")
    reserved = sorted(RESERVED_OPTIONS & set(run.options or {}))
    if reserved:
        raise ValueError(
            f"reset options {', '.join(reserved)} are collect's own: use --split, "
            "--task-index, --seed"
        )
    started = time.perf_counter()
    env, progress = run.env, run.progress
    connection = await AsyncConnection.open_url(url, token=run.token)
    try:
        info = await connection.describe(env)
        if info.seats:  # a multi-agent env: an actor per seat
            chosen = seat_policies(chosen, list(info.seats))
        elif isinstance(chosen, dict):
            raise ValueError(f"a policy per seat, but env {info.name!r} has no seats")
        jobs = plan(info, run)
        if run.planned is not None:
            run.planned.total = len(jobs) * run.fork
        chats = list(chosen.values()) if isinstance(chosen, dict) else [chosen]
        for chat in {id(p): p for p in chats if isinstance(p, ChatPolicy)}.values():
            probe = await connection.open(env)
            try:
                chat.env_tools = await probe.list_tools()
            except ServerError as exc:
                if exc.code != "unsupported":
                    raise
            finally:
                await probe.aclose()
        outcomes: list[Outcome] = []
        send, receive = trio.open_memory_channel[Job](len(jobs))
        for job in jobs:
            send.send_nowait(job)
        send.close()

        refused: list[str] = []

        async def worker() -> None:
            try:
                client = await connection.open(env)
            except Exception as exc:  # capacity, say: the other workers take its jobs
                refused.append(f"no session could be opened: {type(exc).__qualname__}: {exc}")
                return
            try:
                async for job in receive:
                    for outcome in await _episode(client, info, chosen, job, run):
                        outcomes.append(outcome)
                        if progress is not None:
                            progress(outcome)
            finally:
                await client.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(min(run.concurrency, len(jobs)) or 1):
                nursery.start_soon(worker)
        left = [job async for job in receive] if refused else []
        for job in left:  # no worker could open a session for these
            outcome = Outcome(job, "-", reason="error", error=refused[0])
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    finally:
        await connection.aclose()
    outcomes.sort(key=lambda o: o.job.index)
    by_task: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_task.setdefault(outcome.task, []).append(outcome)
    summary = Summary(
        env=info.name,
        policy=policy_name(chosen),
        episodes=len(outcomes),
        seconds=round(time.perf_counter() - started, 3),
        tasks=tuple(_summarize(t, o) for t, o in by_task.items()),
        overall=_summarize("all", outcomes),
        out=str(run.out),
        model_turns=sum(o.model_turns for o in outcomes),
        token_turns=sum(o.token_turns for o in outcomes),
        continued_turns=sum(o.continued_turns for o in outcomes),
    )
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "summary.json").write_bytes(msgspec.json.encode(summary.to_dict()))
    if run.fmt == "parquet":
        paths = [Path(o.path) for o in outcomes if o.path is not None]
        await trio.to_thread.run_sync(_parquet, paths, run.out / PARQUET)
    return summary


def _parquet(paths: list[Path], out: Path) -> None:
    write_parquet([read_episode(p) for p in paths], out)


__all__ = [
    "CollectOptions",
    "CollectSettings",
    "Job",
    "Outcome",
    "Progress",
    "Summary",
    "TaskSummary",
    "collect",
    "plan",
]
