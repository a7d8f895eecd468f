"""OpenEnv's wire protocol, served by ecotone's engine: a second profile at the edge.

What OpenEnv clients see (openenv 0.10.0 is the reference; tests run its real client):

* WebSocket `/ws`: one session per connection; `reset`, `step`, `state`, `close`, `mcp`
  messages; observations as `{"observation": {...}, "reward", "done"}`; OpenEnv's error codes
  (`INVALID_JSON`, `UNKNOWN_TYPE`, `VALIDATION_ERROR`, `EXECUTION_ERROR`, `CAPACITY_REACHED`,
  `SESSION_ERROR`).
* HTTP `POST /reset`, `POST /step`, `GET /state`, `/health`, `/metadata`, `/schema`,
  `POST /mcp` (JSON-RPC 2.0) and `/openapi.json`.
* The Task API (env servers whose env publishes tasks): `GET /list_environments`,
  `GET /{env}/splits`, `POST /{env}/tasks`, `/{env}/num_tasks`, `/{env}/task`,
  `/{env}/task_range` with OpenEnv's bodies (`{"split", "index"}`, `{"split", "start",
  "stop"}`), and `reset(split=, index=)` to start one. A list holds 1000 tasks at most.

Deliberate differences:
* HTTP keeps the episode. OpenEnv builds a fresh env for every HTTP request; here `POST /reset`
  opens a session and returns its id (header `X-Ecotone-Session` and cookie `ecotone_session`),
  and `/step` and `/state` carrying that id act on the same episode. Without an id they keep
  OpenEnv's stateless behaviour (a fresh env, reset first, then closed).
* An ecotone observation's `truncated` stays inside `observation`; the top-level `done` is
  `done or truncated`, since an OpenEnv client has no other way to learn the episode is over.
* A step after the episode ended, or before any reset, is an error (`EXECUTION_ERROR` over
  `/ws`, 409 over HTTP) rather than a call into the env.
* `/ws?session_id=...` (attaching a socket to a session made over MCP) is not offered.
"""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import msgspec
import trio

from ecotone.compat.openenv.mapping import (
    MCP_UNSUPPORTED,
    capacity_message,
    http_status,
    pydantic_errors,
    refusal_observation,
    to_openenv_observation,
    validation_message,
)
from ecotone.kernel import Engine, Owner
from ecotone.kernel.tasks import MAX_PAGE, TASK_OPTIONS
from ecotone.server.runner import Runner
from ecotone.server.wsloop import WsPeer
from ecotone.specs import (
    CallTool,
    Close,
    Closed,
    Error,
    ErrorCode,
    GetState,
    JsonCodec,
    ListTasks,
    ListTools,
    ObservationFrame,
    Open,
    Opened,
    Reset,
    Response,
    StateFrame,
    Step,
    TaskPage,
    ToolResult,
    Tools,
)
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.http import HttpRequest, HttpResponse, json_response

log = logging.getLogger("ecotone.openenv")

OPENENV_API_VERSION = "1.0.0"
"""`info.version` of /openapi.json: the OpenEnv HTTP profile version we speak."""
SESSION_HEADER = "x-ecotone-session"
SESSION_COOKIE = "ecotone_session"

_ids = itertools.count(1)
_json = msgspec.json.Encoder()


class Bridge:
    """Engine requests for the OpenEnv profile, on behalf of one session owner."""

    def __init__(self, runner: Runner, owner: Owner) -> None:
        self.runner = runner
        self.engine: Engine = runner.engine
        self.owner = owner
        self.codec = JsonCodec()

    async def call(self, frame: Any) -> Response:
        response: Response = await self.runner.ask(self.owner, self.codec, frame)
        return response

    async def open(self) -> Opened | Error:
        response = await self.call(Open(id=next(_ids)))
        assert isinstance(response, Opened | Error)
        return response

    async def close(self, session: str) -> Response:
        return await self.call(Close(id=next(_ids), session=session))

    def reset_frame(self, session: str, data: dict[str, Any]) -> Reset:
        data = dict(data)
        seed = data.pop("seed", None)
        episode_id = data.pop("episode_id", None)
        spec = self.engine.envs[self.engine.default_env]
        accepted = spec.reset_options
        if accepted is not None and spec.tasks is not None:
            accepted = accepted | TASK_OPTIONS  # reset(split=, index=) picks a task
        # As OpenEnv does: keys the env's reset() does not take are dropped, not refused.
        options = {k: v for k, v in data.items() if accepted is None or k in accepted}
        return Reset(
            id=next(_ids), session=session, seed=seed, episode_id=episode_id, options=options
        )

    def observation(self, response: ObservationFrame, *, http: bool) -> dict[str, Any]:
        obs = self.codec.decode_as(response.observation, dict[str, Any])
        return to_openenv_observation(obs, http=http)

    def state(self, response: StateFrame) -> Any:
        return self.codec.decode_as(response.state, dict[str, Any])


# --- MCP (JSON-RPC 2.0) -----------------------------------------------------------------------


class _Rpc(msgspec.Struct, forbid_unknown_fields=True):
    jsonrpc: str
    method: str
    params: dict[str, Any] = {}
    id: int | str | None = None


def rpc_error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}


def rpc_result(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


class McpHandler:
    """OpenEnv's MCP methods over JSON-RPC: `tools/list`, `tools/call`,
    `openenv/session/create`, `openenv/session/close`."""

    def __init__(self, bridge: Bridge, own_session: str | None = None) -> None:
        self.bridge = bridge
        self.own_session = own_session

    async def handle(self, payload: Any) -> dict[str, Any]:
        if isinstance(payload, bytes | str):
            try:
                payload = msgspec.json.decode(payload)
            except msgspec.DecodeError:
                return rpc_error(None, -32700, "Parse error")
            except RecursionError:
                return rpc_error(None, -32700, f"Parse error: {TOO_DEEP}")
        if not isinstance(payload, dict):
            return rpc_error(None, -32700, "Parse error")
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
            opened = await self.bridge.open()
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
            closed = await self.bridge.close(sid)
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
        opened = await self.bridge.open()  # as OpenEnv does: a temporary env
        if isinstance(opened, Error):
            return rpc_error(rpc.id, -32000, opened.message)
        try:
            return await fn(rpc, opened.session, params)
        finally:
            await self.bridge.close(opened.session)

    def _failure(self, rid: Any, error: Error) -> dict[str, Any]:
        if error.code == ErrorCode.UNSUPPORTED:
            return rpc_error(rid, -32603, MCP_UNSUPPORTED)
        if error.code == ErrorCode.UNKNOWN_SESSION:
            return rpc_error(rid, -32602, f"Unknown session_id: {error.session}")
        return rpc_error(rid, -32603, error.message)

    async def _tools_list(self, rpc: _Rpc, sid: str, params: dict[str, Any]) -> dict[str, Any]:
        response = await self.bridge.call(ListTools(id=next(_ids), session=sid))
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
        response = await self.bridge.call(frame)
        if isinstance(response, Error):
            return self._failure(rpc.id, response)
        assert isinstance(response, ToolResult)
        value = self.bridge.codec.decode_as(response.result, Any)
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


# --- WebSocket /ws ----------------------------------------------------------------------------


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
        self.mcp: McpHandler | None = None

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
        self.mcp = McpHandler(self.bridge, own_session=opened.session)
        return True

    async def too_large(self, size: int) -> None:
        await self.send_message(_ws_error("INVALID_JSON", f"message of {size} bytes is too large"))

    def holds_sessions(self) -> bool:
        return self.session is not None

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
            await self.bridge.call(Step(id=next(_ids), session=self.session, action=msg.data))
        )

    async def _state(self, msg: _Message) -> None:
        assert self.session is not None
        if msg.data:
            await self._invalid("data", "Extra inputs are not permitted", "extra_forbidden")
            return
        await self._answer(await self.bridge.call(GetState(id=next(_ids), session=self.session)))

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
        self.runner.disconnect(self.owner, "shutdown" if stopping else "disconnect")


_HANDLERS: dict[str, Any] = {
    "reset": OpenEnvWebSocket._reset,
    "step": OpenEnvWebSocket._step,
    "state": OpenEnvWebSocket._state,
    "close": OpenEnvWebSocket._close_message,
    "mcp": OpenEnvWebSocket._mcp,
}


# --- HTTP routes ------------------------------------------------------------------------------


def _detail(status: int, detail: Any) -> HttpResponse:
    return json_response(status, {"detail": detail})


def _error_response(error: Error) -> HttpResponse:
    if error.code == ErrorCode.INVALID_ACTION:
        return _detail(422, pydantic_errors(error))
    return _detail(http_status(error.code), error.message)


LOOSE_KEPT = 4
"""Sessions of unnamed resets one client address keeps: its next one closes the oldest past
these (a client that never sends the id back replaces its episode with each reset)."""


class OpenEnvHttp:
    """OpenEnv's HTTP routes, keeping one episode per client session.

    OpenEnv's own HTTP routes hold nothing between requests, and most of its clients never
    send back the session id (header or cookie) a reset answers with. So a session made by a
    reset that names none is *loose*: it is closed after `limits.stateless_grace` unless a
    request names it first (then it lives as any session, until `idle_timeout` or
    `POST /close`), and a client address keeps at most `LOOSE_KEPT` of them (its next unnamed
    reset closes the oldest; all of them when the server is full). Each client address holds
    at most
    `limits.max_http_sessions_per_client` sessions made here."""

    def __init__(self, runner: Runner, owner: Owner) -> None:
        self.engine = runner.engine
        self.runner = runner
        self.bridge = Bridge(runner, owner)
        self._loose: dict[str, tuple[str, float]] = {}
        """Loose sessions, oldest first: id -> (client address, made at)."""
        self._made_for: dict[str, str] = {}
        """Every open session made here: id -> client address."""
        self._clock = trio.current_time

    def _session_of(self, request: HttpRequest) -> str | None:
        session = request.headers.get(SESSION_HEADER) or request.cookie(SESSION_COOKIE)
        if session is not None:
            self._loose.pop(session, None)  # named: no longer loose
        return session

    def _alive(self, session: str) -> bool:
        return self.engine.sessions.get(session, self.bridge.owner) is not None

    def _held_by(self, peer: str) -> int:
        return sum(1 for s, p in self._made_for.items() if p == peer and self._alive(s))

    async def _close_loose(self, sessions: list[str]) -> None:
        for session in sessions:
            self._loose.pop(session, None)
            self._made_for.pop(session, None)
            await self.bridge.close(session)

    async def sweep(self) -> None:
        """Close loose sessions past their grace, and forget sessions closed otherwise (idle,
        by id), until cancelled (the transport runs it)."""
        grace = self.engine.limits.stateless_grace
        while True:
            await trio.sleep(max(0.05, min(grace / 4, 1.0)))
            cutoff = self._clock() - grace
            await self._close_loose([s for s, (_, made) in self._loose.items() if made <= cutoff])
            for session in [s for s in self._made_for if not self._alive(s)]:
                self._made_for.pop(session, None)
                self._loose.pop(session, None)

    async def close(self, request: HttpRequest) -> HttpResponse:
        """`POST /close`: end the session the request names (header or cookie)."""
        session = self._session_of(request)
        if session is None:
            return _detail(422, f"name the session: the {SESSION_HEADER} header or cookie")
        self._made_for.pop(session, None)
        closed = await self.bridge.close(session)
        if isinstance(closed, Error):
            return _error_response(closed)
        expire = f"{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
        return json_response(200, {"session_id": session, "closed": True}, [("Set-Cookie", expire)])

    def _body(self, request: HttpRequest, required: bool) -> dict[str, Any] | HttpResponse:
        if not request.body.strip():
            if required:
                return _detail(
                    422,
                    [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}],
                )
            return {}
        if request.content_type != "application/json":
            # Required, as FastAPI does: a browser cannot send it cross-site without asking
            # first (CORS preflight), unlike text/plain or a form.
            given = request.content_type or "no Content-Type"
            return _detail(
                415,
                f"expected Content-Type: application/json, got {given} "
                "(curl: -H 'content-type: application/json')",
            )
        try:
            body = msgspec.json.decode(request.body)
        except RecursionError:
            return _detail(422, [{"type": "json_invalid", "loc": ["body"], "msg": TOO_DEEP}])
        except msgspec.DecodeError as exc:
            return _detail(
                422,
                [
                    {
                        "type": "json_invalid",
                        "loc": ["body", 0],
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": str(exc)},
                    }
                ],
            )
        if not isinstance(body, dict):
            return _detail(
                422,
                [
                    {
                        "type": "model_attributes_type",
                        "loc": ["body"],
                        "msg": "Input should be a valid dictionary",
                        "input": body,
                    }
                ],
            )
        return body

    async def reset(self, request: HttpRequest) -> HttpResponse:
        body = self._body(request, required=False)
        if isinstance(body, HttpResponse):
            return body
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            return _detail(
                422,
                [
                    {
                        "type": "greater_than_equal",
                        "loc": ["body", "seed"],
                        "msg": "Input should be an integer >= 0",
                        "input": seed,
                    }
                ],
            )
        episode_id = body.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            return _detail(
                422,
                [
                    {
                        "type": "string_type",
                        "loc": ["body", "episode_id"],
                        "msg": "Input should be a string of at most 255 characters",
                        "input": episode_id,
                    }
                ],
            )
        session = self._session_of(request)
        if session is not None and not self._alive(session):
            session = None  # expired or unknown: start afresh
        if session is None:
            peer = request.peer
            loose = [s for s, (p, _) in self._loose.items() if p == peer]
            await self._close_loose(loose[: max(0, len(loose) - LOOSE_KEPT + 1)])
            limit = self.engine.limits.max_http_sessions_per_client
            if self._held_by(peer) >= limit:
                return _detail(
                    503,
                    f"this client holds {limit} sessions (limits.max_http_sessions_per_client):"
                    " close some (POST /close), or send their id back to reuse one",
                )
            opened = await self.bridge.open()
            if isinstance(opened, Error) and opened.code == ErrorCode.CAPACITY:
                # Full: this client's loose sessions are the ones its own resets replace.
                mine = [s for s, (p, _) in self._loose.items() if p == peer]
                if mine:
                    await self._close_loose(mine)
                    opened = await self.bridge.open()
            if isinstance(opened, Error):
                return _error_response(opened)
            session = opened.session
            self._made_for[session] = peer
            self._loose[session] = (peer, self._clock())
        response = await self.bridge.call(self.bridge.reset_frame(session, body))
        return self._observation(response, session)

    def _observation(self, response: Response, session: str | None) -> HttpResponse:
        if isinstance(response, Error):
            if (
                response.code == ErrorCode.INVALID_ACTION
                and self.runner.openenv.invalid_action == "observation"
            ):
                return json_response(200, refusal_observation(response, http=True))
            return _error_response(response)
        assert isinstance(response, ObservationFrame)
        headers = []
        if session is not None:
            headers = [
                ("X-Ecotone-Session", session),
                ("Set-Cookie", f"{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Lax"),
            ]
        return json_response(200, self.bridge.observation(response, http=True), headers)

    async def step(self, request: HttpRequest) -> HttpResponse:
        body = self._body(request, required=True)
        if isinstance(body, HttpResponse):
            return body
        action = body.get("action")
        if not isinstance(action, dict):
            kind = "missing" if action is None else "dict_type"
            return _detail(
                422,
                [
                    {
                        "type": kind,
                        "loc": ["body", "action"],
                        "msg": "Field required"
                        if action is None
                        else "Input should be a valid dictionary",
                        "input": body,
                    }
                ],
            )
        raw = msgspec.Raw(msgspec.json.encode(action))
        session = self._session_of(request)
        if session is None:  # OpenEnv's stateless step: a fresh env, reset, one step, closed
            opened = await self.bridge.open()
            if isinstance(opened, Error):
                return _error_response(opened)
            try:
                reset = await self.bridge.call(self.bridge.reset_frame(opened.session, {}))
                if isinstance(reset, Error):
                    return _error_response(reset)
                response = await self.bridge.call(
                    Step(id=next(_ids), session=opened.session, action=raw)
                )
            finally:
                await self.bridge.close(opened.session)
            return self._observation(response, None)
        response = await self.bridge.call(Step(id=next(_ids), session=session, action=raw))
        return self._observation(response, session)

    async def state(self, request: HttpRequest) -> HttpResponse:
        session = self._session_of(request)
        if session is None:
            opened = await self.bridge.open()
            if isinstance(opened, Error):
                return _error_response(opened)
            try:
                response = await self.bridge.call(GetState(id=next(_ids), session=opened.session))
            finally:
                await self.bridge.close(opened.session)
        else:
            response = await self.bridge.call(GetState(id=next(_ids), session=session))
        if isinstance(response, Error):
            return _error_response(response)
        assert isinstance(response, StateFrame)
        return json_response(200, self.bridge.state(response))

    async def mcp(self, request: HttpRequest) -> HttpResponse:
        reply = await McpHandler(self.bridge).handle(request.body)
        return json_response(200, reply)

    def metadata(self) -> HttpResponse:
        spec = self.engine.envs[self.engine.default_env]
        return json_response(
            200,
            {
                "name": spec.name,
                "description": spec.description or f"{spec.name} environment",
                "readme_content": spec.readme or None,
                "version": spec.version,
                "author": None,
                "documentation_url": None,
            },
        )

    # --- OpenEnv's Task API: /list_environments, /{env}/splits, tasks, num_tasks, task... ----

    def list_environments(self) -> HttpResponse:
        return json_response(200, list(self.engine.envs))

    def _task_env(self, name: str) -> str | HttpResponse:
        for env, spec in self.engine.envs.items():
            if env.lower() == name.lower():
                if spec.tasks is None:
                    return _detail(501, f"env {env!r} publishes no tasks")
                return env
        return _detail(404, f"unknown environment {name!r}")

    async def _page(self, env: str, split: str, offset: int, limit: int) -> Any:
        answer = await self.bridge.call(
            ListTasks(id=next(_ids), env=env, split=split, offset=offset, limit=limit)
        )
        if isinstance(answer, Error):
            return _detail(400, answer.message)
        assert isinstance(answer, TaskPage)
        return answer

    async def splits(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        env = self._task_env(params["env"])
        if isinstance(env, HttpResponse):
            return env
        counts = self.engine.envs[env].tasks.counts()  # type: ignore[union-attr]
        kinds = ("train", "validation", "test")
        return json_response(
            200,
            [
                {"name": s, "type": s if s in kinds else "validation", "num_tasks": n}
                for s, n in counts.items()
            ],
        )

    async def task_api(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """`POST /{env}/tasks`, `num_tasks`, `task`, `task_range`, with OpenEnv's bodies."""
        env = self._task_env(params["env"])
        if isinstance(env, HttpResponse):
            return env
        try:
            body = msgspec.json.decode(request.body or b"{}")
        except (msgspec.DecodeError, RecursionError):
            return _detail(422, "the body is not JSON")
        split = body.get("split") if isinstance(body, dict) else None
        if not isinstance(split, str):
            return _detail(
                422, [{"loc": ["body", "split"], "msg": "Field required", "type": "missing"}]
            )
        tasks = self.engine.envs[env].tasks
        assert tasks is not None
        if split not in tasks.splits:
            return _detail(400, f"unknown split {split!r}; splits: {', '.join(tasks.splits)}")
        total = len(tasks.splits[split])
        what = params["what"]
        if what == "num_tasks":
            return json_response(200, {"num_tasks": total})
        if what == "task":
            index = body.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < total:
                return _detail(400, "Invalid task index")
            page = await self._page(env, split, index, 1)
            if isinstance(page, HttpResponse):
                return page
            return json_response(200, {"task": msgspec.json.decode(page.tasks[0])})
        if what == "tasks":
            start, stop = 0, total
        else:
            bounds = [body.get("start"), body.get("stop")]
            if any(
                b is not None and (isinstance(b, bool) or not isinstance(b, int)) for b in bounds
            ):
                return _detail(422, "`start` and `stop` are integers or null")
            chosen = range(total)[slice(*bounds)]
            start, stop = chosen.start, max(chosen.start, chosen.stop)
        page = await self._page(env, split, start, min(stop - start, MAX_PAGE))
        if isinstance(page, HttpResponse):
            return page
        listed = [msgspec.json.decode(raw) for raw in page.tasks]
        if what == "tasks":
            return json_response(200, {"tasks": listed, "env_name": env})
        return json_response(200, {"tasks": listed})

    def schema(self) -> HttpResponse:
        info = self.engine.envs[self.engine.default_env].info()
        return json_response(
            200,
            {
                "action": info.action_schema,
                "observation": info.observation_schema,
                "state": info.state_schema,
                "reset_observation": info.observation_schema,
            },
        )
