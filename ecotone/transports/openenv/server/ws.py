"""OpenEnv's WebSocket `/ws`: one session per connection, OpenEnv's messages and errors."""

from __future__ import annotations

from typing import Any, Final

import msgspec
import trio

from ecotone.compat.openenv.mapping import (
    capacity_message,
    pydantic_errors,
    refusal_observation,
    validation_message,
)
from ecotone.compat.openenv.rpc import McpDialect
from ecotone.server.runner import Runner
from ecotone.server.wsloop import WsPeer
from ecotone.specs import (
    Error,
    ErrorCode,
    GetState,
    ObservationFrame,
    Response,
    StateFrame,
    Step,
)
from ecotone.specs.codec import TOO_DEEP
from ecotone.transports.openenv.server.bridge import Bridge, ids

_json: Final = msgspec.json.Encoder()


class _Message(msgspec.Struct, forbid_unknown_fields=True):
    type: str = ""
    data: msgspec.Raw = msgspec.Raw(b"")


def _ws_error(code: str, message: str, **extra: Any) -> bytes:
    return _json.encode({"type": "error", "data": {"message": message, "code": code, **extra}})


class OpenEnvWebSocket(WsPeer):
    """One OpenEnv `/ws` connection: exactly one session, messages handled one at a time."""

    def __init__(
        self,
        runner: Runner,
        stream: trio.abc.Stream,
        pending: bytes = b"",
        principal: int | None = None,
    ) -> None:
        super().__init__(runner, stream, pending)
        # Its handshake passed Admission, showing token number `principal` (if tokens are set).
        self.owner = runner.engine.owner(authenticated=True, principal=principal)
        self.bridge = Bridge(runner, self.owner)
        self.session: str | None = None
        self.mcp: McpDialect | None = None

    async def opened(self, nursery: trio.Nursery) -> bool:
        opened = await self.bridge.open()
        if isinstance(opened, Error):
            if opened.code == ErrorCode.CAPACITY:
                message, active, limit = capacity_message(opened)
                frame = _ws_error(
                    "CAPACITY_REACHED", message, active_sessions=active, max_sessions=limit
                )
            else:
                frame = _ws_error("FACTORY_ERROR", opened.message)
            await self.send_message(frame)
            await self.close(1000)
            return False
        self.session = opened.session
        self.mcp = McpDialect(self.bridge.call, own_session=opened.session)
        return True

    async def too_large(self, size: int) -> None:
        await self.send_message(_ws_error("INVALID_JSON", f"message of {size} bytes is too large"))

    async def message(self, data: bytes, text: bool) -> None:
        if not text:
            await self.send_message(_ws_error("SESSION_ERROR", "binary messages are not supported"))
            await self.close(1000)
            return
        try:
            msg = msgspec.json.decode(data, type=_Message)
        except msgspec.ValidationError as exc:
            if "Expected `object`" in str(exc) and "$." not in str(exc):
                await self.send_message(
                    _ws_error("SESSION_ERROR", f"message is not an object: {exc}")
                )
                await self.close(1000)
                return
            field = str(exc).rsplit("`", 2)[-2] if "`" in str(exc) else ""
            await self.send_message(
                _ws_error(
                    "VALIDATION_ERROR",
                    "Invalid message",
                    errors=[{"type": "value_error", "loc": [field], "msg": str(exc)}],
                )
            )
            return
        except msgspec.DecodeError as exc:
            await self.send_message(_ws_error("INVALID_JSON", f"Invalid JSON: {exc}"))
            return
        except RecursionError:
            await self.send_message(_ws_error("INVALID_JSON", f"Invalid JSON: {TOO_DEEP}"))
            return
        handler = _HANDLERS.get(msg.type)
        if handler is None:
            await self.send_message(_ws_error("UNKNOWN_TYPE", f"Unknown message type: {msg.type}"))
            return
        await handler(self, msg)

    async def _reset(self, msg: _Message) -> None:
        assert self.session is not None
        data: Any = msgspec.json.decode(msg.data) if msg.data else {}
        if not isinstance(data, dict):
            await self._invalid("data", "reset data must be an object")
            return
        response = await self.bridge.call(self.bridge.reset_frame(self.session, data))
        await self._answer(response)

    async def _step(self, msg: _Message) -> None:
        assert self.session is not None
        if not msg.data:
            await self._invalid("data", "Field required", "missing")
            return
        await self._answer(
            await self.bridge.call(Step(id=next(ids), session=self.session, action=msg.data))
        )

    async def _state(self, msg: _Message) -> None:
        assert self.session is not None
        if msg.data:
            await self._invalid("data", "Extra inputs are not permitted", "extra_forbidden")
            return
        await self._answer(await self.bridge.call(GetState(id=next(ids), session=self.session)))

    async def _close_message(self, msg: _Message) -> None:
        if self.session is not None:
            await self.bridge.close(self.session)
            self.session = None
        await self.close(1000)

    async def _mcp(self, msg: _Message) -> None:
        assert self.mcp is not None
        if not msg.data:
            await self._invalid("data", "Field required", "missing")
            return
        reply = await self.mcp.handle(bytes(msg.data))
        await self.send_message(_json.encode({"type": "mcp", "data": reply}))

    async def _invalid(self, field: str, message: str, kind: str = "value_error") -> None:
        errors = [{"type": kind, "loc": [field], "msg": message}]
        await self.send_message(_ws_error("VALIDATION_ERROR", "Invalid message", errors=errors))

    async def _answer(self, response: Response) -> None:
        if isinstance(response, ObservationFrame):
            data = self.bridge.observation(response, http=False)
            await self.send_message(_json.encode({"type": "observation", "data": data}))
        elif isinstance(response, StateFrame):
            state = self.bridge.state(response)
            await self.send_message(_json.encode({"type": "state", "data": state}))
        elif isinstance(response, Error):
            if (
                response.code == ErrorCode.INVALID_ACTION
                and self.runner.openenv.invalid_action == "observation"
            ):
                data = refusal_observation(response, http=False)
                await self.send_message(_json.encode({"type": "observation", "data": data}))
            elif response.code == ErrorCode.INVALID_ACTION:
                # OpenEnv's client raises with `message` alone: it must say what was wrong.
                await self.send_message(
                    _ws_error(
                        "VALIDATION_ERROR",
                        validation_message(response),
                        errors=pydantic_errors(response),
                    )
                )
            else:
                await self.send_message(_ws_error("EXECUTION_ERROR", response.message))
        else:  # pragma: no cover - the kernel answers these requests with the frames above
            await self.send_message(_ws_error("EXECUTION_ERROR", f"unexpected {response!r}"))

    async def closed(self, stopping: bool) -> None:
        self.runner.disconnect(self.bridge.owner, "shutdown" if stopping else "disconnect")


_HANDLERS: dict[str, Any] = {
    "reset": OpenEnvWebSocket._reset,
    "step": OpenEnvWebSocket._step,
    "state": OpenEnvWebSocket._state,
    "close": OpenEnvWebSocket._close_message,
    "mcp": OpenEnvWebSocket._mcp,
}
