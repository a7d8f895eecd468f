"""The sans-IO heart of `VectorEnv` and `AsyncVectorEnv`: sub-envs, frames, autoreset, errors.

`VectorCore` decides what to send (a `step_many` per connection for a batched step, a `step`
per sub-env for `send`, `reset` / `open` / `close` frames) and what every answer means for the
sub-env it concerns, under the chosen autoreset mode and error policy. It owns no socket: the
blocking and the async vector envs are two small loops that move the frames it queues
(`take_outbox`) and hand back the answers (`on_response`), a dropped connection
(`on_link_lost`) or a passed deadline (`expire`).

A batched `step` is the hot path, so it is planned and answered per connection rather than per
sub-env: the items of a `step_many` are encoded in one pass, and an answer whose items are all
ordinary observations is taken in bulk (lists of observations and flags, no per-sub-env
`SubOutcome`). A sub-env gets its own `SubOutcome` only when something needs one: it is reset
instead of stepped, it failed, its episode ended under `same_step`, its request was lost or
timed out, or a recorder is on. The result of the call is the bulk rows, with those outcomes
laid over them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecotone.client._vector.answers import Answers
from ecotone.client._vector.batching import seeds_for
from ecotone.client._vector.links import Links
from ecotone.client._vector.planning import Planning
from ecotone.client._vector.results import Results
from ecotone.client._vector.subenvs import Sub


class VectorCore(Planning, Answers, Links, Results):
    """Sub-envs spread over links; every decision of the vector envs, none of their I/O.

    One class made of four parts that share the `Ledger`'s state and primitives and never
    call each other: so the hot paths' `self.` lookups and calls cost what they did in one
    class. No `__slots__`: a test replaces a method on an instance."""


def select_subs(core: VectorCore, env_ids: Any) -> list[Sub]:
    """The sub-envs `env_ids` names (all of them when None), in its order.

    Raises:
        IndexError: an index out of range.
        ValueError: an index named twice.
    """
    if env_ids is None:
        return list(core.subs)
    ids = [int(i) for i in np.asarray(env_ids).reshape(-1)]
    for i in ids:
        if not 0 <= i < core.num_envs:
            raise IndexError(f"sub-env index {i} out of range (num_envs={core.num_envs})")
    if len(set(ids)) != len(ids):
        raise ValueError(f"a sub-env index appears twice in {ids}")
    return [core.subs[i] for i in ids]


def reset_plan(
    core: VectorCore, seed: Any, options: dict[str, Any] | None
) -> tuple[list[Sub], list[int | None], dict[str, Any]]:
    """Which sub-envs a `reset(seed, options)` resets (`options["reset_mask"]`: only those),
    their seeds, and the reset options."""
    options = dict(options or {})
    seeds = seeds_for(seed, core.num_envs)
    mask = options.pop("reset_mask", None)
    merged = {**core.reset_options, **options}
    if mask is None:
        return list(core.subs), seeds, merged
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (core.num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({core.num_envs},)`, got {mask.shape}"
        )
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError("`options['reset_mask']` must contain at least one True value")
    chosen = [i for i in range(core.num_envs) if mask[i]]
    return [core.subs[i] for i in chosen], [seeds[i] for i in chosen], merged
