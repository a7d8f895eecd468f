"""Token-in, token-out for `ChatPolicy`: each model call's token ids and log-probabilities, and
multi-turn prompts continued from the recorded ids instead of text tokenized again.

Against vLLM's OpenAI-compatible server (the field names are vLLM's):

1. The first call of an episode is a chat completion asking `return_token_ids` and
   `logprobs`; the answer's `prompt_token_ids` (top level) and its choice's `token_ids` and
   `logprobs.content[i].logprob` are the turn.
2. Each later call is a completion (`POST /v1/completions`) whose `prompt` is a list of ids:
   the episode's ids so far (the first prompt, every output, every env turn between) and
   the env's new turn. The env's turn is tokenized by the endpoint itself: `POST /tokenize`
   renders the conversation with its chat template, once through the model's last answer
   and once with the env's new messages and the generation prompt; the env's tokens are
   what the second rendering adds, with whatever the template puts after the model's
   end-of-turn token (a newline, in Qwen's). Its choice's `text` is the model's answer; its
   tool calls are read from it (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`,
   the Hermes form Qwen and most open models are served with; `tool_parser=` replaces it).

Where the endpoint cannot do 2 (no `/tokenize` or `/v1/completions`: 404, 405 or 501;
a template that renders the earlier conversation differently once more follows; an answer
that does not end where the template closes the model's turn), the call is a chat
completion again and its turn is marked as not continued. Where the endpoint returns no
ids at all, turns are text only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import attrs

from ecotone.collect.endpoint import Endpoint, EndpointError
from ecotone.collect.protocol import PolicyError, Turn

ToolParser = Callable[[str], tuple[str | None, list[dict[str, Any]]]]
"""`text -> (content, tool calls)`: a completion's text as a chat message's content (None if
none is left) and its tool calls, each `{"id", "type": "function", "function": {"name",
"arguments"}}` with `arguments` a JSON string, as chat completions give them."""

NOT_SERVED = frozenset({404, 405, 501})
"""HTTP statuses that say the endpoint has no such path."""

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def hermes_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The Hermes tool-call form (Qwen2.5, Qwen3, Hermes, many others): each
    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in `text` is a call; what is
    left is the content. A block that is not such JSON stays in the content."""
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return match.group(0)
        arguments = call.get("arguments", {})
        calls.append(
            {
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        return ""

    content = _HERMES.sub(take, text).strip()
    return content or None, calls


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(i) is int for i in value):
        return value
    return None


def _floats(value: Any) -> list[float] | None:
    if isinstance(value, list) and all(isinstance(x, int | float) for x in value):
        return [float(x) for x in value]
    return None


def chat_tokens(answer: Any) -> tuple[list[int], list[int], list[float]] | None:
    """A chat completion's `prompt_token_ids`, its first choice's `token_ids`, and the
    log-probability of each (`logprobs.content[i].logprob`); None unless all three are there
    and agree in length."""
    try:
        choice = answer["choices"][0]
        prompt = _ids(answer.get("prompt_token_ids"))
        output = _ids(choice.get("token_ids"))
        content = (choice.get("logprobs") or {}).get("content")
        logprobs = _floats([entry["logprob"] for entry in content or []])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    if prompt is None or output is None or logprobs is None or len(logprobs) != len(output):
        return None
    return prompt, output, logprobs


def _completion_tokens(choice: Any) -> tuple[str, list[int], list[float]]:
    """A completion choice's `text`, `token_ids` and `logprobs.token_logprobs`.

    Raises:
        PolicyError: any of them missing or of the wrong length.
    """
    try:
        text = choice.get("text")
        output = _ids(choice.get("token_ids"))
        logprobs = _floats((choice.get("logprobs") or {}).get("token_logprobs"))
    except AttributeError:
        output = logprobs = text = None
    if not isinstance(text, str) or output is None or logprobs is None:
        raise PolicyError(
            "the endpoint's completion has no `text`, `token_ids` and `logprobs.token_logprobs`"
            f": {str(choice)[:300]}"
        )
    if len(logprobs) != len(output):
        raise PolicyError(f"{len(output)} token ids but {len(logprobs)} log-probabilities")
    return text, output, logprobs


@attrs.define
class TokenSequence:
    """One episode's token sequence, and where the endpoint's rendering of it stands."""

    ids: list[int]
    """Every token so far: the first prompt, each output, each env turn between."""
    rendered: list[int]
    """The endpoint's rendering of the conversation before the model's last answer, with
    the generation prompt (the first call's `prompt_token_ids`, then /tokenize's)."""
    answer_at: int
    """Where the model's last answer is in the conversation's messages."""
    output: list[int]
    """The model's last output."""


@attrs.define
class Continuation:
    """How an episode's calls after the first are made from its token ids."""

    endpoint: Endpoint
    model: str
    tools: list[dict[str, Any]]
    """The request's tools, which the chat template renders."""
    sampling: dict[str, Any]
    """`temperature`, `max_tokens`: sent as they are set."""
    parse: ToolParser = hermes_tool_calls

    async def _render(self, messages: Sequence[dict[str, Any]], prompt: bool) -> tuple[Any, Any]:
        answer = await self.endpoint.call(
            self.endpoint.beside("/tokenize"),
            {
                "model": self.model,
                "messages": list(messages),
                "tools": self.tools,
                "add_generation_prompt": prompt,
                "add_special_tokens": False,
            },
        )
        if not isinstance(answer, dict):
            return None, None
        return _ids(answer.get("tokens")), answer.get("max_model_len")

    async def env_tokens(
        self, messages: Sequence[dict[str, Any]], seq: TokenSequence
    ) -> tuple[list[int], list[int], int | None] | None:
        """The env's turn since the model's last answer, in the endpoint's tokens; the new
        rendering (before the next answer); the model's context length if the endpoint
        says. None where the rendering does not extend the last one (see the module)."""
        got: dict[bool, tuple[Any, Any]] = {}
        failed: list[Exception] = []

        async def render(upto: int, prompt: bool) -> None:
            try:
                got[prompt] = await self._render(messages[:upto], prompt)
            except Exception as exc:  # raised below as itself, not in a group
                failed.append(exc)

        async with anyio.create_task_group() as both:  # the two renderings at once
            both.start_soon(render, seq.answer_at + 1, False)
            both.start_soon(render, len(messages), True)
        if failed:
            raise failed[0]
        (through, _), (rendered, max_len) = got[False], got[True]
        old = seq.rendered
        if through is None or rendered is None or through[: len(old)] != old:
            return None
        if rendered[: len(through)] != through or not seq.output:
            return None
        answer = through[len(old) :]  # the model's turn as the template renders it
        end = seq.output[-1]  # where the model closed its turn (its end-of-turn token)
        if end not in answer:
            return None
        after = len(answer) - answer[::-1].index(end)
        limit = max_len if type(max_len) is int else None
        return answer[after:] + rendered[len(through) :], rendered, limit

    async def next_turn(
        self, messages: Sequence[dict[str, Any]], seq: TokenSequence
    ) -> tuple[dict[str, Any], Turn] | None:
        """The model's next answer, asked with the episode's ids and the env's new turn as
        token input: the assistant message (tool calls read from its text) and its `Turn`;
        `seq` moves on. None where it cannot be made so (see the module)."""
        got = await self.env_tokens(messages, seq)
        if got is None:
            return None
        env, rendered, limit = got
        prompt = seq.ids + env
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "return_token_ids": True,
            "logprobs": 0,
            **self.sampling,
        }
        if body.get("max_tokens") is None:
            body.pop("max_tokens", None)
            if limit is not None:  # /v1/completions' default is 16 tokens, chat's the rest
                body["max_tokens"] = max(1, limit - len(prompt))
        answer = await self.endpoint.call(self.endpoint.under("/completions"), body)
        try:
            choice = answer["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise PolicyError(f"the endpoint's completion has no choice: {answer!r}") from None
        text, output, logprobs = _completion_tokens(choice)
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and echoed != prompt:
            raise PolicyError("the endpoint did not take the prompt's token ids as they were sent")
        content, calls = self.parse(text)
        seq.ids = prompt + output
        seq.rendered, seq.answer_at, seq.output = rendered, len(messages), output
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        turn = Turn(prompt_ids=env, completion_ids=output, logprobs=logprobs, continued=True)
        return message, turn


def not_served(exc: EndpointError) -> bool:
    """The endpoint has no such path (`/tokenize`, `/v1/completions`)."""
    return exc.status in NOT_SERVED


__all__ = [
    "Continuation",
    "TokenSequence",
    "ToolParser",
    "chat_tokens",
    "hermes_tool_calls",
    "not_served",
]
