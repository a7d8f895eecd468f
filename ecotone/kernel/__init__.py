"""The kernel: the environment contract, sessions, the protocol engine, plugins and config.

Imports only `ecotone.specs`. No sockets, no event loop of its own: the engine is sans-IO and
a driver (the server's runner, the inproc channels) runs the env calls it hands out.
"""

from ecotone.kernel.calls import Call
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
from ecotone.kernel.engine import Engine
from ecotone.kernel.envspec import EnvDefinitionError, EnvSpec
from ecotone.kernel.limits import Limits
from ecotone.kernel.modes import Mode
from ecotone.kernel.peers import Owner, Peer
from ecotone.kernel.registry import Registry, RegistryError
from ecotone.specs.hookspecs import hookimpl

__all__ = [
    "Action",
    "AsyncEnvironment",
    "AsyncMultiAgentEnvironment",
    "AsyncSimultaneousEnvironment",
    "Call",
    "Engine",
    "EnvDefinitionError",
    "EnvSpec",
    "Environment",
    "InvalidAction",
    "Limits",
    "Mode",
    "MultiAgentEnvironment",
    "Observation",
    "Owner",
    "Peer",
    "Registry",
    "RegistryError",
    "SimultaneousEnvironment",
    "State",
    "hookimpl",
]
