"""What checks say when they fail: expectations, and values shown short in messages."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import msgspec

from ecotone.client.errors import ServerError
from ecotone.conformance.report import CheckFailed
from ecotone.specs import Error, ErrorCode, Response


def show(value: Any, limit: int = 160) -> str:
    """Compact JSON for messages, cut at `limit` characters."""
    try:
        text = json.dumps(msgspec.to_builtins(value), separators=(", ", ": "), default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expect(ok: object, what: str, expected: str, seen: str) -> None:
    if not ok:
        raise CheckFailed(what, expected, seen)


def fail(what: str, expected: str, seen: str) -> NoReturn:
    raise CheckFailed(what, expected, seen)


def answer(response: Response) -> str:
    """A response frame, for messages."""
    if isinstance(response, Error):
        return f"[{response.code}] {response.message}"
    return f"a {type(response).__name__.lower()} frame"


def error_text(exc: BaseException, limit: int = 300) -> str:
    """An exception, for messages (an error frame as `[code] message`), cut at `limit`."""
    if isinstance(exc, ServerError):
        text = f"[{exc.code}] {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expect_refused(
    client: Any, action: Any, code: ErrorCode, what: str, expected: str
) -> ServerError:
    """Step with `action` and require the server to refuse it with `code`; the error."""
    try:
        result = client.step(action)
    except ServerError as exc:
        expect(exc.code == code, what, expected, error_text(exc))
        return exc
    fail(what, expected, f"an observation {show(result.observation)}")


def difference(expected: Any, seen: Any) -> tuple[Any, Any]:
    """The keys where two dicts differ (all of both values otherwise)."""
    if isinstance(expected, dict) and isinstance(seen, dict):
        keys = [k for k in {**expected, **seen} if expected.get(k, ...) != seen.get(k, ...)]
        return (
            {k: expected.get(k, "(absent)") for k in keys},
            {k: seen.get(k, "(absent)") for k in keys},
        )
    return expected, seen


def same_trajectory(expected: list[Any], seen: list[Any], labels: list[str], context: str) -> None:
    for i, (want, got) in enumerate(zip(expected, seen, strict=False)):
        if want != got:
            want, got = difference(want, got)
            fail(f"{context}: {labels[i]}", show(want), show(got))
    if len(seen) < len(expected):
        fail(f"{context}: {labels[len(seen)]}", show(expected[len(seen)]), "nothing")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def without_episode_id(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "episode_id"}
