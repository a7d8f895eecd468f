"""The engine's answers that are not an env's own data: every error frame it sends, built in
one place so that the same failure reads the same on every transport."""

from __future__ import annotations

from typing import Any

import msgspec

from ecotone.kernel.calls import EnvLost
from ecotone.kernel.contract import InvalidAction
from ecotone.kernel.validation import describe_validation_error
from ecotone.specs import Error, ErrorCode
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.frames import RequestId


def error(
    code: ErrorCode,
    text: str,
    id: RequestId | None = None,
    session: str | None = None,
    **details: Any,
) -> Error:
    return Error(id=id, code=code, message=text, session=session, details=details)


def env_error(exc: BaseException, id: RequestId | None, session: str | None, what: str) -> Error:
    """The env raised in `what` (`step`, `reset`, `tool 'x'`...), or the process it ran in
    died (`EnvLost`: `details.reason` is `env_lost`)."""
    kind = type(exc).__qualname__
    if isinstance(exc, EnvLost):
        return error(
            ErrorCode.ENV_ERROR,
            f"the env's process died in {what}: {exc}; a client connected with resume=True "
            "resumes from the session's last checkpoint, any other may reset (a fresh process) "
            "or close",
            id,
            session,
            type=kind,
            message=str(exc),
            reason="env_lost",
            **exc.details,
        )
    return error(
        ErrorCode.ENV_ERROR,
        f"environment raised {kind} in {what}: {exc}",
        id,
        session,
        type=kind,
        message=str(exc),
    )


def rejected(exc: InvalidAction, env: str, rid: RequestId, session: str) -> Error:
    """The `invalid_action` error for an action the env refused (`ecotone.InvalidAction`)."""
    extra: dict[str, Any] = {}
    for key, value in exc.details.items():
        try:
            extra[key] = msgspec.to_builtins(value, str_keys=True)
        except (TypeError, ValueError):  # not plain data: send what it looks like
            extra[key] = repr(value)
    reason = exc.reason or "action rejected"
    field = exc.field
    details = {**extra, "path": f"$.{field}" if field else "$", "field": field, "reason": reason}
    where = f" (field `{field}`)" if field else ""
    return error(
        ErrorCode.INVALID_ACTION,
        f"invalid action for env {env!r}: {reason}{where}",
        rid,
        session,
        **details,
    )


def invalid_action(exc: msgspec.DecodeError, env: str, rid: RequestId, session: str) -> Error:
    """The `invalid_action` error for an action that does not decode into the env's type."""
    if not isinstance(exc, msgspec.ValidationError):  # pragma: no cover - the frame parsed
        return error(ErrorCode.INVALID_ACTION, f"action is not decodable: {exc}", rid, session)
    details = describe_validation_error(exc)
    where = f" (field `{details['field']}`)" if details["field"] else ""
    return error(
        ErrorCode.INVALID_ACTION,
        f"invalid action for env {env!r}: {details['reason']}{where}",
        rid,
        session,
        **details,
    )


def no_action(rid: RequestId, session: str) -> Error:
    """A `step_many` item with neither an action nor a reset."""
    return error(
        ErrorCode.INVALID_ARGUMENT,
        "a step_many item needs `action` (a step) or `reset` (a reset)",
        rid,
        session,
    )


def too_deep(env: str, rid: RequestId, session: str) -> Error:
    return error(
        ErrorCode.INVALID_ACTION,
        f"invalid action for env {env!r}: {TOO_DEEP}",
        rid,
        session,
        path="$",
        field="",
        reason=TOO_DEEP,
    )


def unknown_session(
    session: str, rid: RequestId | None, reclaimed: str | None = None, lease: float | None = None
) -> Error:
    """No open session `session` for this connection; `reclaimed`: why the server took it
    back lately (`lease`, `unclaimed`: `leases.py`), which the message and details say."""
    if reclaimed is None:
        return error(
            ErrorCode.UNKNOWN_SESSION,
            f"no open session {session!r} on this connection "
            "(never opened, already closed, or reclaimed after its lease ran out)",
            rid,
            session,
        )
    held = "limits.stateless_grace" if reclaimed == "unclaimed" else "limits.lease"
    return error(
        ErrorCode.UNKNOWN_SESSION,
        f"session {session!r} was reclaimed: no request or keepalive about it reached the "
        f"server for {lease:g} s ({held})",
        rid,
        session,
        reclaimed=reclaimed,
    )


def reset_required(session: str, rid: RequestId) -> Error:
    return error(
        ErrorCode.RESET_REQUIRED,
        "step before reset: call reset to start an episode",
        rid,
        session,
    )


def episode_done(session: str, rid: RequestId) -> Error:
    return error(
        ErrorCode.EPISODE_DONE,
        "the episode is over (done or truncated); call reset to start the next one",
        rid,
        session,
    )


def moved_already(seat: str, waiting: list[str], rid: RequestId, session: str) -> Error:
    """A simultaneous env's seat moving again in a round, or not moving in it at all."""
    why = (
        f"waiting for {', '.join(waiting)}"
        if waiting
        else "no seat moves now (the round is being played)"
    )
    return error(
        ErrorCode.NOT_YOUR_TURN,
        f"{seat} does not move now in this round: {why}",
        rid,
        session,
        seat=seat,
        turn=None,
        acting=waiting,
    )


def round_dropped(why: str, rid: RequestId, session: str) -> Error:
    """A simultaneous env's move whose round was never played: the episode ended or was reset
    before every seat moved."""
    return error(
        ErrorCode.EPISODE_DONE,
        f"the round this move was for was never played: {why}",
        rid,
        session,
    )


def broken(session: str, rid: RequestId | None) -> Error:
    """A request for a session whose env was set aside after a call outlived its deadline."""
    return error(
        ErrorCode.RESET_REQUIRED,
        "the session's env was set aside after a call did not end within its deadline: "
        "reset to get a fresh env instance, or close the session",
        rid,
        session,
        reason="timed_out",
    )


def timed_out(
    what: str,
    seconds: float | None,
    rid: RequestId | None,
    session: str | None,
    why: str | None = None,
) -> Error:
    """A call given up on: past its deadline, or because the server is stopping (`why`)."""
    cause = why or f"the env's {what} did not end within {seconds}s"
    then = "the session's env is set aside: reset for a fresh one, or close"
    return error(
        ErrorCode.TIMEOUT,
        f"{cause}; {then if session else 'it was abandoned'}",
        rid,
        session,
        seconds=seconds,
    )


def named_twice(session: str, rid: RequestId, first: int, index: int) -> Error:
    """A `step_many` item naming a session an earlier item of the same batch named."""
    return error(
        ErrorCode.INVALID_ARGUMENT,
        f"step_many item {index} names session {session!r} again (first at item {first}); "
        "a batch steps each session at most once, so this item was not stepped",
        rid,
        session,
        reason="duplicate_session",
        item=index,
        first_item=first,
    )


def unencodable(
    env: str, what: str, exc: BaseException, rid: RequestId, session: str | None
) -> Error:
    return error(
        ErrorCode.ENV_ERROR,
        f"environment {env!r} returned {what} that cannot be encoded: {exc}",
        rid,
        session,
        type=type(exc).__qualname__,
        message=str(exc),
    )


def internal(exc: BaseException, rid: RequestId | None, session: str | None) -> Error:
    return error(
        ErrorCode.INTERNAL,
        f"internal error: {type(exc).__qualname__}: {exc}",
        rid,
        session,
    )


def unknown_snapshot(sid: str, rid: RequestId, session: str | None) -> Error:
    """No snapshot `sid` is held for the requester (never made, dropped, or another's)."""
    return error(
        ErrorCode.UNKNOWN_SNAPSHOT,
        f"no snapshot {sid!r} is held here for this token or connection (never made, dropped, "
        "or another's)",
        rid,
        session,
        snapshot=sid,
    )


def snapshot_mismatch(message: str, what: str, rid: RequestId, session: str | None) -> Error:
    """A saved episode this session's env cannot take; `what` differs (`seal`, `env`...)."""
    return error(ErrorCode.SNAPSHOT_MISMATCH, message, rid, session, differs=what)


NO_CHECKPOINTS = "this server keeps no checkpoints: start it with --checkpoint-dir DIR"
"""Why a durable snapshot or a checkpoint restore is `unsupported` (and why a draining
session cannot be resumed)."""


def no_checkpoints(rid: RequestId, session: str) -> Error:
    """A durable snapshot, or a restore of a checkpoint, on a server without a directory."""
    return error(ErrorCode.UNSUPPORTED, NO_CHECKPOINTS, rid, session)
