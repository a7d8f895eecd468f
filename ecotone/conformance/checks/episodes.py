"""Episodes: the first reset, step counts, episode ids, the end of an episode, refused actions."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from ecotone.client.sync import EnvClient
from ecotone.conformance.expect import expect, expect_refused, show
from ecotone.conformance.generate import generate, invalid_action
from ecotone.conformance.registry import check
from ecotone.conformance.report import CheckSkipped
from ecotone.conformance.runner import EPISODE_ID, Runner
from ecotone.specs import ErrorCode

_OPENENV_NO_RULE = "OpenEnv's protocol has no {} error: the rule cannot be checked there"


@check("reset_before_step", openenv_skip=_OPENENV_NO_RULE.format("reset_required"), seated=False)
def check_reset_before_step(r: Runner) -> str | None:
    """a step before the first reset is refused with reset_required; reset then works

    Raises:
        CheckFailed: the step before the first reset is answered with an observation, or with an
            error other than reset_required.
    """
    with r.session() as client:
        action = generate(r.info.action_schema, random.Random(r.seed))
        what = "step before the first reset"
        r.doing = what
        expect_refused(client, action, ErrorCode.RESET_REQUIRED, what, "a reset_required error")
        r.reset(client, seed=r.seed)
        try:
            r.step_sampled(client, random.Random(r.seed), "the first step after reset")
        except CheckSkipped:
            return "no action the env accepts could be drawn for the step after reset"
    return None


def _step_count_is(r: Runner, client: EnvClient[Any, Any], count: int, when: str) -> None:
    state = r.state(client)
    expect(
        "step_count" in state,
        f"state() {when}",
        "a step_count field",
        f"no step_count in {show(state)}",
    )
    seen = state["step_count"]
    expect(
        seen == count and isinstance(seen, int) and not isinstance(seen, bool),
        f"state().step_count {when}",
        str(count),
        show(seen),
    )


@check("step_count", seated=False)
def check_step_count(r: Runner) -> None:
    """state().step_count is 0 after reset, counts each step, and a reset (mid-episode too) sets it
    back to 0

    Raises:
        CheckFailed: state() has no step_count; it is not 0 after a reset (the first, at the end of
            an episode or in its middle), or is not the number of steps taken since.
        CheckSkipped: no action the env accepts could be drawn.
    """
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        _step_count_is(r, client, 0, "after reset")
        finished = False
        for i in range(1, r.settings.steps + 1):
            _, result = r.step_sampled(client, rng, f"step {i}")
            _step_count_is(r, client, i, f"after {i} step{'s' if i > 1 else ''}")
            if result.finished:
                finished = True
                break
        again = r.reset(client, seed=r.seed)
        when = "after a reset at the end of an episode" if finished else "after a mid-episode reset"
        _step_count_is(r, client, 0, when)
        if not again.finished:
            r.step_sampled(client, rng, "step 1 after the second reset")
            _step_count_is(r, client, 1, "after the second reset and 1 step")


def _episode_id(r: Runner, client: EnvClient[Any, Any], when: str) -> Any:
    state = r.state(client)
    expect(
        "episode_id" in state,
        f"state() {when}",
        "an episode_id field",
        f"no episode_id in {show(state)}",
    )
    return state["episode_id"]


@check("episode_id", seated=False)
def check_episode_id(r: Runner) -> None:
    """reset(episode_id=X) keeps X for the episode; each reset without one makes a new id

    Raises:
        CheckFailed: state() has no episode_id; it is not the id given to reset (after the reset, or
            after a step); a reset without one keeps the previous id or gives an empty one.
        CheckSkipped: no action the env accepts could be drawn.
    """
    with r.session() as client:
        given = r.reset(client, seed=r.seed, episode_id=EPISODE_ID)
        seen = _episode_id(r, client, f"after reset(episode_id={EPISODE_ID!r})")
        expect(
            seen == EPISODE_ID,
            "state().episode_id after reset with one",
            repr(EPISODE_ID),
            show(seen),
        )
        if not given.finished:
            r.step_sampled(client, random.Random(r.seed), "step 1")
            seen = _episode_id(r, client, "after a step")
            expect(
                seen == EPISODE_ID, "state().episode_id after a step", repr(EPISODE_ID), show(seen)
            )
        previous: Any = EPISODE_ID
        for n in ("first", "second"):
            r.reset(client, seed=r.seed)
            seen = _episode_id(r, client, f"after the {n} reset without one")
            expect(
                isinstance(seen, str) and seen and seen != previous,
                f"state().episode_id after the {n} reset without one",
                f"a new id (a non-empty string other than {show(previous)})",
                show(seen),
            )
            previous = seen


@check("step_after_done", openenv_skip=_OPENENV_NO_RULE.format("episode_done"), seated=False)
def check_step_after_done(r: Runner) -> str:
    """once an episode is done or truncated, steps are refused with episode_done until reset

    Raises:
        CheckFailed: a step after the episode ended (tried twice) is not refused with episode_done,
            or the refused steps changed state().step_count.
        CheckSkipped: the episode did not end within `max_episode_steps`; no action the env accepts
            could be drawn.
    """
    budget = r.settings.max_episode_steps
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        played = r.play(client, rng, budget)
        last_action, last = played[-1]
        if not last.finished:
            raise CheckSkipped(
                f"the episode did not end within {budget} steps (max_episode_steps), with "
                f"actions {r.target.action_source}; pass reset options that end it "
                "(reset_options, --reset-options) or a larger budget"
            )
        ended = f"{'done' if last.done else 'truncated'} at step {len(played)}"
        before = r.state(client).get("step_count")
        for again in ("", "again "):
            what = f"step {again}after the episode ended ({ended})"
            r.doing = what
            expect_refused(
                client, last_action, ErrorCode.EPISODE_DONE, what, "an episode_done error"
            )
        after = r.state(client).get("step_count")
        expect(
            after == before, "state().step_count after the refused steps", show(before), show(after)
        )
        r.reset(client, seed=r.seed)
        r.step_sampled(client, rng, "the first step after reset")
    return f"episode {ended}"


@check("invalid_action", seated=False)
def check_invalid_action(r: Runner) -> str:
    """an action with a wrong-typed required field (or an unknown field) is refused with
    invalid_action naming the field; the step does not count and the episode goes on

    Raises:
        CheckFailed: the action with a wrong-typed (or unknown) field is not refused with
            invalid_action, the error does not name the field (details.field), or the refused step
            changed state().step_count.
        CheckSkipped: actions are not JSON objects; the Action schema has no field a wrong value can
            be made for; no action the env accepts could be drawn.
    """
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        valid = msgspec.to_builtins(r.action(client, rng))
        if not isinstance(valid, dict):
            raise CheckSkipped(f"actions are not JSON objects ({show(valid)})")
        try:
            case = invalid_action(r.info.action_schema, valid)
        except LookupError as exc:
            raise CheckSkipped(str(exc)) from None
        before = r.state(client).get("step_count")
        what = f"step with {case.how}"
        expected = f"an invalid_action error naming `{case.field}`"
        r.doing = what
        refused = expect_refused(client, case.action, ErrorCode.INVALID_ACTION, what, expected)
        field = str(refused.details.get("field", ""))
        expect(field == case.field, what, expected, f"details.field {field!r}")
        after = r.state(client).get("step_count")
        expect(
            after == before,
            "state().step_count after the refused action",
            show(before),
            show(after),
        )
        r.step_sampled(client, rng, "a valid step after the refused one")
    return case.how
