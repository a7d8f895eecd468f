"""Starting env servers somewhere: the provider contract, the providers, and composition.

`contract.py` is what a provider implements (LaunchSpec, Resources, ServerHandle, Provider,
the specific errors); `providers/` holds the bundled ones (process, podman, docker);
`compose.py` joins a provider and a client (`ecotone.launch`, `start_server`); `vector.py`
makes a VectorEnv over launched servers (`ecotone.launch_vector`); `images.py` builds images
(`ecotone build`); `config.py` reads the `[launch]` table.
"""

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
