"""ecotone: serve reinforcement-learning environments over the network, and consume them.

The public surface, re-exported explicitly. Env authors need `Environment`, `Action`,
`Observation`, `State` and `hookimpl`; users of remote envs need `connect` / `aconnect`.
"""

from ecotone.client.aio import AsyncConnection, AsyncEnvClient, aconnect
from ecotone.client.errors import (
    CapacityError,
    ConnectionLost,
    EcotoneError,
    EnvError,
    InvalidActionError,
    ServerError,
)
from ecotone.client.sync import Connection, EnvClient, connect
from ecotone.kernel.contract import (
    Action,
    Environment,
    InvalidAction,
    Observation,
    State,
    StepResult,
)
from ecotone.kernel.hookspecs import hookimpl
from ecotone.specs import ErrorCode, ToolInfo

__version__ = "0.1.0"


__all__ = [
    "Action",
    "AsyncConnection",
    "AsyncEnvClient",
    "CapacityError",
    "Connection",
    "ConnectionLost",
    "EcotoneError",
    "EnvClient",
    "EnvError",
    "Environment",
    "ErrorCode",
    "InvalidAction",
    "InvalidActionError",
    "Observation",
    "ServerError",
    "State",
    "StepResult",
    "ToolInfo",
    "__version__",
    "aconnect",
    "connect",
    "hookimpl",
]
