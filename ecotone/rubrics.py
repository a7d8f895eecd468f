"""Rubrics: composable reward functions attached to an env without touching its `step`.

    from ecotone.rubrics import Fn, Gate, Reward, Sequential, Trajectory, WeightedSum

Attach one as the env class's `rubric` attribute, or at serve time with
`ecotone serve ENV --rubric MODULE:NAME` (`rubric = "MODULE:NAME"` in the config). Every
step's observation then carries the rubric's score as `reward` and each named part in
`metadata["rewards"]`. The semantics are in `ecotone.kernel.rubrics`; a guide is in
docs/llm-training.md.
"""

from ecotone.kernel.rubrics import (
    Context,
    Fn,
    Gate,
    Reward,
    Rubric,
    RubricError,
    Sequential,
    Trajectory,
    Turn,
    WeightedSum,
    load_rubric,
)

__all__ = [
    "Context",
    "Fn",
    "Gate",
    "Reward",
    "Rubric",
    "RubricError",
    "Sequential",
    "Trajectory",
    "Turn",
    "WeightedSum",
    "load_rubric",
]
