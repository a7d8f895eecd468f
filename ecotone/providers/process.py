"""The `process` provider (being written: registers nothing yet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.kernel.hookspecs import hookimpl


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {}
