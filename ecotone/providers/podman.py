"""The `podman` provider: env servers in Podman containers, through podman-py and the Podman
API socket (`ecotone.providers.engines` finds it, or starts `podman system service`).

The shared logic is `ecotone.providers._container`, and what any engine user shares is in
`ecotone.providers.engines`; this module only says how podman-py spells each setting.
podman-py ignores `nano_cpus` and `tmpfs`, and maps `security_opt` to SELinux options, so CPU
goes in as a CFS quota, /tmp as a tmpfs mount and no-new-privileges as podman's own flag.
Logs are cut to their tail here (see `logs`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ecotone.providers.contract import last_lines
from ecotone.specs.hookspecs import hookimpl

if TYPE_CHECKING:
    from ecotone.providers._container import ContainerConfig, ContainerProvider

CPU_PERIOD_US = 100_000


class PodmanEngine:
    name = "podman"

    def client(self) -> Any:
        from ecotone.providers import engines

        return engines.client_for("podman")

    def create_kwargs(self, config: ContainerConfig) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "name": config.name,
            "labels": config.labels,
            "environment": config.environment,
            "init": True,
            "read_only": config.read_only,
            "no_new_privileges": True,
            "cap_drop": ["ALL"],
            "ulimits": [
                {"Name": name, "Soft": soft, "Hard": hard}
                for name, (soft, hard) in config.ulimits.items()
            ],
            "mounts": [
                {
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "target": "/tmp",
                    "size": f"{config.tmpfs_mb}m",
                },
                *(
                    {
                        "type": "bind",
                        "source": m.source,
                        "target": m.target,
                        "read_only": m.read_only,
                    }
                    for m in config.mounts
                ),
            ],
            "log_config": {"Type": "k8s-file"},
        }
        if config.user:
            kwargs["user"] = config.user
        if config.memory_bytes is not None:
            kwargs["mem_limit"] = config.memory_bytes
        if config.cpus is not None:
            kwargs["cpu_period"] = CPU_PERIOD_US
            kwargs["cpu_quota"] = max(1000, round(config.cpus * CPU_PERIOD_US))
        if config.pids is not None:
            kwargs["pids_limit"] = config.pids
        if config.publish is None:
            kwargs["network_mode"] = "none"
        else:
            kwargs["ports"] = {f"{config.publish}/tcp": ("127.0.0.1", 0)}  # 0: engine picks
        return kwargs

    def find(self, client: Any, labels: Mapping[str, str]) -> list[Any]:
        # podman-py takes repeated filters as a list of "key=value" (a dict of lists breaks).
        filters = [f"label={key}={value}" for key, value in labels.items()]
        return list(client.containers.list(all=True, filters=filters))

    def stop(self, container: Any, timeout: int) -> None:
        container.stop(timeout=timeout, ignore=True)

    def logs(self, container: Any, tail: int | None) -> str:
        # Podman 4.3's `tail` counts the pieces of a line written in several writes (k8s-file
        # records them as partial entries) and can return the last piece alone, such as the
        # newline of a `print` to an unbuffered stderr: read everything, cut here.
        frames = container.logs(stdout=True, stderr=True)
        data = frames if isinstance(frames, bytes) else b"".join(frames)
        return last_lines(data.decode(errors="replace"), tail)

    def sweep(self) -> list[str]:
        from ecotone.providers import engines

        return engines.sweep_podman_services()


@functools.cache
def provider() -> ContainerProvider:
    """The provider (made on first use: its machinery is heavy, and the plugin's module is
    imported by every process that looks up a plugin)."""
    from ecotone.providers._container import ContainerProvider

    return ContainerProvider(
        PodmanEngine(), "env servers in Podman containers (podman-py, the Podman API socket)"
    )


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {"podman": provider()}
