"""The policies `ecotone collect` runs (the protocol: protocol.py): a Python callable, or a
model behind an OpenAI-compatible chat-completions endpoint that calls the env's action (and
tools) as tools; and `as_policy`, which makes any of what counts as a policy a `Policy`.
"""

from __future__ import annotations

import inspect
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import anyio
import attrs

from ecotone.client.llm import (
    action_tool_name,
    identifier,
    observation_text,
    openai_tools,
)
from ecotone.collect.protocol import Actor, Episode, Policy, PolicyError, ToolCaller
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


SYSTEM_PROMPT = (
    "You are playing the environment {name!r}: {description}\n"
    "Act by calling the tool `{tool}`. Each call is one step; its result is what you "
    "observe next. The episode ends when the environment says so."
)


def _post(url: str, body: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode("utf-8", "replace")
        raise PolicyError(f"the model endpoint answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise PolicyError(f"the model endpoint is unreachable: {exc}") from None
    except json.JSONDecodeError as exc:
        raise PolicyError(f"the model endpoint's answer is not JSON: {exc}") from None


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

    def _observe(self, observation: Mapping[str, Any]) -> None:
        text = observation_text(observation, first=self.first)
        self.first = False
        if self.pending is None:
            self.messages.append({"role": "user", "content": text})
        else:
            self.messages.append({"role": "tool", "tool_call_id": self.pending, "content": text})
            self.pending = None

    async def _complete(self) -> dict[str, Any]:
        p, settings = self.policy, self.policy.settings
        body: dict[str, Any] = {
            "model": p.model,
            "messages": self.messages,
            "tools": self.specs,
            "tool_choice": "auto",
        }
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        headers = {"content-type": "application/json"}
        if settings.api_key:
            headers["authorization"] = f"Bearer {settings.api_key}"
        url = p.base_url.rstrip("/") + "/chat/completions"
        answer = await anyio.to_thread.run_sync(_post, url, body, headers, settings.timeout)
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise PolicyError(f"the model endpoint's answer has no message: {answer!r}") from None
        if not isinstance(message, dict):
            raise PolicyError(f"the model's message is not an object: {message!r}")
        return message

    async def act(self, observation: Mapping[str, Any]) -> Any:
        if self.just_refused:  # the observation is unchanged: the error was the answer
            self.just_refused = False
        else:
            self._observe(observation)
        for _ in range(self.policy.settings.max_tool_calls):
            message = await self._complete()
            calls = message.get("tool_calls") or []
            self.messages.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
                if calls
                else {"role": "assistant", "content": message.get("content") or ""}
            )
            if not calls:
                return None  # the model stopped calling tools: the episode ends here
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
                return action
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


class ChatPolicy:
    """A model behind an OpenAI-compatible `POST {base_url}/chat/completions` with tool
    calling: the env's action is a tool (its schema from `describe`), and so are the env's
    own tools; every observation goes back as the tool call's result (the first as the user
    message), a refused action as an error result. An answer without a tool call ends the
    episode."""

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
        - `timeout` (120.0): seconds for one request to the endpoint."""
        settings = from_keywords(ChatSettings, options, "ChatPolicy")
        if settings.api_key is None:
            settings = attrs.evolve(settings, api_key=os.environ.get("OPENAI_API_KEY"))
        self.base_url = base_url
        self.model = model
        self.settings = settings
        self.name = f"chat:{model}"
        self.env_tools: Sequence[ToolInfo] = ()

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
