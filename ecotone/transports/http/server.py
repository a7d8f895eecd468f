"""The `http` transport: HTTP/1.1 (h11 on trio, keep-alive) plus WebSocket, on one port.

Served side by side:

* ecotone's native API. `POST /v1/frames` takes any request frame (JSON, or MessagePack with
  `content-type: application/msgpack`) and answers with the response frame, so every op and
  every error code is the same as on the other transports. Convenience routes map onto the
  same frames: `POST /v1/sessions` (open), `POST /v1/sessions/{id}/reset`,
  `POST /v1/sessions/{id}/step` (`{"action": ...}`), `GET /v1/sessions/{id}/state`,
  `DELETE /v1/sessions/{id}` (or `POST /v1/sessions/{id}/close`, which a browser can send
  with `navigator.sendBeacon` as a page unloads), `GET /v1/sessions/{id}/render` (the env's
  custom view), `GET /v1/describe`. Sessions live across requests and connections (the id is
  the handle) until closed or idle past `idle_timeout`.
* With `web=True`, the web UI: `GET /web` and its files (`transports/webui.py`); `GET /`
  redirects there. Without it those are 404.
* OpenEnv's HTTP profile (`/reset`, `/step`, `/state`, `/health`, `/metadata`, `/schema`,
  `/mcp`, `/openapi.json`; see `openenv.py`).
* WebSocket upgrades: `/` for ecotone frames, `/ws` for OpenEnv's messages.

Status codes for error frames: 400 invalid_frame / unknown_op / unsupported_version,
404 unknown_session / unknown_env, 409 reset_required / episode_done, 413 too_large,
415 wrong content type, 422 invalid_action / invalid_argument, 501 unsupported,
503 capacity, 500 env_error / internal. Slow clients get 408 after `REQUEST_TIMEOUT`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from ecotone.kernel import Owner
from ecotone.server.admission import TOKEN_COOKIE
from ecotone.server.http11 import refusals
from ecotone.server.http11.asgi import Streamed
from ecotone.server.http11.connection import guarded_connection
from ecotone.server.metrics import CONTENT_TYPE
from ecotone.server.runner import Runner
from ecotone.server.sockets import REFUSED, connection_stream, serve_tcp
from ecotone.specs import (
    Close,
    Codec,
    Describe,
    Error,
    ErrorCode,
    GetState,
    GetTask,
    JsonCodec,
    ListTasks,
    MsgpackCodec,
    Open,
    Render,
    Reset,
    Response,
    Step,
)
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.errors import HTTP_STATUS
from ecotone.specs.http import (
    JSON,
    MSGPACK,
    HttpRequest,
    HttpResponse,
    json_response,
    speaks_streamable_http,
)
from ecotone.specs.version import VERSION
from ecotone.transports.http import webui
from ecotone.transports.http.upgrade import serve_connection
from ecotone.transports.mcp.http import McpHttp
from ecotone.transports.mcp.sdk import available as mcp_missing
from ecotone.transports.openenv.server import OPENENV_API_VERSION, OpenEnvHttp

log = logging.getLogger("ecotone.http")

STATUS = HTTP_STATUS
_AT_CAPACITY = refusals.at_capacity(REFUSED).serialize()

Handler = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse | Streamed]]


_error_frame = refusals.error_response


class HttpServer:
    """Routes for one kernel. All HTTP requests share one session owner. `web`: also serve
    the web UI's page and files under /web."""

    def __init__(
        self,
        runner: Runner,
        *,
        web: bool = False,
        background: trio.Nursery | None = None,
        describe_only: bool = False,
    ) -> None:
        """`describe_only`: the websocket transport's few plain routes (what clients of
        OpenEnv read over HTTP beside `/ws`: /health, /metadata, /schema, /openapi.json)."""
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
        self._ids = 0
        self.routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = []
        if describe_only:
            self._route(r"/metrics", GET=self.metrics)
            self._route(r"/health", GET=self.health)
            self._route(r"/openapi.json", GET=self.openapi)
            self._route(r"/metadata", GET=self._sync(self.openenv.metadata))
            self._route(r"/schema", GET=self._sync(self.openenv.schema))
            self._route(r"/v1/describe", GET=self.describe)
            self._task_routes()
            self.web_assets = {}
            self.not_found = (
                "not a WebSocket handshake: this server speaks WebSocket, and answers "
                "GET /health, /metrics, /metadata, /schema, /openapi.json, /v1/describe and "
                "the task routes; "
                "serve with "
                "--transport http for the HTTP API"
            )
            return
        self.not_found = "Not Found"
        self._route(r"/v1/frames", POST=self.frames)
        self._route(r"/v1/describe", GET=self.describe)
        self._route(r"/v1/sessions", POST=self.open)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)", DELETE=self.close)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)/reset", POST=self.reset)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)/step", POST=self.step)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)/state", GET=self.state)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)/render", GET=self.render)
        self._route(r"/v1/sessions/(?P<sid>[^/]+)/close", POST=self.close)
        self._route(r"/health", GET=self.health)
        self._route(r"/metrics", GET=self.metrics)
        self._route(r"/openapi.json", GET=self.openapi)
        self._route(r"/reset", POST=lambda r, _: self.openenv_for(r).reset(r))
        self._route(r"/step", POST=lambda r, _: self.openenv_for(r).step(r))
        self._route(r"/state", GET=lambda r, _: self.openenv_for(r).state(r))
        self._route(r"/close", POST=lambda r, _: self.openenv_for(r).close(r))
        self._route(r"/mcp", POST=self.mcp, GET=self.mcp, DELETE=self.mcp)
        self._route(r"/metadata", GET=self._sync(self.openenv.metadata))
        self._route(r"/schema", GET=self._sync(self.openenv.schema))
        self._task_routes()
        self.web_assets = webui.load() if web else {}
        if web:
            self._route(r"/", GET=self.web_root)
            self._route(r"/web", GET=self.web_page)
            self._route(r"/web/", GET=self.web_page)
            self._route(r"/web/(?P<name>[A-Za-z0-9_.-]+)", GET=self.web_file)

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

    def _task_routes(self) -> None:
        """ecotone's `GET /v1/tasks` and `GET /v1/task`, and OpenEnv's Task API."""
        self._route(r"/v1/tasks", GET=self.list_tasks)
        self._route(r"/v1/task", GET=self.get_task)
        self._route(r"/list_environments", GET=self._sync(self.openenv.list_environments))
        self._route(r"/(?P<env>[^/]+)/splits", GET=self.openenv.splits)
        self._route(
            r"/(?P<env>[^/]+)/(?P<what>tasks|num_tasks|task|task_range)",
            POST=self.openenv.task_api,
        )

    @staticmethod
    def _sync(fn: Callable[[], HttpResponse]) -> Handler:
        async def handler(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
            return fn()

        return handler

    def _route(self, pattern: str, **methods: Handler) -> None:
        self.routes.append((re.compile(pattern + r"\Z"), methods))

    async def mcp(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse | Streamed:
        """MCP's streamable HTTP (the SDK, `ecotone/transports/mcp/http.py`), or OpenEnv's
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
            return json_response(405, {"detail": "Method Not Allowed"}, [("Allow", "POST")])
        return await self.openenv_for(request).mcp(request)

    async def handle(self, request: HttpRequest) -> HttpResponse | Streamed:
        for pattern, methods in self.routes:
            match = pattern.match(request.path)
            if match is None:
                continue
            handler = methods.get(request.method)
            if handler is None and request.method == "HEAD":
                handler = methods.get("GET")
            if handler is None:
                allowed = ", ".join(sorted(methods))
                return json_response(405, {"detail": "Method Not Allowed"}, [("Allow", allowed)])
            return await handler(request, match.groupdict())
        return json_response(404, {"detail": self.not_found})

    # --- native API ------------------------------------------------------------------------

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    async def _dispatch(
        self, frame: Any, request: HttpRequest, codec: Codec | None = None
    ) -> HttpResponse:
        codec = codec or self.json
        response = await self.runner.ask(self.owner_for(request), codec, frame)
        return self._frame_response(codec, response)

    def _frame_response(self, codec: Codec, response: Response) -> HttpResponse:
        status = STATUS.get(response.code, 400) if isinstance(response, Error) else 200
        kind = MSGPACK if codec.binary else JSON
        return HttpResponse(status, codec.encode(response), kind)

    def _body(self, request: HttpRequest, required: bool) -> dict[str, Any] | HttpResponse:
        if not request.body.strip():
            if required:
                return _error_frame(ErrorCode.INVALID_FRAME, "this request needs a JSON body")
            return {}
        if request.content_type not in (JSON, ""):
            return HttpResponse(
                415,
                msgspec.json.encode(
                    Error(
                        id=None,
                        code=ErrorCode.INVALID_FRAME,
                        message=f"expected {JSON}, got {request.content_type}",
                    )
                ),
            )
        try:
            body = msgspec.json.decode(request.body)
        except msgspec.DecodeError as exc:
            return _error_frame(ErrorCode.INVALID_FRAME, f"body is not valid JSON: {exc}")
        except RecursionError:
            return _error_frame(ErrorCode.INVALID_FRAME, f"body is {TOO_DEEP}")
        if not isinstance(body, dict):
            return _error_frame(ErrorCode.INVALID_FRAME, "body must be a JSON object")
        return body

    async def frames(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if request.content_type in (MSGPACK, "application/x-msgpack"):
            codec: Codec = self.msgpack
        elif request.content_type in (JSON, ""):
            codec = self.json
        else:
            return HttpResponse(
                415,
                msgspec.json.encode(
                    Error(
                        id=None,
                        code=ErrorCode.INVALID_FRAME,
                        message=f"expected {JSON} or {MSGPACK}, got {request.content_type}",
                    )
                ),
            )
        return await self._dispatch(request.body, request, codec)

    async def describe(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(
            Describe(id=self._next_id(), env=request.query.get("env")), request
        )

    def _ints(self, request: HttpRequest, *names: str) -> dict[str, int] | HttpResponse:
        out = {}
        for name in names:
            value = request.query.get(name)
            if value is None:
                continue
            try:
                out[name] = int(value)
            except ValueError:
                return _error_frame(
                    ErrorCode.INVALID_ARGUMENT, f"`{name}` must be an integer", field=name
                )
        return out

    async def list_tasks(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """`GET /v1/tasks?split=&offset=&limit=&env=`: the `list_tasks` frame."""
        numbers = self._ints(request, "offset", "limit")
        if isinstance(numbers, HttpResponse):
            return numbers
        query = request.query
        frame = ListTasks(
            id=self._next_id(), env=query.get("env"), split=query.get("split"), **numbers
        )
        return await self._dispatch(frame, request)

    async def get_task(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """`GET /v1/task?id=` or `?split=&index=` (and `env=`): the `get_task` frame."""
        numbers = self._ints(request, "index")
        if isinstance(numbers, HttpResponse):
            return numbers
        query = request.query
        frame = GetTask(
            id=self._next_id(),
            env=query.get("env"),
            task=query.get("id"),
            split=query.get("split"),
            **numbers,
        )
        return await self._dispatch(frame, request)

    async def open(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=False)
        if isinstance(body, HttpResponse):
            return body
        env = body.get("env")
        if env is not None and not isinstance(env, str):
            return _error_frame(ErrorCode.INVALID_FRAME, "`env` must be a string", field="env")
        return await self._dispatch(Open(id=self._next_id(), env=env), request)

    async def reset(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=False)
        if isinstance(body, HttpResponse):
            return body
        try:
            frame = msgspec.convert(
                {"op": "reset", "id": self._next_id(), "session": params["sid"], **body}, Reset
            )
        except msgspec.ValidationError as exc:
            return _error_frame(ErrorCode.INVALID_FRAME, f"invalid reset body: {exc}")
        return await self._dispatch(frame, request)

    async def step(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self._body(request, required=True)
        if isinstance(body, HttpResponse):
            return body
        if set(body) != {"action"}:
            return _error_frame(
                ErrorCode.INVALID_FRAME, 'the body must be {"action": ...}', field="action"
            )
        raw = msgspec.Raw(msgspec.json.encode(body["action"]))
        return await self._dispatch(
            Step(id=self._next_id(), session=params["sid"], action=raw), request
        )

    async def state(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(GetState(id=self._next_id(), session=params["sid"]), request)

    async def render(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(Render(id=self._next_id(), session=params["sid"]), request)

    async def web_root(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _to_web(request)

    async def web_page(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if "token" in request.query:  # it passed Admission: keep it in a cookie, not the URL
            return _to_web(request)
        page = webui.asset(self.web_assets, "index.html")
        assert page is not None  # webui.load checks it is there
        return page

    async def web_file(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        found = webui.asset(self.web_assets, params["name"])
        return found if found is not None else json_response(404, {"detail": "Not Found"})

    async def close(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(Close(id=self._next_id(), session=params["sid"]), request)

    async def metrics(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """Prometheus' text format (`ecotone/server/metrics.py`)."""
        metrics = self.runner.metrics
        if metrics is None:
            return json_response(404, {"detail": "this server keeps no metrics"})
        return HttpResponse(200, metrics.render(), CONTENT_TYPE)

    async def health(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return json_response(200, {"status": "healthy"})

    async def openapi(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        paths: dict[str, Any] = {}
        for pattern, methods in self.routes:
            path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern.pattern.removesuffix(r"\Z"))
            paths[path] = {
                m.lower(): {"responses": {"200": {"description": "OK"}}} for m in methods
            }
        spec = self.engine.envs[self.engine.default_env]
        return json_response(
            200,
            {
                "openapi": "3.1.0",
                "info": {
                    "title": f"ecotone: {spec.name}",
                    "version": OPENENV_API_VERSION,
                    "x-ecotone-version": VERSION,
                },
                "paths": paths,
            },
        )


# --- the web UI's redirect ---------------------------------------------------------------------


def _to_web(request: HttpRequest) -> HttpResponse:
    """A redirect to the web UI; a `?token=` (checked already) becomes its cookie: HttpOnly,
    so the page's scripts cannot read it, and SameSite=Strict, so no other site's page can
    make the browser send it."""
    headers = [("location", "/web")]
    token = request.query.get("token")
    if token:
        headers.append(("set-cookie", f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"))
    return HttpResponse(303 if token else 302, b"", "text/plain", headers)


class HttpTransport:
    """HTTP/1.1 and WebSocket on one port: the native API, OpenEnv's profile, both sockets."""

    name = "http"
    description = (
        "HTTP/1.1 + WebSocket: native API, OpenEnv routes, /ws, MCP at /mcp (http://HOST:PORT)"
    )
    serves_web = True

    async def serve(
        self,
        runner: Runner,
        host: str,
        port: int,
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
        web: bool = False,
    ) -> None:
        async with trio.open_nursery() as background:  # what routes start (MCP's manager)
            server = HttpServer(runner, web=web, background=background)
            background.start_soon(server.openenv.sweep)
            await self._serve(runner, host, port, server, task_status)
            background.cancel_scope.cancel()

    async def _serve(
        self, runner: Runner, host: str, port: int, server: HttpServer, task_status: Any
    ) -> None:
        limits = runner.engine.limits

        async def handler(stream: trio.SocketStream) -> None:
            await guarded_connection(
                connection_stream(stream, limits),
                lambda s: serve_connection(runner, s, server.handle),
            )

        await serve_tcp(runner, host, port, "http", handler, task_status, _AT_CAPACITY)
