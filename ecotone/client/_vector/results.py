"""What a call returns: the outcomes and bulk rows of a call as Gymnasium's arrays and
batched infos, and what `recv` takes of the ready results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ecotone.client._vector.batching import add_info, metadata_of
from ecotone.client._vector.ledger import Ledger
from ecotone.client._vector.subenvs import Rows, StepBatch, SubOutcome, Tally, Verb


class Results(Ledger):
    """A complete call's result in Gymnasium's shape: the tally's bulk rows with its outcomes
    laid over them (a row from `_row`, infos from `_info`), the error policy applied."""

    def _info(self, outcome: SubOutcome) -> dict[str, Any]:
        info: dict[str, Any]
        step, reset, failure = outcome.step, outcome.reset, outcome.failure
        if step is not None:
            info = metadata_of(step)
            if reset is not None:  # same_step: the episode ended and the next one began
                info = {"final_obs": step.observation, "final_info": info, **metadata_of(reset)}
        elif reset is not None:
            info = metadata_of(reset)
            if failure is not None and outcome.kind is Verb.STEP and outcome.action is not None:
                # same_step after a lost episode: the last good observation is its final one
                info = {"final_obs": outcome.before, "final_info": {}, **info}
        else:
            info = {}
        if failure is not None:
            info.update(failure.info())
        return info

    def _row(self, outcome: SubOutcome) -> tuple[Any, float, bool, bool]:
        """(observation, reward, terminated, truncated) of one sub-env's outcome."""
        step, reset, failure = outcome.step, outcome.reset, outcome.failure
        if step is not None:
            obs = reset.observation if reset is not None else step.observation
            return obs, float(step.reward or 0.0), step.done, step.truncated
        lost = failure is not None and failure.ends_episode and outcome.kind is Verb.STEP
        if outcome.kind is Verb.STEP and outcome.action is None and failure is not None:
            lost = True  # an autoreset that failed: still no episode
        if reset is not None:
            return reset.observation, 0.0, False, lost
        return outcome.before, 0.0, False, lost

    def step_result(
        self, outcomes: Sequence[SubOutcome], n: int
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        observations: list[Any] = []
        rewards: list[float] = []
        terminated: list[bool] = []
        truncated: list[bool] = []
        infos: dict[str, Any] = {}
        for j, outcome in enumerate(outcomes):
            step = outcome.step
            if step is not None and outcome.reset is None and outcome.failure is None:
                # the hot path: an ordinary step
                obs = step.observation
                observations.append(obs)
                rewards.append(step.reward or 0.0)
                terminated.append(step.done)
                truncated.append(step.truncated)
                meta = obs.get("metadata") if type(obs) is dict else getattr(obs, "metadata", None)
                if meta:
                    add_info(infos, dict(meta), j, n)
                continue
            obs, reward, term, trunc = self._row(outcome)
            observations.append(obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
            info = self._info(outcome)
            if info:
                add_info(infos, info, j, n)
        return (
            observations,
            np.array(rewards, dtype=np.float64),
            np.array(terminated, dtype=np.bool_),
            np.array(truncated, dtype=np.bool_),
            infos,
        )

    def step_all_result(
        self, tally: Tally
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The result of a batched step of every sub-env (`plan_step(actions, self.subs,
        tally)`), the error policy applied: the bulk rows, with the outcomes laid over them
        (an outcome's row is `_row` and its info `_info`, as in `step_result`)."""
        n = self.num_envs
        outcomes = tally.outcomes
        rows = tally.rows
        if len(rows) == 1 and not outcomes and rows[0].subs == self.subs:
            # the hot path: one step_many of every sub-env, in order, all ordinary steps
            row = rows[0]
            infos: dict[str, Any] = {}
            if row.metadata is not None:
                for j, meta in enumerate(row.metadata):
                    if meta:
                        add_info(infos, dict(meta), j, n)
            return row.observations, row.rewards, row.terminated, row.truncated, infos
        out: list[Any] = [
            [None] * n,
            np.empty(n, dtype=np.float64),
            np.empty(n, dtype=np.bool_),
            np.empty(n, dtype=np.bool_),
            {},
        ]
        if not outcomes and self._lay_columns(rows, out):
            return self._with_infos(out)
        out[1].fill(0.0)
        out[2].fill(False)
        out[3].fill(False)
        self._tally_rows(tally, None, out)  # each sub-env at its own index
        return self.check(outcomes.values(), self._with_infos(out))

    def _lay_columns(self, rows: list[Rows], out: list[Any]) -> bool:
        """Lay the rows of a step taken in bulk on every link (each row a link's sub-envs,
        in order, at a stride of the vector's indices: round robin) into `out` =
        [observations, rewards, terminated, truncated, infos by index], a slice assignment
        per column and row. Returns False, having laid nothing, when the rows are not that."""
        if len(rows) != sum(1 for link in self.links if link.members):
            return False
        for row in rows:
            link = row.subs[0].link if row.subs else None
            if link is None or row.subs is not link.members or link.stride is None:
                return False
        observations, rewards, terminated, truncated, info_of = out
        for row in rows:
            link = row.subs[0].link
            span = link.stride
            assert span is not None
            observations[span] = row.observations
            rewards[span] = row.rewards
            terminated[span] = row.terminated
            truncated[span] = row.truncated
            if row.metadata is not None:
                for j, meta in zip(link.positions, row.metadata, strict=True):
                    if meta:
                        info_of[j] = dict(meta)
        return True

    def _with_infos(
        self, out: list[Any]
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """`out`'s columns, its infos by index batched as Gymnasium's."""
        observations, rewards, terminated, truncated, info_of = out
        infos: dict[str, Any] = {}
        for i in sorted(info_of):  # in sub-env order: the first value of a key sets its dtype
            add_info(infos, info_of[i], i, self.num_envs)
        return observations, rewards, terminated, truncated, infos

    def _tally_rows(self, tally: Tally, position: dict[int, int] | None, out: list[Any]) -> None:
        """Lay `tally`'s rows and outcomes into `out` = [observations, rewards, terminated,
        truncated, infos by position] at the positions of their sub-envs (`position[index]`;
        None: at their own indexes)."""
        observations, rewards, terminated, truncated, info_of = out
        for row in tally.rows:
            if position is None:
                where = [sub.index for sub in row.subs]
            else:
                where = [position[sub.index] for sub in row.subs]
            for j, obs in zip(where, row.observations, strict=True):
                observations[j] = obs
            rewards[where] = row.rewards
            terminated[where] = row.terminated
            truncated[where] = row.truncated
            if row.metadata is not None:
                for j, meta in zip(where, row.metadata, strict=True):
                    if meta:
                        info_of[j] = dict(meta)
        for i, outcome in tally.outcomes.items():
            j = i if position is None else position[i]
            observations[j], rewards[j], terminated[j], truncated[j] = self._row(outcome)
            info = self._info(outcome)
            if info:
                info_of[j] = info
            else:
                info_of.pop(j, None)

    def sent_result(self, tally: Tally) -> StepBatch:
        """The `recv` result of a complete batched send, in the order its sub-envs were sent."""
        order = tally.order
        assert order is not None
        rows = tally.rows
        env_ids = np.asarray(order, dtype=np.int64)
        if len(rows) == 1 and not tally.outcomes and [s.index for s in rows[0].subs] == order:
            row = rows[0]  # the hot path: all ordinary steps
            infos: dict[str, Any] = {}
            if row.metadata is not None:
                for j, meta in enumerate(row.metadata):
                    if meta:
                        add_info(infos, dict(meta), j, len(order))
            return StepBatch(
                env_ids, row.observations, row.rewards, row.terminated, row.truncated, infos
            )
        return self.mixed_result([tally])

    def mixed_result(self, parts: Sequence[SubOutcome | Tally]) -> StepBatch:
        """The `recv` result of ready outcomes and batched sends' tallies, in their order."""
        order = [
            i
            for part in parts
            for i in (part.order or () if isinstance(part, Tally) else [part.index])
        ]
        n = len(order)
        position = {i: j for j, i in enumerate(order)}
        out: list[Any] = [
            [None] * n,
            np.zeros(n, dtype=np.float64),
            np.zeros(n, dtype=np.bool_),
            np.zeros(n, dtype=np.bool_),
            {},
        ]
        for part in parts:
            if isinstance(part, Tally):
                self._tally_rows(part, position, out)
                continue
            single = Tally()
            single.outcomes[part.index] = part
            self._tally_rows(single, position, out)
        observations, rewards, terminated, truncated, info_of = out
        infos: dict[str, Any] = {}
        for j in sorted(info_of):
            add_info(infos, info_of[j], j, n)
        env_ids = np.asarray(order, dtype=np.int64)
        return StepBatch(env_ids, observations, rewards, terminated, truncated, infos)

    def reset_result(self, tally: Tally, n: int) -> tuple[list[Any], dict[str, Any]]:
        observations = [sub.obs for sub in self.subs[:n]]
        infos: dict[str, Any] = {}
        for index, outcome in tally.outcomes.items():
            if outcome.reset is not None:
                observations[index] = outcome.reset.observation
            info = self._info(outcome)
            if info:
                add_info(infos, info, index, n)
        return observations, infos


def wanted(core: Results, min_ready: int | None) -> int:
    """How many results `recv(min_ready)` waits for (default: every sub-env in flight)."""
    in_flight = sum(1 for sub in core.subs if sub.busy is not None and sub.sent is None)
    sending = sum(len(tally.order or ()) for tally in core.sending)
    available = core.ready_count + sending + in_flight
    if available == 0:
        raise ValueError("recv: no sub-env has a step in flight (send first)")
    want = available if min_ready is None else min_ready
    if not 1 <= want <= available:
        raise ValueError(f"recv(min_ready={want}) but {available} sub-env(s) can answer")
    return want


def take_ready(core: Results, max_ready: int | None) -> StepBatch:
    """The results `recv` returns: the ready ones, oldest first, at most `max_ready` (a
    batched send's tally split if it must be)."""
    ready = core.ready
    limit = core.ready_count if max_ready is None else min(max_ready, core.ready_count)
    if ready and type(ready[0]) is Tally and len(ready[0].order or ()) == limit:
        tally = ready.popleft()  # the usual case of an EnvPool loop: one server's batch
        core.ready_count -= limit
        assert isinstance(tally, Tally) and tally.order is not None
        return core.check(tally.outcomes.values(), core.sent_result(tally))
    parts: list[SubOutcome | Tally] = []
    taken = 0
    while taken < limit:
        entry = ready[0]
        if type(entry) is Tally:
            assert entry.order is not None
            if taken + len(entry.order) > limit:
                entry, ready[0] = split_tally(entry, limit - taken)
            else:
                ready.popleft()
            assert entry.order is not None
            taken += len(entry.order)
        else:
            ready.popleft()
            taken += 1
        parts.append(entry)
    core.ready_count -= taken
    singles = [part for part in parts if isinstance(part, SubOutcome)]
    if len(singles) == len(parts):  # per-sub-env sends only
        return core.check(singles, batch_of(core, singles))
    outcomes = [
        o for part in parts for o in (part.outcomes.values() if isinstance(part, Tally) else [part])
    ]
    return core.check(outcomes, core.mixed_result(parts))


def split_tally(tally: Tally, k: int) -> tuple[Tally, Tally]:
    """A complete batched send's tally as two: its first `k` sub-envs (in send order), and the
    rest."""
    assert tally.order is not None
    first, rest = Tally(tally.order[:k]), Tally(tally.order[k:])
    chosen = set(first.order or ())
    for row in tally.rows:
        mask = np.fromiter((sub.index in chosen for sub in row.subs), dtype=np.bool_)
        for part, keep in ((first, mask), (rest, ~mask)):
            if keep.any():
                picks = np.flatnonzero(keep).tolist()
                part.rows.append(
                    Rows(
                        [row.subs[j] for j in picks],
                        [row.observations[j] for j in picks],
                        row.rewards[keep],
                        row.terminated[keep],
                        row.truncated[keep],
                        None if row.metadata is None else [row.metadata[j] for j in picks],
                    )
                )
    for index, outcome in tally.outcomes.items():
        (first if index in chosen else rest).outcomes[index] = outcome
    return first, rest


def batch_of(core: Results, outcomes: list[SubOutcome]) -> StepBatch:
    n = len(outcomes)
    observations, rewards, terminated, truncated, infos = core.step_result(outcomes, n)
    env_ids = np.fromiter((o.index for o in outcomes), dtype=np.int64, count=n)
    return StepBatch(env_ids, observations, rewards, terminated, truncated, infos)
