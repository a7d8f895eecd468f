"""The kernel: the environment contract, sessions, sans-IO dispatch, plugins and config.

Imports only `ecotone.wire`. No sockets, no event loop of its own.
"""

from ecotone.kernel.contract import (
    Action,
    Environment,
    InvalidAction,
    Observation,
    State,
    StepResult,
)
from ecotone.kernel.dispatch import Kernel, KernelConnection
from ecotone.kernel.envspec import EnvDefinitionError, EnvSpec
from ecotone.kernel.hookspecs import hookimpl
from ecotone.kernel.limits import Limits
from ecotone.kernel.registry import Registry, RegistryError

__all__ = [
    "Action",
    "EnvDefinitionError",
    "EnvSpec",
    "Environment",
    "InvalidAction",
    "Kernel",
    "KernelConnection",
    "Limits",
    "Observation",
    "Registry",
    "RegistryError",
    "State",
    "StepResult",
    "hookimpl",
]
