"""The `http` transport's routes: HTTP/1.1 (h11 on trio, keep-alive) plus WebSocket, on one port.

Served side by side:

* ecotone's native API. `POST /v1/frames` takes any request frame (JSON, or MessagePack with
  `content-type: application/msgpack`) and answers with the response frame, so every op and
  every error code is the same as on the other transports. Convenience routes map onto the
  same frames: `POST /v1/sessions` (open), `POST /v1/sessions/{id}/reset`,
  `POST /v1/sessions/{id}/step` (`{"action": ...}`), `GET /v1/sessions/{id}/state`,
  `DELETE /v1/sessions/{id}` (or `POST /v1/sessions/{id}/close`, which a browser can send
  with `navigator.sendBeacon` as a page unloads), `POST /v1/sessions/{id}/keepalive` (renews
  its lease: `kept`, or 404 `unknown_session` once it was reclaimed),
  `GET /v1/sessions/{id}/render` (the env's custom view), `GET /v1/describe`; snapshots:
  `POST /v1/sessions/{id}/snapshot`, `.../restore` (`{"snapshot": ID}`, `{"blob": BASE64}`
  or `{"checkpoint": KEY}`), `.../fork` (`{"n": N}`), `GET /v1/snapshots/{id}` (exported,
  sealed), `DELETE /v1/snapshots/{id}`.
  Sessions live across requests and connections (the id is the handle) until closed or
  reclaimed when their lease runs out (`POST /v1/sessions/{id}/keepalive` renews it; so does
  every request about the session).
* A multi-agent session's seats (`seats.py`): `GET /v1/sessions/{id}/seats` (the owner's
  keys), then per seat key `POST /v1/seats/{key}/join`, `GET /v1/seats/{key}` (its own view;
  `?wait=1` waits for its turn, bounded), `POST /v1/seats/{key}/play` (`{"action": ...}`),
  `GET /v1/seats/{key}/render`, `POST /v1/seats/{key}/leave`, `POST /v1/seats/{key}/keepalive`,
  `GET /v1/seats/{key}/trajectory` (JSON Lines). Each key's requests act as a
  holder of their own, never as the session's owner, and their answers never carry the
  session's id.
* The plain GETs the websocket transport serves too (`ecotone.transports.websocket.server.
  plain`): `/health`, `/metrics`, `/openapi.json`, `/v1/tasks`, `/v1/task`, OpenEnv's
  `/metadata`, `/schema` and Task API.
* OpenEnv's HTTP profile (`/reset`, `/step`, `/state`, `/close`, and its JSON-RPC at `/mcp`;
  `ecotone.transports.openenv.server`); MCP's streamable HTTP at `/mcp`
  (`ecotone.transports.mcp.server`).
* With `web=True`, the web UI: `GET /web` and its files (`webui.py`); `GET /` redirects
  there. Without it those are 404.
* WebSocket upgrades (`ecotone.transports.websocket.server.endpoints`): `/` for ecotone
  frames, `/ws` for OpenEnv's messages.

Status codes for error frames (`ecotone.specs.errors.HTTP_STATUS`): 400 invalid_frame /
unknown_op / unsupported_version, 401 unauthorized, 403 forbidden, 404 unknown_session /
unknown_env / unknown_snapshot / unknown_seat_key, 409 reset_required / episode_done /
snapshot_mismatch / not_your_turn / seat_taken, 413 too_large, 415 wrong content type,
422 invalid_action / invalid_argument, 501 unsupported, 503 capacity / shutting_down,
504 timeout, 500 env_error / internal. Slow clients get 408 after `REQUEST_TIMEOUT`.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import trio

from ecotone.kernel import Owner
from ecotone.server.http11.asgi import Streamed
from ecotone.server.http11.refusals import error_response
from ecotone.server.http11.router import Router, method_not_allowed
from ecotone.server.runner import Runner
from ecotone.specs import (
    Close,
    Codec,
    DropSnapshot,
    Error,
    ErrorCode,
    ExportSnapshot,
    Fork,
    GetState,
    JsonCodec,
    Keepalive,
    Kept,
    MsgpackCodec,
    Open,
    Render,
    Reset,
    Restore,
    Snapshot,
    Step,
)
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.http import (
    JSON,
    MSGPACK,
    HttpRequest,
    HttpResponse,
    json_response,
    speaks_streamable_http,
)
from ecotone.transports.http.server import webui
from ecotone.transports.http.server.seats import SeatRoutes
from ecotone.transports.mcp.server.http import McpHttp
from ecotone.transports.mcp.server.sdk import available as mcp_missing
from ecotone.transports.openenv.server.http import OpenEnvHttp
from ecotone.transports.websocket.server.plain import frame_response, plain_routes


def _unsupported(message: str) -> HttpResponse:
    """415: a body in a media type the route does not read (an `invalid_frame` error)."""
    frame = Error(id=None, code=ErrorCode.INVALID_FRAME, message=message)
    return HttpResponse(415, msgspec.json.encode(frame))


class HttpServer:
    """Routes for one kernel (`handle`). All requests that show no token share one session
    owner; with tokens, each token's requests have an owner of their own. `web`: also the
    web UI's page and files under /web. `background`: where MCP's session manager runs
    (without it, /mcp answers MCP's clients 501)."""

    def __init__(
        self, runner: Runner, *, web: bool = False, background: trio.Nursery | None = None
    ) -> None:
        self.runner = runner
        self.mcp_http = McpHttp(runner, background) if background is not None else None
        self.engine = runner.engine
        self.owner = runner.engine.owner(authenticated=True)  # requests pass Admission
        """The owner of requests that show no token (a server that needs none); with tokens,
        each token's requests have an owner of their own (`owner_for`)."""
        self.json = JsonCodec()
        self.msgpack = MsgpackCodec()
        self.openenv = OpenEnvHttp(runner, self.owner)
        self._owners: dict[int, tuple[Owner, OpenEnvHttp]] = {}
        self._ids = itertools.count(1)
        self.router = router = Router()
        router.add(r"/v1/frames", POST=self.frames)
        router.add(r"/v1/sessions", POST=self.open)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)", DELETE=self.close)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/reset", POST=self.reset)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/step", POST=self.step)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/state", GET=self.state)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/render", GET=self.render)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/close", POST=self.close)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/keepalive", POST=self.keepalive)
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/snapshot", POST=self._on_session(Snapshot))
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/restore", POST=self._on_session(Restore))
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/fork", POST=self._on_session(Fork))
        router.add(r"/v1/snapshots/(?P<snap>[^/]+)", GET=self.export, DELETE=self.drop)
        self.seats = SeatRoutes(runner, self.owner_for, self._body)
        self.seats.install(router)
        plain_routes(router, runner, self.openenv)
        router.add(r"/reset", POST=lambda r, _: self.openenv_for(r).reset(r))
        router.add(r"/step", POST=lambda r, _: self.openenv_for(r).step(r))
        router.add(r"/state", GET=lambda r, _: self.openenv_for(r).state(r))
        router.add(r"/close", POST=lambda r, _: self.openenv_for(r).close(r))
        router.add(r"/mcp", POST=self.mcp, GET=self.mcp, DELETE=self.mcp)
        if web:  # last: /web/{name} must not shadow the Task API's /{env}/splits
            webui.install(router, webui.load())
        self.handle = router.handle
        """The answer to one request (what the connection loop calls)."""

    def _for(self, request: HttpRequest) -> tuple[Owner, OpenEnvHttp]:
        principal = request.principal
        if principal is None:
            return self.owner, self.openenv
        found = self._owners.get(principal)
        if found is None:
            owner = self.engine.owner(authenticated=True, principal=principal)
            found = self._owners[principal] = (owner, OpenEnvHttp(self.runner, owner))
        return found

    def owner_for(self, request: HttpRequest) -> Owner:
        """The owner of this request's sessions: one per token, so a token's holder sees its
        own sessions only, and `max_sessions_per_token` counts them together."""
        return self._for(request)[0]

    def openenv_for(self, request: HttpRequest) -> OpenEnvHttp:
        return self._for(request)[1]

    async def mcp(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse | Streamed:
        """MCP's streamable HTTP (the SDK, `ecotone.transports.mcp.server.http`), or OpenEnv's
        JSON-RPC dialect for plain POSTs."""
        if speaks_streamable_http(request.method, request.headers):
            if request.method == "POST" and request.body.lstrip()[:1] == b"[":
                error = {
                    "code": -32600,
                    "message": "Invalid Request: a JSON-RPC batch; MCP (since 2025-06-18) "
                    "takes one message per request",
                }
                return json_response(400, {"jsonrpc": "2.0", "id": None, "error": error})
            missing = mcp_missing()
            if missing is not None or self.mcp_http is None:
                error = {"code": -32603, "message": missing or "MCP is not served here"}
                return json_response(501, {"jsonrpc": "2.0", "id": None, "error": error})
            return Streamed(await self.mcp_http.app())
        if request.method != "POST":
            return method_not_allowed(["POST"])
        return await self.openenv_for(request).mcp(request)

    # --- native API ------------------------------------------------------------------------

    async def _dispatch(
        self, frame: Any, request: HttpRequest, codec: Codec | None = None
    ) -> HttpResponse:
        codec = codec or self.json
        response = await self.runner.ask(self.owner_for(request), codec, frame)
        return frame_response(codec, response)

    def _body(self, request: HttpRequest, required: bool) -> dict[str, Any] | HttpResponse:
        if not request.body.strip():
            if required:
                return error_response(ErrorCode.INVALID_FRAME, "this request needs a JSON body")
            return {}
        if request.content_type not in (JSON, ""):
            return _unsupported(f"expected {JSON}, got {request.content_type}")
        try:
            body = msgspec.json.decode(request.body)
        except msgspec.DecodeError as exc:
            return error_response(ErrorCode.INVALID_FRAME, f"body is not valid JSON: {exc}")
        except RecursionError:
            return error_response(ErrorCode.INVALID_FRAME, f"body is {TOO_DEEP}")
        if not isinstance(body, dict):
            return error_response(ErrorCode.INVALID_FRAME, "body must be a JSON object")
        return body

    async def frames(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if request.content_type in (MSGPACK, "application/x-msgpack"):
            codec: Codec = self.msgpack
        elif request.content_type in (JSON, ""):
            codec = self.json
        else:
            return _unsupported(f"expected {JSON} or {MSGPACK}, got {request.content_type}")
        return await self._dispatch(request.body, request, codec)

    async def open(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=False)
        if isinstance(body, HttpResponse):
            return body
        env = body.get("env")
        if env is not None and not isinstance(env, str):
            return error_response(ErrorCode.INVALID_FRAME, "`env` must be a string", field="env")
        return await self._dispatch(Open(id=next(self._ids), env=env), request)

    async def reset(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=False)
        if isinstance(body, HttpResponse):
            return body
        try:
            frame = msgspec.convert(
                {"op": "reset", "id": next(self._ids), "session": params["sid"], **body}, Reset
            )
        except msgspec.ValidationError as exc:
            return error_response(ErrorCode.INVALID_FRAME, f"invalid reset body: {exc}")
        return await self._dispatch(frame, request)

    async def step(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=True)
        if isinstance(body, HttpResponse):
            return body
        if set(body) != {"action"}:
            return error_response(
                ErrorCode.INVALID_FRAME, 'the body must be {"action": ...}', field="action"
            )
        raw = msgspec.Raw(msgspec.json.encode(body["action"]))
        return await self._dispatch(
            Step(id=next(self._ids), session=params["sid"], action=raw), request
        )

    def _on_session(self, kind: type[Any]) -> Any:
        """A route whose optional JSON body holds the fields of a `kind` frame but its
        session's (snapshot, restore, fork)."""
        op = kind.__struct_config__.tag

        async def route(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
            body = self._body(request, required=False)
            if isinstance(body, HttpResponse):
                return body
            fields = {"op": op, "id": next(self._ids), **body, "session": params["sid"]}
            try:
                frame = msgspec.convert(fields, kind)
            except msgspec.ValidationError as exc:
                return error_response(ErrorCode.INVALID_FRAME, f"invalid {op} body: {exc}")
            return await self._dispatch(frame, request)

        return route

    async def export(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        frame = ExportSnapshot(id=next(self._ids), snapshot=params["snap"])
        return await self._dispatch(frame, request)

    async def drop(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        frame = DropSnapshot(id=next(self._ids), snapshot=params["snap"])
        return await self._dispatch(frame, request)

    async def state(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(GetState(id=next(self._ids), session=params["sid"]), request)

    async def render(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(Render(id=next(self._ids), session=params["sid"]), request)

    async def close(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(Close(id=next(self._ids), session=params["sid"]), request)

    async def keepalive(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """Renew the session's lease: `kept`, or `unknown_session` (404) when it is gone."""
        sid = params["sid"]
        frame = Keepalive(id=next(self._ids), sessions=[sid])
        answer = await self.runner.ask(self.owner_for(request), self.json, frame)
        if isinstance(answer, Kept) and sid in answer.unknown:
            answer = self.engine.gone(sid, frame.id)
        return frame_response(self.json, answer)
