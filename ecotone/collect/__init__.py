"""`ecotone collect`: run a policy over an env's tasks and keep the trajectories.

    def act(observation):                   # or async def; or "MODULE:NAME"
        return {"guess": "crane"}

    summary = trio.run(functools.partial(
        ecotone.collect.collect, "ws://127.0.0.1:8000", act,
        out="runs/eval", split="test", repeats=4, concurrency=16))
    print(summary.table())

A policy is a plain callable `observation -> action`, `"MODULE:NAME"` naming one, or an
object of the `Policy` protocol (`ecotone.collect.protocol`), such as a model behind an
OpenAI-compatible chat endpoint (`ChatPolicy(base_url, model)`); `as_policy` makes any of
them a `Policy`. See `ecotone.collect.runner` for what a run does, `ecotone.collect.tokens`
for the token ids a chat policy records (and how it continues an episode from them), and
docs/llm-training.md.
"""

from ecotone.collect.policies import (
    CallablePolicy,
    ChatPolicy,
    PolicyLike,
    as_policy,
    load_policy,
)
from ecotone.collect.protocol import Actor, Decision, Episode, Policy, PolicyError, Turn
from ecotone.collect.runner import Outcome, Progress, Summary, TaskSummary, collect, plan

__all__ = [
    "Actor",
    "CallablePolicy",
    "ChatPolicy",
    "Decision",
    "Episode",
    "Outcome",
    "Policy",
    "PolicyError",
    "PolicyLike",
    "Progress",
    "Summary",
    "TaskSummary",
    "Turn",
    "as_policy",
    "collect",
    "load_policy",
    "plan",
]
