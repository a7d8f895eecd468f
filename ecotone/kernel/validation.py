"""Turning msgspec validation errors into messages and details that name the field."""

from __future__ import annotations

import re
from typing import Any

import msgspec

_AT = re.compile(r"^(?P<reason>.*?) - at `(?P<path>[^`]*)`$", re.S)
_MISSING = re.compile(r"(?:missing required|contains unknown) field `(?P<field>[^`]+)`")
_INDEX = re.compile(r"\[(\d+)\]")


def _dotted(path: str) -> str:
    """`$.pos[2].x` -> `pos.2.x` (the form people write)."""
    body = path[1:] if path.startswith("$") else path
    body = _INDEX.sub(r".\1", body)
    return body.lstrip(".")


def describe_validation_error(exc: msgspec.ValidationError | msgspec.DecodeError) -> dict[str, Any]:
    """Details for an `invalid_action`/`invalid_frame` error: `path`, `field`, `reason`."""
    text = str(exc)
    match = _AT.match(text)
    reason, path = (match["reason"], match["path"]) if match else (text, "$")
    missing = _MISSING.search(reason)
    if missing:
        path = f"{path}.{missing['field']}"
    return {"path": path, "field": _dotted(path), "reason": reason}
