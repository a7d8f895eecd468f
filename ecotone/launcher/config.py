"""The `[launch]` table of `ecotone.toml`: how `ecotone launch` starts a server.

The kernel's config reads the table as plain data (it knows nothing of providers);
`launch_config` structures it here, with errors that name the key (`launch.resources.cpus`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ecotone.kernel.config import structure_as
from ecotone.providers.contract import Resources, server_transport


@attrs.frozen(slots=True, kw_only=True)
class LaunchConfig:
    """How `ecotone launch` starts a server: which provider, and the LaunchSpec fields that
    are settings rather than code (`ecotone.launch` in Python takes them as arguments)."""

    provider: str = "process"
    transport: str = attrs.field(default="websocket", validator=server_transport)
    image: str | None = None
    ready_timeout: float = 60.0
    resources: Resources = attrs.field(factory=Resources)
    options: dict[str, Any] = attrs.field(factory=dict)


def launch_config(table: Mapping[str, Any], source: str = "configuration") -> LaunchConfig:
    """The `[launch]` table (`ServerConfig.launch`) as a LaunchConfig; ConfigError if wrong."""
    return structure_as(table, LaunchConfig, source, "launch")
