"""Snapshots: after a restore, and in every fork, the same actions give what they gave the
first time, through the end of the episode."""

from __future__ import annotations

import contextlib
import random
from typing import Any

from ecotone.client.errors import EcotoneError, ServerError
from ecotone.conformance.expect import (
    difference,
    expect,
    same_trajectory,
    show,
    without_episode_id,
)
from ecotone.conformance.registry import check
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import Runner


def _observations(r: Runner, client: Any, actions: list[Any], label: str) -> list[Any]:
    seen = []
    for i, action in enumerate(actions, 1):
        try:
            seen.append(r.step(client, action, f"{label}, step {i} after the snapshot").observation)
        except ServerError as exc:
            seen.append({"error": exc.code, "message": exc.message})
            break
    return seen


@check(
    "snapshots",
    needs=(
        "seeded_determinism",
        "concurrent_sessions",
        "observation_schema",
        "state_schema",
        "step_count",
        "episode_id",
    ),
    openenv_skip="OpenEnv's protocol has no snapshots",
    seated=False,
)
def check_snapshots(r: Runner) -> str:
    """after restoring a snapshot, and in each of two forks, the same actions give the same
    observations, rewards and flags as they first did, through the end of the episode; each
    fork runs an episode of its own id

    Raises:
        CheckFailed: a restored or forked episode's observation, its resumed step count or
            last observation, or its end state differs from the original's; or two episodes
            share an id.
        CheckSkipped: the env cannot be saved (it says why), or no action it accepts could
            be drawn.
    """
    with r.session() as client:
        before, snap = _save(r, client)
        state_then = without_episode_id(r.state(client))
        played = r.play(client, random.Random(r.seed + 11), r.settings.max_episode_steps)
        actions = [action for action, _ in played]
        original = [result.observation for _, result in played]
        end = without_episode_id(r.state(client))
        labels = [
            f"observation after step {i} (action {show(a, 80)})" for i, a in enumerate(actions, 1)
        ]
        try:
            _restored(r, client, snap, before, state_then)
            again = _observations(r, client, actions, "restored")
            same_trajectory(original, again, labels, "the same actions after restore()")
            r.doing = f"restore({snap.id!r}), then fork(2)"
            client.restore(snap)
            forks = client.fork(2)
            try:
                ids = {r.state(client).get("episode_id")}
                for n, copy in enumerate(forks, 1):
                    fork_id = r.state(copy).get("episode_id")
                    expect(fork_id not in ids, f"fork {n}'s episode id", "a new id", show(fork_id))
                    ids.add(fork_id)
                    seen = _observations(r, copy, actions, f"fork {n}")
                    same_trajectory(original, seen, labels, f"the same actions in fork {n} of 2")
                    finish = without_episode_id(r.state(copy))
                    want, got = difference(end, finish)
                    expect(end == finish, f"fork {n}'s state() at the end", show(want), show(got))
            finally:
                _close(forks)
        finally:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.drop_snapshot(snap)
    return f"{len(actions)} steps after the snapshot, replayed after a restore and in 2 forks"


def _save(r: Runner, client: Any) -> tuple[list[Any], Any]:
    """A few steps of a seeded episode, then its snapshot: the steps and the snapshot."""
    rng = random.Random(r.seed + 7)
    r.reset(client, seed=r.seed)
    before = r.play(client, rng, max(1, r.settings.steps // 2))
    if before and before[-1][1].finished:  # a very short episode: save it where it starts
        r.reset(client, seed=r.seed)
        before = []
    r.doing = "snapshot()"
    try:
        return before, client.snapshot()
    except ServerError as exc:
        if exc.code == "unsupported":
            raise CheckSkipped(exc.message) from exc
        raise


def _restored(r: Runner, client: Any, snap: Any, before: list[Any], state_then: Any) -> None:
    """A restore reports where the saved episode stood, and puts its state back."""
    r.doing = f"restore({snap.id!r})"
    resumed = client.restore(snap)
    steps = str(len(before))
    expect(
        resumed.step_count == len(before),
        "the step count a restore reports",
        steps,
        str(resumed.step_count),
    )
    if before:
        want, got = difference(before[-1][1].observation, resumed.result.observation)
        expect(want == got, "the last observation a restore hands back", show(want), show(got))
    now = without_episode_id(r.state(client))
    expect(now == state_then, "state() right after the restore", show(state_then), show(now))


def _close(clients: list[Any]) -> None:
    for each in clients:
        with contextlib.suppress(EcotoneError, TimeoutError):
            each.close()
