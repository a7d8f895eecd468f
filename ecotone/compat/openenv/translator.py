"""Sans-IO translation for ecotone clients driving OpenEnv servers: ecotone request frames
to OpenEnv's `/ws` messages, OpenEnv's answers back to response frames (`mapping` holds the
table). The channels that move the bytes are `ecotone.transports.openenv.client`'s.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ecotone.compat.openenv.mapping import (
    WS_ERROR_TO_CODE,
    from_openenv_observation,
    invalid_action_details,
    mcp_error_code,
)
from ecotone.specs import (
    PROTOCOL_VERSION,
    CallTool,
    Close,
    Error,
    ErrorCode,
    GetState,
    Hello,
    ListTools,
    ObservationFrame,
    Open,
    Opened,
    Ping,
    Pong,
    Request,
    Reset,
    Response,
    StateFrame,
    Step,
    ToolInfo,
    ToolResult,
    Tools,
    Welcome,
    codec_for,
)

_json = msgspec.json.Encoder()


class Translator:
    """Sans-IO: ecotone request frames to OpenEnv messages, OpenEnv answers to frames."""

    def __init__(self, codec: str) -> None:
        self.codec = codec_for(codec)

    def decode(self, data: bytes) -> Request | Error:
        try:
            return self.codec.decode_request(data)
        except msgspec.DecodeError as exc:  # our own client made it: a bug if this happens
            return Error(id=None, code=ErrorCode.INVALID_FRAME, message=str(exc))

    def message(self, frame: Request) -> bytes:
        """The OpenEnv message for a session-bound request."""
        if isinstance(frame, Reset):
            data: dict[str, Any] = dict(frame.options)
            if frame.seed is not None:
                data["seed"] = frame.seed
            if frame.episode_id is not None:
                data["episode_id"] = frame.episode_id
            return _json.encode({"type": "reset", "data": data})
        if isinstance(frame, Step):
            if self.codec.name == "json":
                return b'{"type":"step","data":' + bytes(frame.action) + b"}"
            action = self.codec.decode_as(frame.action, Any)
            return _json.encode({"type": "step", "data": action})
        if isinstance(frame, GetState | Open):
            return b'{"type":"state"}'
        if isinstance(frame, Close):
            return b'{"type":"close"}'
        if isinstance(frame, ListTools):
            rpc: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            return _json.encode({"type": "mcp", "data": rpc})
        if isinstance(frame, CallTool):
            rpc = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": frame.name, "arguments": frame.arguments},
            }
            return _json.encode({"type": "mcp", "data": rpc})
        raise ValueError(f"{type(frame).__name__} has no OpenEnv message")

    def error(self, frame: Any, code: ErrorCode, message: str, **details: Any) -> Error:
        return Error(
            id=frame.id,
            code=code,
            message=message,
            session=getattr(frame, "session", None),
            details=details,
        )

    def answer(self, frame: Request, session: str, raw: bytes | str) -> Response:
        """Turn OpenEnv's answer to `frame` into the frame ecotone's client expects."""
        try:
            message = json.loads(raw)
            kind, data = message.get("type"), message.get("data")
        except (ValueError, AttributeError):
            return self.error(frame, ErrorCode.INTERNAL, f"OpenEnv sent a non-JSON answer: {raw!r}")
        if kind == "error":
            return self._error(frame, data or {})
        if isinstance(frame, Open):
            return Opened(id=frame.id, session=session, env=frame.env or "openenv")
        if kind == "observation" and isinstance(data, dict):
            obs = from_openenv_observation(data)
            return ObservationFrame(id=frame.id, session=session, observation=self.codec.raw(obs))
        if kind == "state":
            return StateFrame(id=frame.id, session=session, state=self.codec.raw(data or {}))
        if kind == "mcp" and isinstance(data, dict):
            return self._mcp(frame, session, data)
        return self.error(frame, ErrorCode.INTERNAL, f"unexpected OpenEnv answer {kind!r}")

    def _error(self, frame: Any, data: dict[str, Any]) -> Error:
        code = WS_ERROR_TO_CODE.get(str(data.get("code")), ErrorCode.ENV_ERROR)
        message = str(data.get("message", "OpenEnv error"))
        if code is ErrorCode.INVALID_ACTION:
            text, details = invalid_action_details(data.get("errors") or [{}], message)
            return self.error(frame, code, text, **details)
        if code is ErrorCode.CAPACITY:
            return self.error(
                frame,
                code,
                message,
                active=data.get("active_sessions"),
                limit=data.get("max_sessions"),
            )
        return self.error(frame, code, message, openenv_code=data.get("code"))

    def _mcp(self, frame: Any, session: str, rpc: dict[str, Any]) -> Response:
        if "error" in rpc:
            err = rpc["error"] or {}
            text = str(err.get("message", "MCP error"))
            code = mcp_error_code(err.get("code"), text)
            return self.error(frame, code, text, rpc_code=err.get("code"))
        result = rpc.get("result") or {}
        if isinstance(frame, ListTools):
            tools = [
                ToolInfo(
                    name=t.get("name", ""),
                    description=t.get("description") or "",
                    input_schema=t.get("inputSchema") or t.get("input_schema") or {},
                )
                for t in result.get("tools", [])
            ]
            return Tools(id=frame.id, session=session, tools=tools)
        value = result.get("data", result.get("structured_content", result))
        return ToolResult(id=frame.id, session=session, result=self.codec.raw(value))

    def local(self, frame: Request) -> Response | None:
        """Answers that need no OpenEnv round trip."""
        if isinstance(frame, Hello):
            return Welcome(id=frame.id, version=PROTOCOL_VERSION, server="openenv", envs=[])
        if isinstance(frame, Ping):
            return Pong(id=frame.id)
        return None
