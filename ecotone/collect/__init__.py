"""`ecotone collect`: run a policy over an env's tasks and keep the trajectories.

    summary = trio.run(functools.partial(
        ecotone.collect.collect, "ws://127.0.0.1:8000", ecotone.collect.load_policy("p:act"),
        out="runs/eval", split="test", repeats=4, concurrency=16))
    print(summary.table())

A policy is a Python callable (`load_policy("MODULE:NAME")`, `CallablePolicy(fn)`) or a
model behind an OpenAI-compatible chat endpoint (`ChatPolicy(base_url, model)`). See
`ecotone.collect.runner` for what a run does, and docs/llm-training.md.
"""

from ecotone.collect.policies import CallablePolicy, ChatPolicy, Policy, PolicyError, load_policy
from ecotone.collect.runner import Outcome, Progress, Summary, TaskSummary, collect, plan

__all__ = [
    "CallablePolicy",
    "ChatPolicy",
    "Outcome",
    "Policy",
    "PolicyError",
    "Progress",
    "Summary",
    "TaskSummary",
    "collect",
    "load_policy",
    "plan",
]
