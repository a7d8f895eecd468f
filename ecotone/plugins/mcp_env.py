"""Any MCP server as an env: `mcp+stdio:COMMAND ARGS` or `mcp+http://HOST:PORT/PATH`.

    ecotone serve "mcp+stdio:mcp-server-time --local-timezone UTC"
    ecotone serve "mcp+http://127.0.0.1:9000/mcp#timeout=10"

The action is a tool call, `{"tool": NAME, "arguments": {...}}`, checked against the tool's
input schema before it is sent (an unknown tool or a bad argument is `invalid_action` naming
the field, with the tools or the schema's reason in the details). The observation is the
tool's result: its text, its content blocks, its structured content and whether the tool
said it failed (`is_error`; a failing tool is an observation, not an env error: the agent
should see it). `list_tools`/`call_tool` pass through to the server as the env's own tools.
The first observation of an episode lists the tools.

Reward: zero, unless the name's `#reward=MODULE:FUNCTION` names a function
`(action, observation) -> float` (the server operator's choice; clients cannot pick it),
called after every step with the action and the observation as the env's own structs
(`action.tool`, `action.arguments`; `observation.text`, `.structured`, `.is_error`...).
MODULE is imported from the installed packages or the working directory.
Options after `#`: `reward`, `timeout` (seconds per tool call, default 30), `env` (names of
this process's environment variables a stdio server gets, comma-separated: by default only
the SDK's short list, PATH, HOME and the like, never the ecotone server's own secrets).

Each session runs its own MCP client (the official SDK, in a private event loop thread) and,
for stdio, its own server process, started on the first reset. A server that crashed or
stopped answering is an `env_error` for that step and every step after it (its state is
gone); the next reset starts it again. A JSON-RPC error the server answers is not a crash:
-32602 (bad params) is an `invalid_action`, any other an `env_error`, and the episode goes
on. The name is shown to clients: pass secrets in `env`, not on the command line.
Needs the `mcp` package (`pip install 'ecotone[mcp]'`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar
from urllib.parse import parse_qsl

import ecotone

STDIO = "mcp+stdio:"
HTTP = ("mcp+http://", "mcp+https://")
DEFAULT_TIMEOUT = 30.0
START_TIMEOUT = 30.0
"""Seconds a server has to start and answer `initialize` and `tools/list`."""


class McpEnvError(ValueError):
    """An `mcp+...` env name that cannot work (said before anything starts): a mistake in
    what was asked, which `ecotone serve` reports in one line."""


class McpToolAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    """Call one of the MCP server's tools with these arguments."""

    tool: str
    arguments: dict[str, Any] = {}


class McpToolObservation(ecotone.Observation, kw_only=True):
    tool: str = ""
    """The tool called (empty on reset)."""
    text: str = ""
    """The result's text content, joined; on reset, the tools the server offers."""
    content: list[dict[str, Any]] = []
    """The result's content blocks as the server sent them (text, image, resource...)."""
    structured: dict[str, Any] | None = None
    """The result's structured content, when the tool gives one."""
    is_error: bool = False
    """The tool said it failed (its text says why)."""
    tools: list[dict[str, Any]] = []
    """On reset: each tool's name, description and input schema."""


class McpToolState(ecotone.State, kw_only=True):
    server: str = ""
    tools: list[str] = []
    calls: int = 0
    starts: int = 0
    """How many times this session's server was started (1 + restarts)."""


def parse_name(name: str) -> tuple[str, dict[str, str]]:
    """`mcp+...:TARGET#k=v&...` -> (TARGET as after the prefix, options)."""
    target, _, fragment = name.partition("#")
    options = dict(parse_qsl(fragment, keep_blank_values=True)) if fragment else {}
    unknown = set(options) - {"reward", "timeout", "env"}
    if unknown:
        raise McpEnvError(f"{name!r}: unknown option(s) {sorted(unknown)}: reward, timeout, env")
    if target.startswith(STDIO):
        command = shlex.split(target[len(STDIO) :])
        if not command:
            raise McpEnvError(f"{name!r} names no command: mcp+stdio:COMMAND ARGS")
    elif not target.startswith(HTTP):
        raise McpEnvError(f"{name!r}: an MCP env is mcp+stdio:COMMAND or mcp+http://URL")
    return target, options


def _reward_function(spec: str | None) -> Callable[[Any, Any], float] | None:
    if not spec:
        return None
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise McpEnvError(f"reward={spec!r}: name it MODULE:FUNCTION")
    # MODULE from the installed packages or the working directory, as `--policy` and
    # `--rubric` find theirs (kernel/loading.py, which a plugin does not import).
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        fn: Any = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
    except ImportError as exc:
        raise McpEnvError(f"reward={spec!r}: cannot import {module!r}: {exc}") from None
    except AttributeError:
        raise McpEnvError(f"reward={spec!r}: {module!r} has no {attr!r}") from None
    if not callable(fn):
        raise McpEnvError(f"reward={spec!r} is not callable")
    return fn


@contextlib.asynccontextmanager
async def _client(target: str, pass_env: tuple[str, ...] = ()) -> AsyncIterator[Any]:
    """An initialized `ClientSession` to the server `target` names."""
    from mcp import ClientSession

    if target.startswith(STDIO):
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        command = shlex.split(target[len(STDIO) :])
        # The SDK's short list (PATH, HOME, ...), and only the variables the name passes on:
        # never this server's own secrets (its token, a provider's secrets).
        environ = get_default_environment()
        environ.update({k: os.environ[k] for k in pass_env if k in os.environ})
        params = StdioServerParameters(command=command[0], args=command[1:], env=environ)
        transport: Any = stdio_client(params)
    else:
        from mcp.client.streamable_http import streamable_http_client

        transport = streamable_http_client(target.removeprefix("mcp+"))
    import anyio

    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        with anyio.fail_after(START_TIMEOUT):
            await session.initialize()
        yield session


class _Link:
    """One MCP client connection, run in a private event loop thread (an anyio portal), so
    that the env's blocking methods can call it from any worker thread."""

    def __init__(self, target: str, pass_env: tuple[str, ...] = ()) -> None:
        from anyio.from_thread import start_blocking_portal

        self._stack = contextlib.ExitStack()
        self._at_exit: int | None = None  # the close registered at exit, once connected
        try:
            self.portal = self._stack.enter_context(start_blocking_portal("asyncio"))
            self.session = self._stack.enter_context(
                self.portal.wrap_async_context_manager(_client(target, pass_env))
            )
            listed = self.portal.call(self._list_tools)
        except BaseException:
            self.close()
            raise
        self.tools: dict[str, Any] = {t.name: t for t in listed}
        self.alive = True
        # One still open when the program ends (an env never closed: TRL closes none) is
        # closed then, while its portal's thread still runs (`ecotone.kernel.exit`).
        self._at_exit = ecotone.close_at_exit(self.close, weak=True)

    async def _list_tools(self) -> list[Any]:
        import anyio

        tools: list[Any] = []
        cursor = None
        with anyio.fail_after(START_TIMEOUT):
            while True:
                from mcp.types import PaginatedRequestParams

                params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
                page = await self.session.list_tools(params=params)
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return tools

    def call(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """The tool's result. A JSON-RPC error the server answered is raised as it is
        (`MCPError`) and the link goes on; a link that broke or timed out is dead."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        async def call() -> Any:
            return await self.session.call_tool(name, arguments, read_timeout_seconds=timeout)

        if not self.alive:
            raise ConnectionError("the MCP server is gone")
        try:
            return self.portal.call(call)
        except MCPError as exc:
            if exc.error.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                self.alive = False
            raise
        except Exception:
            self.alive = False  # crashed, or too slow: only a reset starts it again
            raise

    def close(self) -> None:
        self.alive = False
        ecotone.forget_at_exit(self._at_exit)
        with contextlib.suppress(Exception):
            self._stack.close()


def _block(block: Any) -> dict[str, Any]:
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


class McpServerEnv(ecotone.Environment[McpToolAction, McpToolObservation, McpToolState]):
    """An MCP server's tools as an env (see the module docstring). Subclassed per name."""

    target: ClassVar[str] = ""
    timeout: ClassVar[float] = DEFAULT_TIMEOUT
    reward_fn: ClassVar[Callable[[Any, Any], float] | None] = None
    pass_env: ClassVar[tuple[str, ...]] = ()
    snapshot_unsupported: ClassVar[str] = (
        "an MCP server's state lives in its own process, and MCP has no way to save or restore it"
    )

    def __init__(self) -> None:
        self._link: _Link | None = None
        self._lock = threading.Lock()
        self._state = McpToolState(server=self.target)

    def _live(self) -> _Link:
        """The link of this episode; a server that died mid-episode is not replaced here
        (its state is gone: only a reset starts a new one)."""
        link = self._link
        if link is None or not link.alive:
            raise RuntimeError(
                f"the MCP server {self.target!r} is gone (it crashed or timed out): reset to "
                "start it again"
            )
        return link

    def _connected(self) -> _Link:
        if self._link is None or not self._link.alive:
            if self._link is not None:
                self._link.close()
            try:
                self._link = _Link(self.target, self.pass_env)
            except BaseException as exc:
                self._link = None
                raise RuntimeError(f"the MCP server {self.target!r} did not start: {exc}") from exc
            self._state.starts += 1
        return self._link

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> McpToolObservation:
        link = self._connected()
        tools = [
            {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
            for t in link.tools.values()
        ]
        starts = self._state.starts
        self._state = McpToolState(
            episode_id=episode_id or uuid.uuid4().hex,
            server=self.target,
            tools=list(link.tools),
            starts=starts,
        )
        text = "\n".join(f"{t['name']}: {t['description']}".strip() for t in tools)
        return McpToolObservation(text=text, tools=tools)

    def step(self, action: McpToolAction) -> McpToolObservation:
        from mcp.shared.exceptions import MCPError

        link = self._live()
        tool = link.tools.get(action.tool)
        if tool is None:
            raise ecotone.InvalidAction(
                f"the server has no tool {action.tool!r}",
                field="tool",
                tools=sorted(link.tools),
            )
        _check_arguments(tool.input_schema, action.arguments)
        try:
            result = link.call(action.tool, action.arguments, self.timeout)
        except MCPError as exc:
            if link.alive and exc.error.code == -32602:  # the server judged the arguments
                raise ecotone.InvalidAction(
                    f"the server refused the arguments: {exc.error.message}", field="arguments"
                ) from exc
            if link.alive:
                raise RuntimeError(
                    f"the MCP server answered tool {action.tool!r} with error "
                    f"{exc.error.code}: {exc.error.message}"
                ) from exc
            raise RuntimeError(self._gone(action.tool, exc)) from exc
        except Exception as exc:
            raise RuntimeError(self._gone(action.tool, exc)) from exc
        self._state.step_count += 1
        self._state.calls += 1
        texts = [getattr(b, "text", "") for b in result.content if getattr(b, "type", "") == "text"]
        observation = McpToolObservation(
            tool=action.tool,
            text="\n".join(texts),
            content=[_block(b) for b in result.content],
            structured=result.structured_content,
            is_error=bool(result.is_error),
        )
        reward_fn = type(self).reward_fn
        observation.reward = float(reward_fn(action, observation)) if reward_fn else 0.0
        return observation

    def _gone(self, tool: str, exc: BaseException) -> str:
        return (
            f"the MCP server {self.target!r} failed on tool {tool!r} "
            f"({type(exc).__name__}: {exc}); the next reset starts it again"
        )

    def state(self) -> McpToolState:
        return self._state

    # The server's tools, as the env's own (a side channel: no step, no reward).

    def list_tools(self) -> list[ecotone.ToolInfo]:
        link = self._connected()
        return [
            ecotone.ToolInfo(
                name=t.name, description=t.description or "", input_schema=t.input_schema
            )
            for t in link.tools.values()
        ]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        link = self._link if self._link is not None else self._connected()
        if name not in link.tools:
            raise LookupError(f"unknown tool {name!r}; tools: {', '.join(sorted(link.tools))}")
        result = link.call(name, arguments, self.timeout)
        if result.structured_content is not None:
            return result.structured_content
        return "\n".join(getattr(b, "text", "") for b in result.content)

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None


def _check_arguments(schema: Mapping[str, Any], arguments: dict[str, Any]) -> None:
    """InvalidAction naming the first argument that does not fit the tool's schema."""
    import jsonschema  # type: ignore[import-untyped]

    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return  # the server's schema is broken: let the server judge
    if error is None:
        return
    path = ".".join(str(p) for p in error.absolute_path)
    raise ecotone.InvalidAction(
        f"arguments{'.' + path if path else ''}: {error.message}",
        field=f"arguments.{path}" if path else "arguments",
        schema=json.loads(json.dumps(error.schema, default=str)),
    )


_classes: dict[str, type[McpServerEnv]] = {}
_classes_lock = threading.Lock()


def env_class(name: str) -> type[McpServerEnv]:
    """The env class for an `mcp+...` name, made once per name."""
    with _classes_lock:
        cls = _classes.get(name)
        if cls is None:
            target, options = parse_name(name)
            try:
                timeout = float(options.get("timeout", DEFAULT_TIMEOUT))
            except ValueError as exc:
                raise McpEnvError(f"{name!r}: timeout must be a number of seconds") from exc
            reward = _reward_function(options.get("reward"))
            attributes: dict[str, Any] = {
                "target": target,
                "timeout": timeout,
                "reward_fn": None if reward is None else staticmethod(reward),
                "pass_env": tuple(v for v in options.get("env", "").split(",") if v),
                "name": name,
                "description": f"the tools of the MCP server {target}",
                # A reset may start the server: its start-up has START_TIMEOUT twice over.
                "call_timeout": max(timeout, 2 * START_TIMEOUT) + 15.0,
            }
            cls = _classes[name] = type("McpServerEnv", (McpServerEnv,), attributes)
        return cls


@ecotone.hookimpl
def ecotone_environment_patterns() -> dict[str, str]:
    return {
        "mcp+stdio:COMMAND [ARGS]": "the tools of an MCP server run as a command (needs mcp)",
        "mcp+http://HOST:PORT/PATH": "the tools of an MCP server over streamable HTTP",
    }


@ecotone.hookimpl
def ecotone_resolve_environment(name: str) -> type | None:
    if not name.startswith((STDIO, *HTTP)):
        return None
    return env_class(name)
