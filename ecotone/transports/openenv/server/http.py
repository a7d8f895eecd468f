"""OpenEnv's HTTP routes: `/reset`, `/step`, `/state`, `/close`, its JSON-RPC at `/mcp`,
`/metadata`, `/schema` and the Task API, with one episode kept per client session."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ecotone.compat.openenv.mapping import http_status, pydantic_errors, refusal_observation
from ecotone.compat.openenv.rpc import McpDialect
from ecotone.kernel import Owner
from ecotone.kernel.tasks import MAX_PAGE
from ecotone.server.runner import Runner
from ecotone.specs import (
    Error,
    ErrorCode,
    GetState,
    ListTasks,
    ObservationFrame,
    Response,
    StateFrame,
    Step,
    TaskPage,
)
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.http import HttpRequest, HttpResponse, json_response
from ecotone.transports.openenv.server.bridge import Bridge, ids

OPENENV_API_VERSION: Final = "1.0.0"
"""`info.version` of /openapi.json: the OpenEnv HTTP profile version we speak."""
SESSION_HEADER: Final = "x-ecotone-session"
SESSION_COOKIE: Final = "ecotone_session"


def _detail(status: int, detail: Any) -> HttpResponse:
    return json_response(status, {"detail": detail})


def _error_response(error: Error) -> HttpResponse:
    if error.code == ErrorCode.INVALID_ACTION:
        return _detail(422, pydantic_errors(error))
    return _detail(http_status(error.code), error.message)


class OpenEnvHttp:
    """OpenEnv's HTTP routes, keeping one episode per client session.

    OpenEnv's own HTTP routes hold nothing between requests, and most of its clients never
    send back the session id (header or cookie) a reset answers with. So a reset that names
    no session opens one *leased* to the client's address (the engine's rules,
    `ecotone.kernel.leases`): loose until a request names it, and closed after
    `limits.stateless_grace` if none does; a client keeps its last few loose ones (its next
    unnamed reset replaces the oldest; all of them when the server is full), and holds at
    most `limits.max_http_sessions_per_client` sessions made this way."""

    def __init__(self, runner: Runner, owner: Owner) -> None:
        self.engine = runner.engine
        self.runner = runner
        self.bridge = Bridge(runner, owner)

    def _session_of(self, request: HttpRequest) -> str | None:
        session = request.headers.get(SESSION_HEADER) or request.cookie(SESSION_COOKIE)
        if session is not None:
            self.engine.claim(self.bridge.owner, session)  # named: no longer loose
        return session

    def _alive(self, session: str) -> bool:
        return self.engine.sessions.get(session, self.bridge.owner) is not None

    def _make_room(self, client: str, *, full: bool = False) -> bool:
        """Close what must go before a session is opened for `client` (its older loose
        sessions; all of them when the server is `full`); whether it may have another."""
        allowed, closes = self.engine.make_room(self.bridge.owner, client, full=full)
        if closes:
            self.runner.start(closes)
        return allowed

    async def close(self, request: HttpRequest) -> HttpResponse:
        """`POST /close`: end the session the request names (header or cookie)."""
        session = self._session_of(request)
        if session is None:
            return _detail(422, f"name the session: the {SESSION_HEADER} header or cookie")
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
            client = request.peer
            if not self._make_room(client):
                limit = self.engine.limits.max_http_sessions_per_client
                return _detail(
                    503,
                    f"this client holds {limit} sessions (limits.max_http_sessions_per_client):"
                    " close some (POST /close), or send their id back to reuse one",
                )
            opened = await self.bridge.open()
            if isinstance(opened, Error) and opened.code == ErrorCode.CAPACITY:
                # Full: this client's loose sessions are the ones its own resets replace.
                self._make_room(client, full=True)
                opened = await self.bridge.open()
            if isinstance(opened, Error):
                return _error_response(opened)
            session = opened.session
            self.engine.lease(self.bridge.owner, session, client)
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
                    Step(id=next(ids), session=opened.session, action=raw)
                )
            finally:
                await self.bridge.close(opened.session)
            return self._observation(response, None)
        response = await self.bridge.call(Step(id=next(ids), session=session, action=raw))
        return self._observation(response, session)

    async def state(self, request: HttpRequest) -> HttpResponse:
        session = self._session_of(request)
        if session is None:
            opened = await self.bridge.open()
            if isinstance(opened, Error):
                return _error_response(opened)
            try:
                response = await self.bridge.call(GetState(id=next(ids), session=opened.session))
            finally:
                await self.bridge.close(opened.session)
        else:
            response = await self.bridge.call(GetState(id=next(ids), session=session))
        if isinstance(response, Error):
            return _error_response(response)
        assert isinstance(response, StateFrame)
        return json_response(200, self.bridge.state(response))

    async def mcp(self, request: HttpRequest) -> HttpResponse:
        reply = await McpDialect(self.bridge.call).handle(request.body)
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
            ListTasks(id=next(ids), env=env, split=split, offset=offset, limit=limit)
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
