"""The one mapping table between ecotone's protocol and OpenEnv's (openenv 0.10.0).

Both directions read this module: the server's OpenEnv profile (OpenEnv clients against an
ecotone server) and the client's `openenv+` channels (ecotone clients against OpenEnv
servers). What does not map one to one is said next to the entry.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ecotone.specs import Error, ErrorCode

# --- error codes -------------------------------------------------------------------------------

WS_ERROR_TO_CODE: Final[dict[str, ErrorCode]] = {
    "VALIDATION_ERROR": ErrorCode.INVALID_ACTION,
    "EXECUTION_ERROR": ErrorCode.ENV_ERROR,
    "CAPACITY_REACHED": ErrorCode.CAPACITY,
    "INVALID_JSON": ErrorCode.INVALID_FRAME,
    "UNKNOWN_TYPE": ErrorCode.UNKNOWN_OP,
    "FACTORY_ERROR": ErrorCode.ENV_ERROR,
    "SESSION_ERROR": ErrorCode.ENV_ERROR,
}
"""OpenEnv `/ws` error code -> ecotone error code (what an `openenv+` client reports)."""

CODE_TO_WS_ERROR: Final[dict[ErrorCode, str]] = {
    ErrorCode.INVALID_ACTION: "VALIDATION_ERROR",
    ErrorCode.CAPACITY: "CAPACITY_REACHED",
}
"""ecotone error code -> OpenEnv `/ws` error code; anything else is `EXECUTION_ERROR`, the
code OpenEnv's server uses for whatever goes wrong in a call."""

HTTP_STATUS: Final[dict[ErrorCode, int]] = {
    ErrorCode.INVALID_ACTION: 422,
    ErrorCode.INVALID_ARGUMENT: 422,
    ErrorCode.INVALID_FRAME: 422,
    ErrorCode.UNKNOWN_SESSION: 404,
    ErrorCode.RESET_REQUIRED: 409,
    ErrorCode.EPISODE_DONE: 409,
    ErrorCode.CAPACITY: 503,
}
"""ecotone error code -> status of OpenEnv's HTTP routes (FastAPI's 422 for validation);
anything else is 500."""


def ws_error_code(code: ErrorCode) -> str:
    return CODE_TO_WS_ERROR.get(code, "EXECUTION_ERROR")


def http_status(code: ErrorCode) -> int:
    return HTTP_STATUS.get(code, 500)


# --- observations ------------------------------------------------------------------------------


def to_openenv_observation(obs: dict[str, Any], *, http: bool) -> dict[str, Any]:
    """An ecotone observation (plain data) in OpenEnv's shape: `{"observation", "reward",
    "done"}` (+ `metadata`). `truncated` stays inside `observation`; the top-level `done` is
    `done or truncated`, since an OpenEnv client has no other way to learn the episode is
    over. Over HTTP, OpenEnv always sends `metadata` and a float reward."""
    obs = dict(obs)
    reward = obs.pop("reward", None)
    done = bool(obs.pop("done", False)) or bool(obs.get("truncated", False))
    if http and reward is not None:
        reward = float(reward)
    out: dict[str, Any] = {"observation": obs, "reward": reward, "done": done}
    metadata = obs.get("metadata") or None
    if http:
        out["metadata"] = metadata
    elif metadata:
        out["metadata"] = metadata
    return out


def from_openenv_observation(data: dict[str, Any]) -> dict[str, Any]:
    """OpenEnv's `{"observation", "reward", "done", "metadata"}` as one ecotone observation."""
    obs = dict(data.get("observation") or {})
    obs["reward"] = data.get("reward")
    obs["done"] = bool(data.get("done", False))
    if data.get("metadata") and "metadata" not in obs:
        obs["metadata"] = data["metadata"]
    return obs


# --- validation errors -------------------------------------------------------------------------


def pydantic_errors(error: Error) -> list[dict[str, Any]]:
    """An `invalid_action` error's details as the pydantic-style list OpenEnv clients expect."""
    details = error.details
    reason = str(details.get("reason", error.message))
    field = str(details.get("field", ""))
    loc: list[str | int] = [int(p) if p.isdigit() else p for p in field.split(".") if p]
    kind = "value_error"
    if "missing required field" in reason:
        kind = "missing"
    elif "unknown field" in reason:
        kind = "extra_forbidden"
    elif reason.startswith("Expected"):
        kind = "type_error"
    entry: dict[str, Any] = {"type": kind, "loc": loc, "msg": reason, "input": None}
    extra = {k: v for k, v in details.items() if k not in _SAID}
    if extra:
        entry["ctx"] = extra
    return [entry]


_SAID: frozenset[str] = frozenset({"path", "field", "reason", "errors"})
MESSAGE_LIMIT = 2000
"""Characters of details carried in a VALIDATION_ERROR's message."""


def validation_message(error: Error) -> str:
    """An `invalid_action` as the message of OpenEnv's `VALIDATION_ERROR`, the one field
    OpenEnv's client passes on (`RuntimeError("Server error: MESSAGE (code: ...)")`): what is
    wrong, the field, and the env's other details (legal moves, the word list's rule)."""
    extra = {k: v for k, v in error.details.items() if k not in _SAID}
    text = f"Invalid message: {error.message}"
    if extra:
        shown = json.dumps(extra, ensure_ascii=False, default=str)
        if len(shown) > MESSAGE_LIMIT:
            shown = shown[:MESSAGE_LIMIT] + "..."
        text += f" {shown}"
    return text


def refusal_observation(error: Error, *, http: bool) -> dict[str, Any]:
    """An `invalid_action` as an OpenEnv observation (`[openenv] invalid_action =
    "observation"`): the episode goes on, nothing is scored, and the observation says what
    was wrong (`error`, `field`, and `details`: the reason and the env's other details), for
    a consumer that shows the model the observation but lets an error end its rollout
    (verifiers' OpenEnv taskset does)."""
    extra = {k: v for k, v in error.details.items() if k not in _SAID}
    obs: dict[str, Any] = {
        "error": validation_message(error).removeprefix("Invalid message: "),
        "field": error.details.get("field", ""),
        # The bare reason, and whatever else the env said (chess's `legal_moves`).
        "details": {"reason": str(error.details.get("reason", error.message)), **extra},
        "metadata": {"error": "invalid_action"},
    }
    return to_openenv_observation({**obs, "reward": 0.0, "done": False}, http=http)


def invalid_action_details(errors: list[Any], message: str) -> tuple[str, dict[str, Any]]:
    """OpenEnv's pydantic-style error list as an `invalid_action` message and its details
    (`path`, `field`, `reason`, and the list itself as `errors`)."""
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    loc = [str(p) for p in first.get("loc", [])]
    reason = str(first.get("msg", message))
    field = ".".join(loc)
    details = {
        "path": "$" + "".join(f".{p}" for p in loc),
        "field": field,
        "reason": reason,
        "errors": errors,
    }
    return f"invalid action: {reason} (field `{field}`)", details


def capacity_message(error: Error) -> tuple[str, Any, Any]:
    """OpenEnv's words for a `capacity` error, and the active and maximum session counts."""
    active, limit = error.details.get("active"), error.details.get("limit")
    message = (
        f"Server at capacity: {active}/{limit} sessions active. Cannot accept new connections."
    )
    return message, active, limit


# --- MCP (OpenEnv's JSON-RPC dialect) ----------------------------------------------------------

MCP_UNSUPPORTED: Final = "Environment does not support MCP"
"""OpenEnv's JSON-RPC error message for an env without tools."""


def mcp_error_code(rpc_code: Any, text: str) -> ErrorCode:
    """The ecotone code for an OpenEnv JSON-RPC error."""
    if MCP_UNSUPPORTED.lower().split(" ", 1)[1] in text.lower():
        return ErrorCode.UNSUPPORTED
    if rpc_code in (-32602, -32601):
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.ENV_ERROR
