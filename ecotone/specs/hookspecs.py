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
"""Marks the hook specifications below (ecotone's own use)."""
hookimpl = pluggy.HookimplMarker("ecotone")
"""Marks a plugin's implementation of one of these hooks; public as `ecotone.hookimpl`.

pluggy's `HookimplMarker` for the project name `ecotone`: decorate a function named after a
hook, in a module the `ecotone` entry-point group names::

    @ecotone.hookimpl
    def ecotone_environments():
        return {"myenv": MyEnv}

It takes pluggy's options (`@ecotone.hookimpl(tryfirst=True)`...).
"""


@hookspec
def ecotone_environments() -> Mapping[str, type]:  # type: ignore[empty-body]
    """Contribute environment classes.

    Returns:
        This plugin's environment classes, by name (`{"counter": CounterEnv}`).
    """


@hookspec(firstresult=True)
def ecotone_resolve_environment(name: str) -> type | None:
    """Resolve a name no plugin lists to an environment class.

    For families of envs named by pattern, such as `gymnasium:CartPole-v1`; the first plugin
    to answer wins.

    Args:
        name: The env name asked for (`ecotone serve NAME`, `inproc://NAME`...).

    Returns:
        The environment class for `name`, or None when the name is not this plugin's.
    """


@hookspec
def ecotone_environment_patterns() -> Mapping[str, str]:  # type: ignore[empty-body]
    """Name the patterns this plugin's `ecotone_resolve_environment` answers.

    What `ecotone list` shows, since such names cannot be listed one by one.

    Returns:
        Each pattern with a line saying what it gives (`{"gymnasium:ID[?kw=...]": "any
        registered Gymnasium env"}`).
    """


@hookspec
def ecotone_transports() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """Contribute the server ends of transports.

    Returns:
        Each `Transport` (`ecotone.server.transport`) by the name `ecotone serve --transport
        NAME` selects.
    """


@hookspec
def ecotone_channels() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """Contribute the client ends of transports: what `ecotone.connect(URL)` opens.

    A plugin that brings a transport brings both ends, so `ecotone serve --transport NAME`
    and `ecotone.connect("SCHEME://...")` both work.

    Returns:
        Each `ChannelFactory` (`ecotone.client.channels`) by URL scheme (`{"ws": ...}`).
    """


@hookspec
def ecotone_providers() -> Mapping[str, Any]:  # type: ignore[empty-body]
    """Contribute providers: things that start env servers somewhere.

    Returns:
        Each `Provider` (`ecotone.providers.contract`) by the name `provider=` selects.
    """


@hookspec
def ecotone_session_opened(session_id: str, env: str) -> None:
    """Observe that a session was opened on this server.

    Args:
        session_id: The new session's id.
        env: Its env's name.
    """


@hookspec
def ecotone_session_closed(session_id: str, env: str, reason: str) -> None:
    """Observe that a session was closed.

    Args:
        session_id: The session's id.
        env: Its env's name.
        reason: `client` (its owner closed it), `disconnect` (its owner's connection went),
            `lease` (reclaimed: its lease ran out, nothing renewing it for `limits.lease`),
            `shutdown` (the server stopped), `unclaimed` (a loose session nobody named within
            `stateless_grace`) or `replaced` (a newer loose session of the same client took
            its place).
    """


@hookspec
def ecotone_episode_started(
    session_id: str, env: str, episode_id: str | None, seed: int | None, observation: Any
) -> None:
    """Observe that a reset succeeded: an episode began.

    Args:
        session_id: The session's id.
        env: Its env's name.
        episode_id: What the reset asked for (None when it did not say).
        seed: What the reset asked for (None when it did not say).
        observation: The typed first observation.
    """


@hookspec
def ecotone_call_completed(session_id: str | None, env: str, op: str, duration_s: float) -> None:
    """Observe that an env call other than a step finished, successfully or not.

    Steps have `ecotone_step_completed`.

    Args:
        session_id: The session's id; None for `open` (the env is made before its session).
        env: Its env's name.
        op: `open`, `reset`, `state`, `close`, `list_tools`, `call_tool` or `render`.
        duration_s: Seconds from the call's start to its outcome, on a worker thread or the
            event loop as the env runs.
    """


@hookspec
def ecotone_step_completed(
    session_id: str, env: str, action: Any, observation: Any, duration_s: float, seat: str | None
) -> None:
    """Observe that a step (or a multi-agent env's move, or round) finished successfully.

    Args:
        session_id: The session's id.
        env: Its env's name.
        action: The typed action (a round's: each seat's, by seat).
        observation: The typed observation it gave (a multi-agent env's: its public view,
            which every seat may see).
        duration_s: Seconds from the step's start to its outcome.
        seat: The seat that moved (a turn-based multi-agent env's `play`); None for a step
            and for a simultaneous env's round.
    """
