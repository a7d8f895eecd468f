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
and, beside the action an actor returns, what a trainer keeps of how it was chosen: an `act`
may return a `Decision`, the action with the conversation's new messages and the model's
calls as token ids (`Turn`: the prompt's ids, the generated ids, their log-probabilities),
which collect records beside the step.
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
        """The next action (a dict), or None to end the episode here; or a `Decision` holding
        it with what a trainer keeps of how it was chosen."""
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


@attrs.frozen(kw_only=True)
class Turn:
    """One call to the model, in token ids, as a trainer learns from it.

    The ids of an episode's turns, laid end to end (`prompt_ids` then `completion_ids`, turn
    after turn), are the one sequence the model saw and wrote, when every turn after the
    first is `continued`: its `prompt_ids` are then only what came between the last call's
    output and this call (the env's turn, as the endpoint's own tokenizer renders it),
    and the call was made with the whole sequence as token input. A turn that is not
    continued holds its whole prompt. The loss mask is 0 over `prompt_ids`, 1 over
    `completion_ids`."""

    prompt_ids: list[int]
    """The tokens before the model's own in this call: its whole prompt on a first call (or
    one not continued), else the env's tokens since the last call's output."""
    completion_ids: list[int]
    """The tokens the model generated (its end-of-turn token included, as the endpoint
    returns it)."""
    logprobs: list[float]
    """The log-probability of each generated token, as the endpoint sampled it."""
    continued: bool = False
    """The call's prompt was the previous call's prompt, its output and `prompt_ids`, sent
    as token ids (not text the endpoint tokenized again)."""


@attrs.frozen(kw_only=True)
class Decision:
    """What an actor's `act` may return instead of the bare action: the action and how it was
    chosen, recorded beside the step (`ecotone.recording` reads it back)."""

    action: Any
    """The action (a dict), or None to end the episode here."""
    messages: tuple[dict[str, Any], ...] = ()
    """The conversation's messages since the last decision (chat-completions form): the
    observation as the model read it, the model's answers and tool calls, tool results."""
    turns: tuple[Turn, ...] = ()
    """The model's calls since the last decision as token ids; empty when the endpoint
    returns none (text-only turns)."""


class PolicyError(RuntimeError):
    """The policy could not produce an action (a model endpoint that fails, a callable that
    raises): the episode ends with this error recorded."""


__all__ = ["Actor", "Decision", "Episode", "Policy", "PolicyError", "ToolCaller", "Turn"]
