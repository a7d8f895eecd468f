"""The plain HTTP GETs served beside the WebSocket endpoints, on both transports' ports.

What OpenEnv's consumers and operators read over HTTP next to a socket: `/health` (liveness:
the server is up), `/ready` (readiness: 200 while the server has room for a new session and is
not draining, 503 saying why not, so a load balancer sends new connections elsewhere),
`/metrics` (Prometheus), `/openapi.json` (the routes of this port), OpenEnv's `/metadata`
and `/schema`, ecotone's `GET /v1/describe`, `GET /v1/tasks` and `GET /v1/task`, and
OpenEnv's Task API (`/list_environments`, `/{env}/splits`, `POST /{env}/tasks` and
friends). The websocket transport serves these alone; the http transport mounts them with
its own routes. None of them makes or touches a session.
"""

from __future__ import annotations

import itertools
from typing import Any

from ecotone.server.http11.refusals import error_response
from ecotone.server.http11.router import Router, sync
from ecotone.server.metrics import CONTENT_TYPE
from ecotone.server.runner import Runner
from ecotone.specs import (
    Codec,
    Describe,
    Error,
    ErrorCode,
    GetTask,
    JsonCodec,
    ListTasks,
    Response,
)
from ecotone.specs.errors import HTTP_STATUS
from ecotone.specs.http import JSON, MSGPACK, HttpRequest, HttpResponse, json_response
from ecotone.specs.version import VERSION
from ecotone.transports.openenv.server.http import OPENENV_API_VERSION, OpenEnvHttp

NOT_A_HANDSHAKE = (
    "not a WebSocket handshake: this server speaks WebSocket, and answers "
    "GET /health, /ready, /metrics, /metadata, /schema, /openapi.json, /v1/describe and "
    "the task routes; serve with --transport http for the HTTP API"
)
"""The websocket transport's 404: what it answers instead, and where the HTTP API is."""


def frame_response(codec: Codec, response: Response) -> HttpResponse:
    """A response frame as an HTTP answer: 200, or an error's status by its code."""
    status = HTTP_STATUS.get(response.code, 400) if isinstance(response, Error) else 200
    return HttpResponse(status, codec.encode(response), MSGPACK if codec.binary else JSON)


def query_ints(request: HttpRequest, *names: str) -> dict[str, int] | HttpResponse:
    """The query parameters `names` that are given, as integers; a 400 frame if one is not."""
    out = {}
    for name in names:
        value = request.query.get(name)
        if value is None:
            continue
        try:
            out[name] = int(value)
        except ValueError:
            return error_response(
                ErrorCode.INVALID_ARGUMENT, f"`{name}` must be an integer", field=name
            )
    return out


def plain_routes(router: Router, runner: Runner, openenv: OpenEnvHttp | None = None) -> None:
    """Add the plain routes (module docstring) to `router`, whose routes `/openapi.json`
    lists. OpenEnv's are `openenv`'s (by default, one of its own)."""
    if openenv is None:
        openenv = OpenEnvHttp(runner, runner.engine.owner(authenticated=True))
    PlainRoutes(runner, router, openenv).install()


class PlainRoutes:
    """The plain routes' handlers, for one router. Their frames go to the engine as
    `openenv`'s owner: none of them depends on who asks."""

    def __init__(self, runner: Runner, router: Router, openenv: OpenEnvHttp) -> None:
        self.runner = runner
        self.engine = runner.engine
        self.router = router
        self.openenv = openenv
        self.json = JsonCodec()
        self._ids = itertools.count(1)

    def install(self) -> None:
        router = self.router
        openenv = self.openenv
        router.add(r"/metrics", GET=self.metrics)
        router.add(r"/health", GET=self.health)
        router.add(r"/ready", GET=self.ready)
        router.add(r"/openapi.json", GET=self.openapi)
        router.add(r"/metadata", GET=sync(openenv.metadata))
        router.add(r"/schema", GET=sync(openenv.schema))
        router.add(r"/v1/describe", GET=self.describe)
        # Before OpenEnv's Task API, whose patterns would take /v1/tasks and /v1/task.
        router.add(r"/v1/tasks", GET=self.list_tasks)
        router.add(r"/v1/task", GET=self.get_task)
        router.add(r"/list_environments", GET=sync(openenv.list_environments))
        router.add(r"/(?P<env>[^/]+)/splits", GET=openenv.splits)
        router.add(
            r"/(?P<env>[^/]+)/(?P<what>tasks|num_tasks|task|task_range)", POST=openenv.task_api
        )

    async def _dispatch(self, frame: Any) -> HttpResponse:
        response = await self.runner.ask(self.openenv.bridge.owner, self.json, frame)
        return frame_response(self.json, response)

    async def metrics(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """Prometheus' text format (`ecotone/server/metrics.py`)."""
        metrics = self.runner.metrics
        if metrics is None:
            return json_response(404, {"detail": "this server keeps no metrics"})
        return HttpResponse(200, metrics.render(), CONTENT_TYPE)

    async def health(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return json_response(200, {"status": "healthy"})

    async def ready(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """200 while the server has room for a new session and is not draining; else 503,
        `status` saying why (`full`, `draining`). Needs no token (readiness probes)."""
        engine = self.engine
        why = engine.readiness()
        body = {
            "status": why or "ready",
            "sessions": len(engine.sessions),
            "capacity": engine.limits.max_sessions,
        }
        return json_response(503 if why else 200, body)

    async def openapi(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        ok = {"responses": {"200": {"description": "OK"}}}
        paths = {
            path: {method.lower(): ok for method in methods}
            for path, methods in self.router.paths().items()
        }
        spec = self.engine.envs[self.engine.default_env]
        info = {
            "title": f"ecotone: {spec.name}",
            "version": OPENENV_API_VERSION,
            "x-ecotone-version": VERSION,
        }
        return json_response(200, {"openapi": "3.1.0", "info": info, "paths": paths})

    async def describe(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return await self._dispatch(Describe(id=next(self._ids), env=request.query.get("env")))

    async def list_tasks(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """`GET /v1/tasks?split=&offset=&limit=&env=`: the `list_tasks` frame."""
        numbers = query_ints(request, "offset", "limit")
        if isinstance(numbers, HttpResponse):
            return numbers
        query = request.query
        frame = ListTasks(
            id=next(self._ids), env=query.get("env"), split=query.get("split"), **numbers
        )
        return await self._dispatch(frame)

    async def get_task(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """`GET /v1/task?id=` or `?split=&index=` (and `env=`): the `get_task` frame."""
        numbers = query_ints(request, "index")
        if isinstance(numbers, HttpResponse):
            return numbers
        query = request.query
        frame = GetTask(
            id=next(self._ids),
            env=query.get("env"),
            task=query.get("id"),
            split=query.get("split"),
            **numbers,
        )
        return await self._dispatch(frame)
