"""The MCP face of the engine: the official SDK's low-level `Server`, whose tools are an env's.

Each MCP connection (the stdio client, a streamable-HTTP session) is one engine owner with one
env session, made when the agent first needs it and closed when the MCP connection ends. A
2026-07-28 client over HTTP has no sessions: each of its requests is a connection, so without a
shared session each call plays a one-step episode of its own. Its
tools are the env's own (`list_tools`/`call_tool`) and, where enabled, its actions
(`catalog.py`). Every call goes through the engine as a frame, so the session's ordering,
validation, deadlines and errors are the same as on every other transport.

Who resets: by default the agent cannot. Either the orchestrator opened the session over the
native protocol, shared it (`share`) and the MCP client presents the key (the
`X-Ecotone-Share` header on the streamable-HTTP requests): the agent then acts in that
episode while the orchestrator resets it and reads its rewards; or, with no key, the face
opens a session and resets it once, and the MCP connection plays that one episode. A `reset`
tool is offered only when the server enables it (`[mcp] reset_tool`).

Errors: a tool call the env refuses (a wrong action, an episode over, an env that raised or
timed out) is a tool result with `isError`, its message and details as text, so a model can
correct itself; an unknown tool is a JSON-RPC error (-32602), as the MCP spec says.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import anyio
import mcp.types as types
import msgspec
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from ecotone.kernel import Engine, Owner
from ecotone.kernel.config import McpConfig
from ecotone.server.admission import SHARE_HEADER
from ecotone.server.http11.asgi import PRINCIPAL
from ecotone.server.runner import Runner
from ecotone.specs import (
    CallTool,
    Close,
    Error,
    ErrorCode,
    JsonCodec,
    ListTools,
    ObservationFrame,
    Open,
    Opened,
    Reset,
    Response,
    Step,
    ToolResult,
    Tools,
)
from ecotone.specs.version import VERSION
from ecotone.transports.mcp.server import catalog

_ids = itertools.count(1)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _refusal(error: Error) -> types.CallToolResult:
    """A refused call as the agent sees it: what was wrong, and the details to fix it."""
    lines = [f"{error.code}: {error.message}"]
    if error.details:
        lines.append(json.dumps(error.details, ensure_ascii=False, default=str))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="\n".join(lines))], is_error=True
    )


class Seat:
    """One MCP connection's place at the engine: its owner and its env session."""

    def __init__(self, face: McpFace, principal: int | None = None) -> None:
        self.face = face
        self.principal = principal
        """The token its connection showed (the transport checked it)."""
        self.owner: Owner = face.engine.owner(authenticated=True, principal=principal)
        self.session: str | None = None
        self.guest = False
        self._lock = anyio.Lock()

    async def ask(self, frame: Any) -> Response:
        return await self.face.runner.ask(self.owner, self.face.codec, frame)

    async def env_session(self, share_key: str | None, token_ok: bool = True) -> str:
        """The session this connection acts in, made (or attached) on first need. A client
        that brought a share key but not the server's token may only attach."""
        async with self._lock:
            if self.owner.closed:  # the SDK ended the connection, yet a request came
                self.owner = self.face.engine.owner(authenticated=True, principal=self.principal)
                self.session, self.guest = None, False
            if self.session is not None:
                return self.session
            if share_key:
                attached = self.face.engine.attach(self.owner, share_key)
                if attached is None:
                    raise MCPError(
                        types.INVALID_REQUEST,
                        f"no open session has the share key in {SHARE_HEADER}: the "
                        "orchestrator's session was closed, or the key is wrong",
                    )
                self.session, self.guest = attached, True
                return attached
            if not token_ok:
                raise MCPError(
                    types.INVALID_REQUEST,
                    "this server requires its token (Authorization: Bearer) to make a "
                    f"session, or a share key ({SHARE_HEADER}) to act in one",
                )
            # Shielded: a request cancelled midway must not leave a session nobody holds.
            with anyio.CancelScope(shield=True):
                opened = await self.ask(Open(id=next(_ids)))
                if isinstance(opened, Error):
                    raise MCPError(types.INTERNAL_ERROR, f"{opened.code}: {opened.message}")
                assert isinstance(opened, Opened)
                made: str = opened.session
                reset = await self.ask(Reset(id=next(_ids), session=made))
                if isinstance(reset, Error):
                    await self.ask(Close(id=next(_ids), session=made))
                    raise MCPError(
                        types.INTERNAL_ERROR,
                        f"the env could not start an episode: {reset.code}: {reset.message}",
                    )
            self.session = made
            return made

    def lost(self, answer: Response) -> types.CallToolResult | None:
        """If `answer` says the session is gone (closed by its owner, or reclaimed as its
        lease ran out), forget it and say so; the next call makes a new one (or,
        for a guest, needs a new share key)."""
        if not (isinstance(answer, Error) and answer.code == ErrorCode.UNKNOWN_SESSION):
            return None
        self.session = None
        if self.guest:
            message = "the orchestrator's session is closed: this episode is over"
        else:
            message = (
                "this episode's session was closed (idle past the server's lease): "
                "the next call starts a new episode"
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=message)], is_error=True
        )

    def close(self) -> None:
        """The MCP connection ended: a session it made closes; a shared one stays."""
        self.face.runner.disconnect(self.owner, "mcp session ended")


class McpFace:
    """The MCP server for one engine's default env."""

    def __init__(
        self, runner: Runner, options: McpConfig | None = None, *, one_client: bool = False
    ) -> None:
        """`one_client`: every request comes from one client (stdio), so they share one
        seat whatever the protocol era (2026-07-28 makes each request a connection of its
        own); `close()` ends it."""
        self.runner = runner
        self.engine: Engine = runner.engine
        self.options = options or McpConfig()
        self.codec = JsonCodec()
        self.spec = self.engine.envs[self.engine.default_env]
        info = self.spec.info()
        actions = self.options.actions
        if actions is None:  # the env's choice, else: actions when it has no tools of its own
            actions = getattr(self.spec.factory, "mcp_actions", None)
        if actions is None:
            actions = not self.spec.has_tools
        reveal = self.options.reveal_reward
        self.actions = (
            {t.name: t for t in catalog.action_tools(info.action_schema, info.description)}
            if actions
            else {}
        )
        self.output_schema = catalog.output_schema(info.observation_schema, reveal)
        instructions = info.description
        if not reveal:
            instructions += " Rewards and the end of the episode are the orchestrator's."
        self.server: Server[Any] = Server(
            f"ecotone-{info.name}",
            version=VERSION,
            instructions=instructions.strip(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._only: Seat | None = Seat(self) if one_client else None

    # --- connections ---------------------------------------------------------------------------

    def _seat(self, ctx: Any) -> Seat:
        """The seat of the MCP connection `ctx` belongs to (made, with its cleanup, once)."""
        if self._only is not None:
            return self._only
        connection = _connection_of(ctx)
        seat = connection.state.get("ecotone.seat")
        if seat is None:
            seat = connection.state["ecotone.seat"] = Seat(self, self._principal(ctx))
            connection.exit_stack.callback(seat.close)
        assert isinstance(seat, Seat)
        return seat

    def close(self) -> None:
        """The one client is gone (`one_client`): its session closes."""
        if self._only is not None:
            self._only.close()

    def _principal(self, ctx: Any) -> int | None:
        """The number of the token the connection's request showed (None: stdio, none), as
        the front door's admission found it (`ecotone.server.http11.asgi.PRINCIPAL`)."""
        request = getattr(ctx, "request", None)
        if request is None or self.engine.token is None:
            return None
        principal = request.scope.get("state", {}).get(PRINCIPAL)
        return principal if isinstance(principal, int) else None

    def _token_ok(self, ctx: Any) -> bool:
        """Whether the request showed one of the server's tokens (stdio needs none; with a
        share key alone, the admission let it in to act in that session only)."""
        request = getattr(ctx, "request", None)
        if request is None or self.engine.token is None:
            return True
        return self._principal(ctx) is not None

    @staticmethod
    def _share_key(ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        if headers is None:
            return None
        key = headers.get(SHARE_HEADER)
        return str(key) if key else None

    # --- tools -------------------------------------------------------------------------------

    def _action_tool(self, tool: catalog.ActionTool) -> types.Tool:
        return types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            output_schema=self.output_schema,
        )

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [self._action_tool(t) for t in self.actions.values()]
        seat = self._seat(ctx)
        if self.options.reset_tool:
            tools.append(
                types.Tool(
                    name=catalog.RESET_TOOL,
                    description="Start a new episode (ends the current one).",
                    input_schema=catalog.RESET_SCHEMA,
                    output_schema=self.output_schema,
                )
            )
        if self.spec.has_tools:
            session = await seat.env_session(self._share_key(ctx), self._token_ok(ctx))
            listed = await seat.ask(ListTools(id=next(_ids), session=session))
            if seat.lost(listed) is not None:
                raise MCPError(types.INTERNAL_ERROR, "the session closed: ask again")
            if isinstance(listed, Error):
                raise MCPError(types.INTERNAL_ERROR, f"{listed.code}: {listed.message}")
            assert isinstance(listed, Tools)
            taken = {t.name for t in tools}
            tools += [
                types.Tool(
                    name=t.name,
                    description=t.description or None,
                    input_schema=t.input_schema or {"type": "object"},
                )
                for t in listed.tools
                if t.name not in taken
            ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        arguments: Mapping[str, Any] = params.arguments or {}
        seat = self._seat(ctx)
        action_tool = self.actions.get(name)
        if action_tool is None and not (
            (name == catalog.RESET_TOOL and self.options.reset_tool) or self.spec.has_tools
        ):
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
        session = await seat.env_session(self._share_key(ctx), self._token_ok(ctx))
        if action_tool is not None:
            raw = msgspec.Raw(msgspec.json.encode(action_tool.action(arguments)))
            answer = await seat.ask(Step(id=next(_ids), session=session, action=raw))
            return seat.lost(answer) or self._observation(answer)
        if name == catalog.RESET_TOOL and self.options.reset_tool:
            if seat.guest:
                raise MCPError(
                    types.INVALID_REQUEST, "this episode is the orchestrator's: it resets it"
                )
            seed = arguments.get("seed")
            if seed is not None and not isinstance(seed, int):
                wrong = Error(id=None, code=ErrorCode.INVALID_ARGUMENT, message="seed: an integer")
                return _refusal(wrong)
            answer = await seat.ask(Reset(id=next(_ids), session=session, seed=seed))
            return seat.lost(answer) or self._observation(answer)
        frame = CallTool(id=next(_ids), session=session, name=name, arguments=dict(arguments))
        answer = await seat.ask(frame)
        gone = seat.lost(answer)
        if gone is not None:
            return gone
        if isinstance(answer, Error):
            if answer.code == ErrorCode.INVALID_ARGUMENT and answer.details.get("tool") == name:
                # The env does not know the tool (LookupError): a protocol error for MCP,
                # unless the tool exists and its arguments were wrong (a result to fix).
                known = await self._env_tool_names(seat, session)
                if name not in known:
                    raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
            return _refusal(answer)
        assert isinstance(answer, ToolResult)
        value = self.codec.decode_as(answer.result, Any)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_text(value))],
            structured_content=value if isinstance(value, dict) else None,
        )

    async def _env_tool_names(self, seat: Seat, session: str) -> set[str]:
        listed = await seat.ask(ListTools(id=next(_ids), session=session))
        return {t.name for t in listed.tools} if isinstance(listed, Tools) else set()

    def _observation(self, answer: Response) -> types.CallToolResult:
        if isinstance(answer, Error):
            return _refusal(answer)
        assert isinstance(answer, ObservationFrame)
        observation = self.codec.decode_as(answer.observation, dict[str, Any])
        shown = catalog.shown(observation, self.options.reveal_reward)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_text(shown))],
            structured_content=shown,
        )


def _connection_of(ctx: Any) -> Any:
    """The SDK's per-connection object behind a request context: its `state` and
    `exit_stack` are where per-connection data and cleanup belong (so the SDK's docs say);
    mcp 2.3 reaches it only through the request's session."""
    connection = getattr(ctx.session, "_connection", None)
    if connection is None or not hasattr(connection, "exit_stack"):
        raise RuntimeError(
            "this version of the mcp package hides its connection state: ecotone needs mcp>=2.3,<3"
        )
    return connection
