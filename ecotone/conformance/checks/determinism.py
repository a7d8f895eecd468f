"""Seeds: the same seed and actions give the same observations, alone or beside another
session."""

from __future__ import annotations

import contextlib
import random

from ecotone.client.errors import EcotoneError
from ecotone.conformance.expect import difference, expect, same_trajectory, show, without_episode_id
from ecotone.conformance.registry import check
from ecotone.conformance.runner import Played, Runner


@check("seeded_determinism", seated=False)
def check_seeded_determinism(r: Runner) -> str:
    """the same seed gives the same first observation, and the same actions then give the same
    observations, on the same session and on a fresh one

    Raises:
        CheckFailed: a seed's episode replayed (on the same session, then on a fresh one) differs
            from the first play: its first observation, or the observation after a step.
        CheckSkipped: no action the env accepts could be drawn.
    """
    total = 0
    for seed in r.settings.seeds:
        with r.session() as client:
            first = r.reset(client, seed=seed)
            played = r.play(client, random.Random(seed), r.settings.steps)
            actions = [action for action, _ in played]
            original = [first.observation] + [result.observation for _, result in played]
            labels = [f"first observation of reset(seed={seed})"] + [
                f"observation after step {i} (action {show(a, 80)})"
                for i, a in enumerate(actions, 1)
            ]
            again = r.replay(client, seed, actions)
            same_trajectory(
                original, again, labels, f"seed {seed}, reset again on the same session"
            )
        with r.session() as fresh:
            seen = r.replay(fresh, seed, actions)
            same_trajectory(original, seen, labels, f"seed {seed}, on a fresh session")
        total += len(actions)
    return f"{len(r.settings.seeds)} seeds, {total} steps each replayed twice"


@check("concurrent_sessions", needs=("seeded_determinism",), seated=False)
def check_concurrent_sessions(r: Runner) -> str:
    """two sessions stepped in turn (different seeds and actions) each see what they would alone

    Raises:
        CheckFailed: a session stepped in turn with another saw an observation, or ended in a state,
            other than the same seed and actions give it alone.
        CheckSkipped: no action the env accepts could be drawn.
    """
    seeds = r.settings.seeds
    second = seeds[1] if len(seeds) > 1 else seeds[0] + 1
    runs: list[Played] = []
    try:
        for name, seed, salt in (("A", seeds[0], 1000), ("B", second, 2000)):
            runs.append(Played(name, r.open(), seed, random.Random(salt + seed)))
        for run in runs:
            run.observations.append(r.reset(run.client, seed=run.seed).observation)
        for i in range(1, r.settings.steps + 1):
            for run in runs:
                if not run.finished:
                    action, result = r.step_sampled(
                        run.client, run.rng, f"session {run.name} step {i}"
                    )
                    run.actions.append(action)
                    run.observations.append(result.observation)
                    run.finished = result.finished
        for run in runs:
            run.state = without_episode_id(r.state(run.client))
    finally:
        for run in runs:
            with contextlib.suppress(EcotoneError, TimeoutError):
                run.client.close()
    for run, other in zip(runs, reversed(runs), strict=True):
        context = (
            f"session {run.name} (seed {run.seed}) stepped in turn with session {other.name}, "
            "against the same actions alone"
        )
        labels = [f"first observation of reset(seed={run.seed})"] + [
            f"observation after step {i} (action {show(a, 80)})"
            for i, a in enumerate(run.actions, 1)
        ]
        with r.session() as alone:
            observations = r.replay(alone, run.seed, run.actions)
            state = without_episode_id(r.state(alone))
        same_trajectory(observations, run.observations, labels, context)
        want, got = difference(state, run.state)
        expect(state == run.state, f"{context}: state() at the end", show(want), show(got))
    steps = sum(len(run.actions) for run in runs)
    return f"{steps} interleaved steps"
