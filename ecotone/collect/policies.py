"""The policies `ecotone collect` runs (the protocol: protocol.py): a Python callable, or a
model behind an OpenAI-compatible chat-completions endpoint that calls the env's action (and
tools) as tools; and `as_policy`, which makes any of what counts as a policy a `Policy`.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import attrs

from ecotone.client.llm import (
    action_tool_name,
    identifier,
    observation_text,
    openai_tools,
)
from ecotone.collect.endpoint import Endpoint, EndpointError
from ecotone.collect.protocol import (
    Actor,
    Decision,
    Episode,
    Policy,
    PolicyError,
    ToolCaller,
    Turn,
)
from ecotone.collect.tokens import (
    Continuation,
    TokenSequence,
    ToolParser,
    chat_tokens,
    hermes_tool_calls,
    not_served,
)
from ecotone.kernel.loading import load_named
from ecotone.specs import EnvInfo, ToolInfo
from ecotone.specs.keywords import from_keywords

PolicyLike = Policy | Callable[..., Any] | str
"""What `collect` takes as a policy: see `as_policy`."""


# --- a Python callable -----------------------------------------------------------------------


class _CallableActor:
    def __init__(self, fn: Callable[..., Any], extra: dict[str, Any]) -> None:
        self.fn = fn
        self.extra = extra
        self.step = 0
        self.last_refusal: str | None = None

    async def act(self, observation: Mapping[str, Any]) -> Any:
        kwargs = dict(self.extra)
        if "step" in self.extra:
            kwargs["step"] = self.step
        if "refusal" in self.extra:
            kwargs["refusal"] = self.last_refusal
        self.step += 1
        try:
            value = self.fn(dict(observation), **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise PolicyError(f"the policy raised {type(exc).__qualname__}: {exc}") from exc
        self.last_refusal = None
        return value

    async def refused(self, action: Any, reason: str) -> None:
        self.last_refusal = reason


class CallablePolicy:
    """`fn(observation, **context) -> action | None`, sync or async. The context holds what
    its signature names of: `task` (the task record, or None), `task_id`, `info` (the env's
    EnvInfo), `step` (0, 1, ...), `refusal` (why the last action was refused, or None)."""

    def __init__(
        self, fn: Callable[..., Any], name: str = "", *, per_episode: type | None = None
    ) -> None:
        """`per_episode`: a class instantiated for each episode, whose instances are called
        (a policy that keeps state within an episode); `fn` is then its `__call__`."""
        self.fn = fn
        self.per_episode = per_episode
        self.name = name or getattr(fn, "__qualname__", "policy")
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        any_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.wants = {
            k for k in ("task", "task_id", "info", "step", "refusal") if any_kw or k in params
        }

    def actor(self, episode: Episode) -> Actor:
        task = episode.task
        given = {"task": episode.record, "task_id": task.id if task else None, "info": episode.info}
        extra = {k: v for k, v in given.items() if k in self.wants}
        for k in ("step", "refusal"):
            if k in self.wants:
                extra[k] = None
        fn = self.fn if self.per_episode is None else self.per_episode()
        return _CallableActor(fn, extra)


def load_policy(spec: str) -> Policy:
    """The policy `MODULE:NAME` names (MODULE from the installed packages or the working
    directory): a `Policy` object as it is, a class instantiated once per episode and called,
    a function called. ValueError says what is wrong (a module that cannot be imported, no
    such name, a value that is no policy)."""
    value = load_named(spec, "policy")
    try:
        return as_policy(value, name=spec)
    except TypeError as exc:
        raise ValueError(f"policy {spec!r}: {exc}") from None


def as_policy(policy: PolicyLike, name: str = "") -> Policy:
    """`policy` as a `Policy` (see protocol.py): a `Policy` as it is; `"MODULE:NAME"` loaded
    (`load_policy`); a class instantiated once per episode and called; any other callable
    called, sync or async. `name` names it in the recording and the summary (default: the
    callable's qualified name, or MODULE:NAME). TypeError for anything else."""
    if isinstance(policy, str):
        return load_policy(policy)
    if not isinstance(policy, type) and callable(getattr(policy, "actor", None)):
        if not isinstance(getattr(policy, "name", None), str):
            raise TypeError(f"{policy!r} has an actor() but no name: str")
        return policy  # type: ignore[return-value]
    if isinstance(policy, type):
        return CallablePolicy(policy.__call__, name or policy.__qualname__, per_episode=policy)
    if callable(policy):
        return CallablePolicy(policy, name)
    raise TypeError(
        f"a policy is a callable (observation -> action), MODULE:NAME or a Policy, "
        f"not {type(policy).__name__}"
    )


# --- a model behind an OpenAI-compatible chat-completions endpoint ---------------------------


TOKEN_FIELDS = frozenset({"return_token_ids", "logprobs"})
"""What a chat request asks of vLLM for token ids; left out for an endpoint that refuses it."""

SYSTEM_PROMPT = (
    "You are playing the environment {name!r}: {description}\n"
    "Act by calling the tool `{tool}`. Each call is one step; its result is what you "
    "observe next. The episode ends when the environment says so."
)


class _ChatActor:
    def __init__(self, policy: ChatPolicy, info: EnvInfo, tools: ToolCaller, env_tools: Any):
        self.policy = policy
        self.info = info
        self.tools = tools
        self.tool_name = action_tool_name(info, policy.settings.action_tool)
        self.env_tools = {identifier(t.name): t.name for t in env_tools}
        self.specs = openai_tools(info, env_tools, policy.settings.action_tool)
        system = policy.settings.system or SYSTEM_PROMPT
        self.messages: list[dict[str, Any]] = [
            {
                "role": "system",
                "content": system.format(
                    name=info.name, description=info.description, tool=self.tool_name
                ),
            }
        ]
        self.pending: str | None = None
        """The id of the tool call whose result the next observation is."""
        self.first = True
        self.just_refused = False
        self.recorded = 0
        """The messages already handed over in a Decision."""
        self.turns: list[Turn] = []
        """The model's calls since the last Decision, in token ids."""
        self.sequence: TokenSequence | None = None
        """The episode's token ids, once the endpoint has returned some."""
        self.continuation = Continuation(
            policy.endpoint,
            policy.model,
            self.specs,
            policy.sampling,
            policy.settings.tool_parser or hermes_tool_calls,
        )
        self.calls = 0

    def _observe(self, observation: Mapping[str, Any]) -> None:
        text = observation_text(observation, first=self.first)
        self.first = False
        if self.pending is None:
            self.messages.append({"role": "user", "content": text})
        else:
            self.messages.append({"role": "tool", "tool_call_id": self.pending, "content": text})
            self.pending = None

    async def _chat(self, with_tokens: bool) -> Any:
        p, settings = self.policy, self.policy.settings
        body: dict[str, Any] = {
            "model": p.model,
            "messages": self.messages,
            "tools": self.specs,
            "tool_choice": "auto",
            **p.sampling,
        }
        if with_tokens:  # vLLM's names: the prompt's and the output's ids, and logprobs
            body["return_token_ids"] = True
            body["logprobs"] = True
        url = p.endpoint.under("/chat/completions")
        try:
            return await p.endpoint.call(url, body)
        except EndpointError as exc:
            if not with_tokens or settings.tokens is True or exc.status != 400:
                raise
        plain = {k: v for k, v in body.items() if k not in TOKEN_FIELDS}
        answer = await p.endpoint.call(url, plain)
        p.plain = True  # it refuses vLLM's fields and takes the request without them
        return answer

    async def _complete(self) -> dict[str, Any]:
        p, settings = self.policy, self.policy.settings
        if self.sequence is not None and p.token_input is not False:
            try:
                continued = await self.continuation.next_turn(self.messages, self.sequence)
            except EndpointError as exc:
                if not not_served(exc):
                    raise
                continued = None
                p.token_input = False  # no /tokenize or /v1/completions: chat from now on
            if continued is not None:
                message, turn = continued
                self.turns.append(turn)
                return message
        with_tokens = settings.tokens is not False and not p.plain
        answer = await self._chat(with_tokens)
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise PolicyError(f"the model endpoint's answer has no message: {answer!r}") from None
        if not isinstance(message, dict):
            raise PolicyError(f"the model's message is not an object: {message!r}")
        tokens = chat_tokens(answer) if with_tokens else None
        if tokens is None:
            if settings.tokens is True:
                raise PolicyError(
                    "the model endpoint returned no token ids (`prompt_token_ids`, "
                    "`token_ids`, `logprobs`) and tokens=True asks for them"
                )
            self.sequence = None
            return message
        prompt, output, logprobs = tokens
        self.turns.append(Turn(prompt_ids=prompt, completion_ids=output, logprobs=logprobs))
        self.sequence = TokenSequence(prompt + output, prompt, len(self.messages), output)
        return message

    def _decision(self, action: Any) -> Decision:
        messages = tuple(self.messages[self.recorded :])
        self.recorded = len(self.messages)
        turns, self.turns = tuple(self.turns), []
        return Decision(action=action, messages=messages, turns=turns)

    async def act(self, observation: Mapping[str, Any]) -> Any:
        if self.just_refused:  # the observation is unchanged: the error was the answer
            self.just_refused = False
        else:
            self._observe(observation)
        for _ in range(self.policy.settings.max_tool_calls):
            message = await self._complete()
            calls = []
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and not call.get("id"):
                    self.calls += 1
                    call = {"id": f"call_{self.calls}", **call}
                calls.append(call)
            self.messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
                if calls
                else {"role": "assistant", "content": message.get("content") or ""}
            )
            if not calls:
                return self._decision(None)  # the model stopped calling tools: the end
            action = None
            for call in calls:
                function = call.get("function") or {}
                name = str(function.get("name", ""))
                cid = str(call.get("id", ""))
                try:
                    raw = function.get("arguments") or "{}"
                    arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
                except (json.JSONDecodeError, TypeError, ValueError) as exc:
                    self._tool_reply(cid, f"error: the arguments are not a JSON object ({exc})")
                    continue
                if name == self.tool_name and action is None:
                    action, self.pending = arguments, cid
                elif name in self.env_tools:
                    try:
                        result = await self.tools.call_tool(self.env_tools[name], arguments)
                        shown = result if isinstance(result, str) else json.dumps(result)
                    except Exception as exc:
                        shown = f"error: {exc}"
                    self._tool_reply(cid, shown)
                else:
                    self._tool_reply(cid, f"error: no tool {name!r} (or one action per turn)")
            if action is not None:
                return self._decision(action)
        raise PolicyError(
            f"the model made {self.policy.settings.max_tool_calls} calls without acting"
        )

    def _tool_reply(self, call_id: str, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})

    async def refused(self, action: Any, reason: str) -> None:
        if self.pending is not None:
            self._tool_reply(self.pending, f"error: {reason}")
            self.pending = None
            self.just_refused = True


class ChatOptions(TypedDict, total=False):
    """`ChatPolicy`'s keyword options, as its callers pass them (see `ChatPolicy`)."""

    api_key: str | None
    temperature: float | None
    max_tokens: int | None
    system: str | None
    action_tool: str | None
    max_tool_calls: int
    timeout: float
    tokens: bool | None
    tool_parser: ToolParser | None


@attrs.frozen(kw_only=True, slots=True)
class ChatSettings:
    """`ChatPolicy`'s options once checked: `ChatOptions` as a record, with the defaults."""

    api_key: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    system: str | None = None
    action_tool: str | None = None
    max_tool_calls: int = 8
    timeout: float = 120.0
    tokens: bool | None = None
    tool_parser: ToolParser | None = None


class ChatPolicy:
    """A model behind an OpenAI-compatible `POST {base_url}/chat/completions` with tool
    calling: the env's action is a tool (its schema from `describe`), and so are the env's
    own tools; every observation goes back as the tool call's result (the first as the user
    message), a refused action as an error result. An answer without a tool call ends the
    episode. Each `act` returns a `Decision`: the action, the conversation's new messages,
    and the model's calls in token ids where the endpoint returns them (vLLM's; see
    `ecotone.collect.tokens`)."""

    def __init__(self, base_url: str, model: str, **options: Unpack[ChatOptions]) -> None:
        """`model`: the model's name in the endpoint's requests. Keyword options
        (`ChatOptions`; any other keyword is a TypeError that names it):

        - `api_key` (None: `$OPENAI_API_KEY`, read now): sent as `Authorization: Bearer`;
        - `temperature`, `max_tokens` (None: the endpoint's default): sent with each request;
        - `system` (None: `SYSTEM_PROMPT`): the system message, a `str.format` template of
          `name`, `description` and `tool` (the action's tool);
        - `action_tool` (None: the action's only field, else `step`): the action's tool name;
        - `max_tool_calls` (8): model calls in one turn without an action before the episode
          fails with a PolicyError;
        - `timeout` (120.0): seconds for one request to the endpoint;
        - `tokens` (None: where the endpoint gives them): ask for token ids and
          log-probabilities (vLLM's `return_token_ids`, `logprobs`) and continue each
          episode from its ids; an endpoint that refuses the fields (400) is asked without
          them from then on, and one that returns none gives text-only turns. True: an
          endpoint without them fails the episode; False: never ask (plain requests);
        - `tool_parser` (None: `hermes_tool_calls`): reads tool calls from the text of a
          call continued from token ids (`text -> (content, calls)`)."""
        settings = from_keywords(ChatSettings, options, "ChatPolicy")
        if settings.api_key is None:
            settings = attrs.evolve(settings, api_key=os.environ.get("OPENAI_API_KEY"))
        self.base_url = base_url
        self.model = model
        self.settings = settings
        self.name = f"chat:{model}"
        self.env_tools: Sequence[ToolInfo] = ()
        headers = {"content-type": "application/json"}
        if settings.api_key:
            headers["authorization"] = f"Bearer {settings.api_key}"
        self.endpoint = Endpoint(base_url, headers, settings.timeout)
        self.sampling = {
            k: v
            for k, v in (("temperature", settings.temperature), ("max_tokens", settings.max_tokens))
            if v is not None
        }
        self.plain = False
        """Learned: the endpoint refuses vLLM's token fields (asked without them since)."""
        self.token_input: bool | None = None
        """Learned: False once the endpoint turned out to have no `/tokenize` or
        `/v1/completions` (each call a chat completion since)."""

    def actor(self, episode: Episode) -> Actor:
        return _ChatActor(self, episode.info, episode.tools, self.env_tools)


__all__ = [
    "CallablePolicy",
    "ChatOptions",
    "ChatPolicy",
    "ChatSettings",
    "PolicyLike",
    "as_policy",
    "load_policy",
]
