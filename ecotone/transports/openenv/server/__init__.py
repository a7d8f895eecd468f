"""OpenEnv's wire protocol, served by ecotone's engine: a second profile at the edge.

The `openenv` transport's server end, which the `websocket` and `http` transports mount:
`bridge.py` (engine requests on behalf of one owner), `ws.py` (`/ws`), `http.py` (the HTTP
routes). OpenEnv's JSON-RPC dialect at `/mcp` and in `/ws` `mcp` messages is translated by
`ecotone.compat.openenv.rpc`.

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
