"""The `docker` provider: env servers in Docker containers, through the Docker SDK
(`$DOCKER_HOST`, else /var/run/docker.sock; see `ecotone.providers.engines`).

The shared logic is `ecotone.providers._container`, and what any engine user shares is in
`ecotone.providers.engines`; this module only says how the Docker SDK spells each setting.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ecotone.specs.hookspecs import hookimpl

if TYPE_CHECKING:
    from ecotone.providers._container import ContainerConfig, ContainerProvider


class DockerEngine:
    name = "docker"

    def client(self) -> Any:
        from ecotone.providers import engines

        return engines.client_for("docker")

    def create_kwargs(self, config: ContainerConfig) -> dict[str, Any]:
        import docker.types

        kwargs: dict[str, Any] = {
            "name": config.name,
            "labels": config.labels,
            "environment": config.environment,
            "init": True,
            "read_only": config.read_only,
            "security_opt": ["no-new-privileges"],
            "cap_drop": ["ALL"],
            "ulimits": [
                docker.types.Ulimit(name=name, soft=soft, hard=hard)
                for name, (soft, hard) in config.ulimits.items()
            ],
            "tmpfs": {"/tmp": f"size={config.tmpfs_mb}m,mode=1777"},
            "mounts": [
                docker.types.Mount(m.target, m.source, type="bind", read_only=m.read_only)
                for m in config.mounts
            ],
        }
        if config.user:
            kwargs["user"] = config.user
        if config.memory_bytes is not None:
            kwargs["mem_limit"] = config.memory_bytes
        if config.cpus is not None:
            kwargs["nano_cpus"] = round(config.cpus * 1e9)
        if config.pids is not None:
            kwargs["pids_limit"] = config.pids
        if config.publish is None:
            kwargs["network_mode"] = "none"
        else:
            kwargs["ports"] = {f"{config.publish}/tcp": ("127.0.0.1", None)}  # None: engine picks
        return kwargs

    def find(self, client: Any, labels: Mapping[str, str]) -> list[Any]:
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        return list(client.containers.list(all=True, filters=filters))

    def stop(self, container: Any, timeout: int) -> None:
        container.stop(timeout=timeout)

    def logs(self, container: Any, tail: int | None) -> str:
        if tail is not None and tail <= 0:
            return ""  # docker reads tail=0 as "all"
        data = container.logs(stdout=True, stderr=True, tail=tail if tail is not None else "all")
        return bytes(data).decode(errors="replace")

    def sweep(self) -> list[str]:
        return []  # nothing of docker's runs on this host on ecotone's behalf


@functools.cache
def provider() -> ContainerProvider:
    """The provider (made on first use: its machinery is heavy, and the plugin's module is
    imported by every process that looks up a plugin)."""
    from ecotone.providers._container import ContainerProvider

    return ContainerProvider(DockerEngine(), "env servers in Docker containers (the Docker SDK)")


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {"docker": provider()}
