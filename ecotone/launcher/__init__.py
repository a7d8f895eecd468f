"""Starting env servers somewhere: the provider contract, the providers, and composition.

`contract.py` is what a provider implements (LaunchSpec, Resources, ServerHandle, Provider,
the specific errors); `providers/` holds the bundled ones (process, podman, docker);
`compose.py` joins a provider and a client (`ecotone.launch`, `start_server`; `specs.py`
names a provider and makes a LaunchSpec); `pool.py` keeps servers started ahead
(`ecotone.server_pool`), `warm.py` the pools `launch(pool=N)` takes from; `vector.py` makes
a VectorEnv over launched servers (`ecotone.launch_vector`); `images.py` builds images
(`ecotone build`); `k8s.py` writes Kubernetes manifests (`ecotone export k8s`); `config.py`
reads the `[launch]` table.

The names below are imported on first use, so that a provider module (imported by a server
through its entry point) does not pull in the client.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ecotone.launcher.compose import (
        LaunchedServer,
        alaunch,
        astart_server,
        launch,
        make_spec,
        provider_for,
        start_server,
    )

__all__ = [
    "LaunchedServer",
    "alaunch",
    "astart_server",
    "launch",
    "make_spec",
    "provider_for",
    "start_server",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'ecotone.launcher' has no attribute {name!r}")
    from ecotone.launcher import compose

    value = getattr(compose, name)
    globals()[name] = value
    return value
