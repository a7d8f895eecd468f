"""The conformance suite: checks an env author runs against their own env, in the spirit of
dm_env_rpc's compliance suites. The rules checked are those of `ecotone/kernel/contract.py`.

Three ways to run it, with the same checks and the same messages:

* `ecotone validate ENV [--reset-options JSON] [--json]` checks an installed env;
* `ecotone validate --url URL` checks whatever a running server serves: ws://, http://, tcp://,
  unix://... or an OpenEnv server through `openenv+http://` (checks of rules OpenEnv's
  protocol does not have are reported as skipped, with the reason);
* in your own test suite, one pytest test per check:

      from ecotone.conformance import ConformanceSuite

      class TestMyEnv(ConformanceSuite):
          env = "myenv"          # or the env class; or url = "ws://127.0.0.1:8000"
          reset_options = {"max_steps": 20}

and from Python: `ecotone.conformance.run("myenv").text()`.

Given an env (not a URL) the suite serves it on a kernel in this process, reached through the
in-process channel (`inproc://`): the same kernel, frames, codec and error answers a network
client gets, with no port or thread to manage. It also lets the suite reach the live env
instance behind a session, so that actions come from the env's own `sample_action(rng)` when it
has one (a remote env's actions are generated from its Action schema: `generate.py`) and so
that `close()` can be called a second time on the instance, as the contract allows. Transports
are not what an env author is testing; point `--url` at a server to include them.

The checks, in the order they run. The env's contract (`CHECKS`, `checks/`): describe,
reset_before_step, observation_flags, observation_schema, state_schema, step_count, episode_id,
seeded_determinism, step_after_done, invalid_action, close_idempotent, close_releases_session,
concurrent_sessions, tasks, hidden_task_fields (no value of a field a task hides is in its id
or in anything describe, list_tasks, get_task or a reset shows; in process, where the hidden
values are known), step_columns (where the server lists it: a `step_columns` of two sessions
answers what the `step_many` of the same items does), step_columns_malformed (and a
malformed one is one clear error that steps nothing). The protocol's rules, which every
transport must keep (`PROTOCOL_CHECKS`, `protocol.py`; run by default with `--url`, in process
with `--protocol`): pipelined_in_order, batch_names_session_twice, no_overlapping_calls,
close_waits_for_step, errors_without_id, unknown_and_foreign_sessions. Each fails with what
it looked at, what it expected and what it saw; a check that cannot apply (an episode that
does not end within the step budget, a rule OpenEnv lacks, a check that needs the `probe` env)
is skipped with the reason, never passed.
"""

from ecotone.conformance import protocol as _protocol  # noqa: F401  (registers its checks)
from ecotone.conformance.checks import CHECKS
from ecotone.conformance.generate import generate, invalid_action, wrong_value
from ecotone.conformance.registry import PROTOCOL_CHECKS, Check
from ecotone.conformance.report import CheckResult, Report, Status
from ecotone.conformance.runner import Runner, Settings
from ecotone.conformance.schema import SchemaError, validate
from ecotone.conformance.suite import ConformanceSuite, run
from ecotone.conformance.target import Target, TargetError, open_target

__all__ = [
    "CHECKS",
    "PROTOCOL_CHECKS",
    "Check",
    "CheckResult",
    "ConformanceSuite",
    "Report",
    "Runner",
    "SchemaError",
    "Settings",
    "Status",
    "Target",
    "TargetError",
    "generate",
    "invalid_action",
    "open_target",
    "run",
    "validate",
    "wrong_value",
]
