"""What a policy is to `ecotone collect` and `ecotone.collect.collect`: one small protocol.

Anything `as_policy` (policies.py) takes is a policy:

- a plain callable, `fn(observation) -> action` or `async def`, the observation a dict and the
  action what the env's action type decodes (a dict); returning None ends the episode. Its
  signature may also name any of `task`, `task_id`, `info`, `step`, `refusal`, which it is
  then given (see `CallablePolicy`); a class is instantiated for each episode and called;
- `"MODULE:NAME"`, which names one (MODULE from the installed packages or the working
  directory);
- an object of the `Policy` protocol below (`CallablePolicy`, `ChatPolicy`, your own).

A `Policy` has a `name` (for the recording and the summary) and makes an `Actor` for each
episode from an `Episode`, the record of what the episode is: the env's description, its
task, the task's record, and the env's tools. The actor is asked for the next action after
each observation (`act`) and told of a refused one (`refused`).

The records are where what comes later goes, as fields rather than new parameters, so that
no policy written today breaks: which seat of a multi-agent env an actor plays, when collect
takes a policy per seat (`{seat: policy}`, each made a `Policy` by `as_policy`); which fork of
an episode restored from a snapshot it is, when collect forks each state a number of times;
and, beside the action an actor returns, what a trainer keeps of how it was chosen (token
ids, log-probabilities), an `act` that returns a record of the action with those fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ecotone.specs import EnvInfo, TaskRef


class ToolCaller(Protocol):
    """The env's own tools, for an actor that calls them (a chat model does)."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """The tool's answer; the env's error if it fails."""
        ...


@attrs.frozen(kw_only=True)
class Episode:
    """What an episode is, told to a policy when it starts (`Policy.actor`)."""

    info: EnvInfo
    """The env's description (its name, schemas, tasks)."""
    task: TaskRef | None
    """The task played (id, split, index), or None for an env without tasks."""
    record: Any
    """The task's record (the env's task type as a dict), or None."""
    tools: ToolCaller
    """The env's own tools, in this episode's session."""
    fork: int | None = None
    """Which of the copies of a forked episode this is (`collect`'s `fork`), or None."""


class Actor(Protocol):
    """One episode's decisions."""

    async def act(self, observation: Mapping[str, Any]) -> Any:
        """The next action (a dict), or None to end the episode here."""
        ...

    async def refused(self, action: Any, reason: str) -> None:
        """The env refused the last action (`invalid_action`): the episode goes on."""
        ...


class Policy(Protocol):
    """Who acts: a name, and an `Actor` for each episode."""

    name: str

    def actor(self, episode: Episode) -> Actor:
        """The actor for the episode that starts."""
        ...


class PolicyError(RuntimeError):
    """The policy could not produce an action (a model endpoint that fails, a callable that
    raises): the episode ends with this error recorded."""


__all__ = ["Actor", "Episode", "Policy", "PolicyError", "ToolCaller"]
