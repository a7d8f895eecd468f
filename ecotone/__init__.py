"""ecotone: serve reinforcement-learning environments over the network, and consume them.

The public surface, re-exported explicitly. Env authors need `Environment`, `Action`,
`Observation`, `State` and `hookimpl`; users of remote envs need `connect` / `aconnect`.

`hookimpl` is pluggy's `HookimplMarker("ecotone")` (from `ecotone.specs.hookspecs`, where
the hooks are specified): it marks a plugin's implementation of a hook, in a module that the
`ecotone` entry-point group of its distribution names::

    # pyproject.toml: [project.entry-points.ecotone] myenv = "myenv.plugin"
    @ecotone.hookimpl
    def ecotone_environments():
        return {"myenv": MyEnv}

The client, the launcher and the vector envs are imported on first use: an env server
(`ecotone serve`) starts without them, and the vector envs need numpy, an optional
dependency.
"""

from typing import TYPE_CHECKING, Any

from ecotone.kernel.contract import (
    Action,
    AsyncEnvironment,
    AsyncMultiAgentEnvironment,
    AsyncSimultaneousEnvironment,
    Environment,
    InvalidAction,
    MultiAgentEnvironment,
    Observation,
    SimultaneousEnvironment,
    State,
)
from ecotone.kernel.exit import close_at_exit, forget_at_exit
from ecotone.kernel.exposure import served_beyond_loopback
from ecotone.kernel.tasks import TaskError, TaskSet
from ecotone.specs import ErrorCode, TaskRef, ToolInfo
from ecotone.specs.hookspecs import hookimpl
from ecotone.specs.version import VERSION

if TYPE_CHECKING:
    from ecotone.client.aio import AsyncConnection, AsyncEnvClient, aconnect
    from ecotone.client.errors import (
        AccessDenied,
        CapacityError,
        ConnectionLost,
        EcotoneError,
        EnvError,
        InvalidActionError,
        ServerError,
    )
    from ecotone.client.results import StepResult, Task, Tasks
    from ecotone.client.sync import Connection, EnvClient, connect
    from ecotone.client.vector import (
        AsyncVectorEnv,
        EpisodeLost,
        ObservationMismatch,
        StepBatch,
        SubEnvError,
        VectorEnv,
    )
    from ecotone.launcher.compose import (
        LaunchedServer,
        alaunch,
        astart_server,
        launch,
        start_server,
    )
    from ecotone.launcher.pool import AsyncServerPool, ServerPool, server_pool
    from ecotone.launcher.vector import alaunch_vector, launch_vector
    from ecotone.providers.contract import (
        EngineUnavailable,
        ImageNotFound,
        LaunchSpec,
        ProviderError,
        ReadinessTimeout,
        Resources,
        StartFailed,
    )

__version__ = VERSION

# Imported on first use (see the module docstring).
_LAZY = {
    **dict.fromkeys(("AsyncConnection", "AsyncEnvClient", "aconnect"), "ecotone.client.aio"),
    **dict.fromkeys(
        (
            "AccessDenied",
            "CapacityError",
            "ConnectionLost",
            "EcotoneError",
            "EnvError",
            "InvalidActionError",
            "ServerError",
        ),
        "ecotone.client.errors",
    ),
    **dict.fromkeys(("StepResult", "Task", "Tasks"), "ecotone.client.results"),
    **dict.fromkeys(("Connection", "EnvClient", "connect"), "ecotone.client.sync"),
    **dict.fromkeys(
        (
            "AsyncVectorEnv",
            "EpisodeLost",
            "ObservationMismatch",
            "StepBatch",
            "SubEnvError",
            "VectorEnv",
        ),
        "ecotone.client.vector",
    ),
    **dict.fromkeys(
        ("LaunchedServer", "alaunch", "astart_server", "launch", "start_server"),
        "ecotone.launcher.compose",
    ),
    **dict.fromkeys(
        (
            "EngineUnavailable",
            "ImageNotFound",
            "LaunchSpec",
            "ProviderError",
            "ReadinessTimeout",
            "Resources",
            "StartFailed",
        ),
        "ecotone.providers.contract",
    ),
    **dict.fromkeys(("AsyncServerPool", "ServerPool", "server_pool"), "ecotone.launcher.pool"),
    **dict.fromkeys(("alaunch_vector", "launch_vector"), "ecotone.launcher.vector"),
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ecotone' has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(module_name), name)
    except ModuleNotFoundError as exc:
        if exc.name == "numpy":
            raise ImportError(f"ecotone.{name} needs numpy (pip install numpy)") from exc
        raise
    globals()[name] = value
    return value


__all__ = [
    "AccessDenied",
    "Action",
    "AsyncConnection",
    "AsyncEnvClient",
    "AsyncEnvironment",
    "AsyncMultiAgentEnvironment",
    "AsyncServerPool",
    "AsyncSimultaneousEnvironment",
    "AsyncVectorEnv",
    "CapacityError",
    "Connection",
    "ConnectionLost",
    "EcotoneError",
    "EngineUnavailable",
    "EnvClient",
    "EnvError",
    "Environment",
    "EpisodeLost",
    "ErrorCode",
    "ImageNotFound",
    "InvalidAction",
    "InvalidActionError",
    "LaunchSpec",
    "LaunchedServer",
    "MultiAgentEnvironment",
    "Observation",
    "ObservationMismatch",
    "ProviderError",
    "ReadinessTimeout",
    "Resources",
    "ServerError",
    "ServerPool",
    "SimultaneousEnvironment",
    "StartFailed",
    "State",
    "StepBatch",
    "StepResult",
    "SubEnvError",
    "Task",
    "TaskError",
    "TaskRef",
    "TaskSet",
    "Tasks",
    "ToolInfo",
    "VectorEnv",
    "__version__",
    "aconnect",
    "alaunch",
    "alaunch_vector",
    "astart_server",
    "close_at_exit",
    "connect",
    "forget_at_exit",
    "hookimpl",
    "launch",
    "launch_vector",
    "served_beyond_loopback",
    "server_pool",
    "start_server",
]
