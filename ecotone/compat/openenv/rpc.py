"""OpenEnv's own JSON-RPC dialect, translated to ecotone frames: sans-IO but for `ask`.

This is not MCP, and MCP's SDK cannot speak it: OpenEnv's `POST /mcp` (without MCP's
streamable-HTTP headers) and its `/ws` `mcp` messages take `tools/list`, `tools/call` (its
result in OpenEnv's shape: `structured_content`, `is_error`), and `openenv/session/create`
and `openenv/session/close`, which exist only in OpenEnv; there is no `initialize`. MCP
itself is served by the official SDK (`ecotone.transports.mcp.server`).

`McpDialect` answers one JSON-RPC message at a time; every engine request goes through
`ask` (the caller's: a frame in, the answer frame out), so the session's ordering and rules
are the engine's.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec

from ecotone.compat.openenv.mapping import MCP_UNSUPPORTED, capacity_message
from ecotone.specs import (
    CallTool,
    Close,
    Closed,
    Error,
    ErrorCode,
    JsonCodec,
    ListTools,
    Open,
    Opened,
    Request,
    Response,
    ToolResult,
    Tools,
)
from ecotone.specs.codec import TOO_DEEP

log = logging.getLogger("ecotone.openenv")

Ask = Callable[[Request], Awaitable[Response]]
"""One engine request on behalf of the dialect's owner: the answer frame."""

_ids: Final = itertools.count(1)
_codec: Final = JsonCodec()


class _Rpc(msgspec.Struct, forbid_unknown_fields=True):
    jsonrpc: str
    method: str
    params: dict[str, Any] = {}
    id: int | str | None = None


def rpc_error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}


def rpc_result(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


class McpDialect:
    """OpenEnv's MCP methods over JSON-RPC: `tools/list`, `tools/call`,
    `openenv/session/create`, `openenv/session/close`. `own_session`: the session of the
    `/ws` connection the messages come on (its tools, and it cannot be closed this way);
    None over HTTP, where a call naming no session gets a temporary one."""

    def __init__(self, ask: Ask, own_session: str | None = None) -> None:
        self.ask = ask
        self.own_session = own_session

    async def _open(self) -> Opened | Error:
        response = await self.ask(Open(id=next(_ids)))
        assert isinstance(response, Opened | Error)
        return response

    async def _close(self, session: str) -> Response:
        return await self.ask(Close(id=next(_ids), session=session))

    async def handle(self, payload: Any) -> dict[str, Any]:
        """The answer to one JSON-RPC message (bytes, text, or decoded): a result or an error
        object, never an exception (a method that fails is -32603)."""
        if isinstance(payload, bytes | str):
            try:
                payload = msgspec.json.decode(payload)
            except msgspec.DecodeError:
                return rpc_error(None, -32700, "Parse error")
            except RecursionError:
                return rpc_error(None, -32700, f"Parse error: {TOO_DEEP}")
        if not isinstance(payload, dict):
            # JSON-RPC 2.0: JSON that parses but is not a request object is -32600, not a
            # parse error; a batch (an array) too, since this dialect takes one message a
            # request, as MCP does since 2025-06-18.
            what = (
                "a JSON-RPC batch: send one message per request"
                if isinstance(payload, list)
                else "not a JSON object"
            )
            return rpc_error(None, -32600, f"Invalid Request: {what}")
        try:
            rpc = msgspec.convert(payload, _Rpc)
            if rpc.jsonrpc != "2.0":
                raise msgspec.ValidationError("jsonrpc must be '2.0'")
        except msgspec.ValidationError as exc:
            return rpc_error(None, -32600, f"Invalid request: {exc}")
        try:
            return await self._method(rpc)
        except Exception as exc:  # never let a method bug end the connection
            log.exception("MCP method %s failed", rpc.method)
            return rpc_error(rpc.id, -32603, str(exc))

    async def _method(self, rpc: _Rpc) -> dict[str, Any]:
        params = rpc.params
        if rpc.method == "openenv/session/create":
            if self.own_session is not None:
                return rpc_result(rpc.id, {"session_id": self.own_session})
            opened = await self._open()
            if isinstance(opened, Error):
                if opened.code != ErrorCode.CAPACITY:
                    return rpc_error(rpc.id, -32000, opened.message)
                message, active, limit = capacity_message(opened)
                data = {"active_sessions": active, "max_sessions": limit}
                return rpc_error(rpc.id, -32000, message, data)
            return rpc_result(rpc.id, {"session_id": opened.session})
        if rpc.method == "openenv/session/close":
            sid = params.get("session_id")
            if not isinstance(sid, str):
                return rpc_error(rpc.id, -32602, "Invalid params - 'session_id' is required")
            if sid == self.own_session:
                return rpc_error(
                    rpc.id, -32600, "Cannot close active WebSocket-managed session via MCP method"
                )
            closed = await self._close(sid)
            if not isinstance(closed, Closed):
                return rpc_error(rpc.id, -32602, f"Unknown session_id: {sid}")
            return rpc_result(rpc.id, {"session_id": sid, "closed": True})
        if rpc.method == "tools/list":
            return await self._with_session(rpc, params, self._tools_list)
        if rpc.method == "tools/call":
            if not isinstance(params.get("name"), str):
                return rpc_error(rpc.id, -32602, "Missing 'name' in params")
            return await self._with_session(rpc, params, self._tools_call)
        return rpc_error(rpc.id, -32601, f"Method not found: {rpc.method}")

    async def _with_session(self, rpc: _Rpc, params: dict[str, Any], fn: Any) -> dict[str, Any]:
        sid = params.get("session_id") or self.own_session
        if sid is not None:
            return await fn(rpc, str(sid), params)
        opened = await self._open()  # as OpenEnv does: a temporary env
        if isinstance(opened, Error):
            return rpc_error(rpc.id, -32000, opened.message)
        try:
            return await fn(rpc, opened.session, params)
        finally:
            await self._close(opened.session)

    def _failure(self, rid: Any, error: Error) -> dict[str, Any]:
        if error.code == ErrorCode.UNSUPPORTED:
            return rpc_error(rid, -32603, MCP_UNSUPPORTED)
        if error.code == ErrorCode.UNKNOWN_SESSION:
            return rpc_error(rid, -32602, f"Unknown session_id: {error.session}")
        return rpc_error(rid, -32603, error.message)

    async def _tools_list(self, rpc: _Rpc, sid: str, params: dict[str, Any]) -> dict[str, Any]:
        response = await self.ask(ListTools(id=next(_ids), session=sid))
        if isinstance(response, Error):
            return self._failure(rpc.id, response)
        assert isinstance(response, Tools)
        tools = [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in response.tools
        ]
        return rpc_result(rpc.id, {"tools": tools})

    async def _tools_call(self, rpc: _Rpc, sid: str, params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return rpc_error(rpc.id, -32602, "Invalid params - 'arguments' must be an object")
        frame = CallTool(id=next(_ids), session=sid, name=params["name"], arguments=arguments)
        response = await self.ask(frame)
        if isinstance(response, Error):
            return self._failure(rpc.id, response)
        assert isinstance(response, ToolResult)
        value = _codec.decode_as(response.result, Any)
        text = value if isinstance(value, str) else json.dumps(value)
        return rpc_result(
            rpc.id,
            {
                "content": [{"type": "text", "text": text}],
                "structured_content": {"result": value},
                "data": value,
                "is_error": False,
            },
        )
