"""The env's checks (the contract of `ecotone/kernel/contract.py`), one module per area,
registered here in the order they run and are reported in.

    describe      describe(), and observations and states against its schemas
    episodes      the first reset, step counts, episode ids, episode ends, refused actions
    determinism   seeds, alone and beside another session
    closing       closing a session, twice, and its id after
    tasks         tasks listed, found and started
    hidden        what a task hides is in no id, listing or answer
    columns       step_columns against step_many
    snapshots     restores and forks replay as the original did
    seats         a multi-agent env's turns, views, seeded play and dropped seats

A check applies to single-agent envs, multi-agent ones, or both (`Check.seated`); `ecotone
validate` runs those that apply.
"""

from ecotone.conformance.checks.closing import check_close_idempotent, check_close_releases_session
from ecotone.conformance.checks.columns import check_step_columns, check_step_columns_malformed
from ecotone.conformance.checks.describe import (
    check_describe,
    check_observation_flags,
    check_observation_schema,
    check_state_schema,
)
from ecotone.conformance.checks.determinism import (
    check_concurrent_sessions,
    check_seeded_determinism,
)
from ecotone.conformance.checks.episodes import (
    check_episode_id,
    check_invalid_action,
    check_reset_before_step,
    check_step_after_done,
    check_step_count,
)
from ecotone.conformance.checks.hidden import check_hidden_task_fields
from ecotone.conformance.checks.seats import (
    check_seat_determinism,
    check_seat_loss,
    check_seat_turns,
    check_seat_views,
)
from ecotone.conformance.checks.snapshots import check_snapshots
from ecotone.conformance.checks.tasks import check_tasks
from ecotone.conformance.registry import CHECKS, register

ENV_CHECKS = (
    check_describe,
    check_reset_before_step,
    check_observation_flags,
    check_observation_schema,
    check_state_schema,
    check_step_count,
    check_episode_id,
    check_seeded_determinism,
    check_step_after_done,
    check_invalid_action,
    check_close_idempotent,
    check_close_releases_session,
    check_concurrent_sessions,
    check_tasks,
    check_hidden_task_fields,
    check_step_columns,
    check_step_columns_malformed,
    check_snapshots,
    check_seat_turns,
    check_seat_views,
    check_seat_determinism,
    check_seat_loss,
)
"""The env's checks in the order they run (`ecotone validate` prints them in it)."""

register(*ENV_CHECKS)

__all__ = ["CHECKS", "ENV_CHECKS"]
