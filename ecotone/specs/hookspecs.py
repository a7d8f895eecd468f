"""The pluggy hooks through which plugins extend ecotone.

A plugin is a module (or object) with functions marked `@hookimpl`, named in the `ecotone`
entry-point group of its distribution:

    [project.entry-points.ecotone]
    myenv = "myenv.plugin"

Contribution hooks return a mapping of names to things; every plugin's mappings are merged and
a name claimed twice is an error that names both plugins. Lifecycle hooks observe sessions
(recording, metrics); they must be cheap and must not raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("ecotone")
hookimpl = pluggy.HookimplMarker("ecotone")


@hookspec
def ecotone_environments() -> Mapping[str, type]:  # type: ignore[empty-body]
    """Environment classes this plugin contributes, by name (`{"counter": CounterEnv}`)."""


@hookspec(firstresult=True)
def ecotone_resolve_environment(name: str) -> type | None:
    """An environment class for a name no plugin lists, or None. For families of envs named
    by pattern, such as `gymnasium:CartPole-v1`; the first plugin to answer wins."""


@hookspec
def ecotone_environment_patterns() -> Mapping[str, str]:  # type: ignore[empty-body]
    """The name patterns this plugin's `ecotone_resolve_environment` answers, each with a
    line saying what it gives (`{"gymnasium:ID[?kw=...]": "any registered Gymnasium env"}`):
    what `ecotone list` shows, since such names cannot be listed one by one."""


@hookspec
def ecotone_transports() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """The server ends of the transports this plugin contributes, by the name `ecotone serve
    --transport NAME` selects. Each value is a `Transport` (`ecotone.server.transport`)."""


@hookspec
def ecotone_channels() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """The client ends of the transports this plugin contributes, by URL scheme (`{"ws":
    ...}`): what `ecotone.connect(URL)` opens. Each value is a `ChannelFactory`
    (`ecotone.client.channels`). A plugin that brings a transport brings both ends, so
    `ecotone serve --transport NAME` and `ecotone.connect("SCHEME://...")` both work."""


@hookspec
def ecotone_providers() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """Providers (things that start env servers somewhere) this plugin contributes, by name."""


@hookspec
def ecotone_session_opened(session_id: str, env: str) -> None:
    """A session was opened on this server."""


@hookspec
def ecotone_session_closed(session_id: str, env: str, reason: str) -> None:
    """A session was closed. `reason`: `client` (its owner closed it), `disconnect` (its
    owner's connection went), `idle` (idle past `idle_timeout`), `shutdown` (the server
    stopped), `unclaimed` (a loose session nobody named within `stateless_grace`) or
    `replaced` (a newer loose session of the same client took its place)."""


@hookspec
def ecotone_episode_started(
    session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
) -> None:
    """A reset succeeded: an episode began. `observation` is the typed first observation;
    `episode_id` and `seed` are what the reset asked for (None when it did not say)."""


@hookspec
def ecotone_call_completed(session_id: str | None, env: str, op: str, duration_s: float) -> None:
    """An env call other than a step finished (successfully or not): `op` is `open`,
    `reset`, `state`, `close`, `list_tools`, `call_tool` or `render`; `duration_s` is its
    time from the request to the outcome, on a worker thread or the event loop as the env
    runs (steps have `ecotone_step_completed`)."""


@hookspec
def ecotone_step_completed(
    session_id: str, env: str, action: Any, observation: Any, duration_s: float
) -> None:
    """A step finished successfully. `action` and `observation` are the typed values."""
