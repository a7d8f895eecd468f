"""The plugin registry: pluggy plus entry-point discovery, and the merged name tables.

`Registry.discover()` loads every module named in the `ecotone` entry-point group, the bundled
plugins included (they register through the package's own entry points, like anyone else's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs
import pluggy

from ecotone.kernel.envspec import EnvSpec
from ecotone.specs import hookspecs

ENTRY_POINT_GROUP: Final = "ecotone"


class RegistryError(LookupError):
    """A name is unknown, or claimed by two plugins."""


@attrs.frozen(slots=True)
class Entry:
    """One named thing a plugin contributed, and where it came from."""

    name: str
    kind: str
    value: Any
    plugin: str
    distribution: str


@final
class Registry:
    """All plugins of this process, and what they contribute by name."""

    def __init__(self, pm: pluggy.PluginManager | None = None) -> None:
        self.pm = pm or pluggy.PluginManager("ecotone")
        self.pm.add_hookspecs(hookspecs)
        self._specs: dict[str, EnvSpec] = {}
        self._origin_cache: dict[int, tuple[str, str]] | None = None

    @classmethod
    def discover(cls) -> Registry:
        """A registry with every installed plugin loaded through entry points."""
        registry = cls()
        registry.pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        return registry

    def register(self, plugin: object, name: str | None = None) -> None:
        """Add a plugin by hand (embedding, tests)."""
        self.pm.register(plugin, name)
        self._specs.clear()
        self._origin_cache = None

    def _origins(self) -> dict[int, tuple[str, str]]:
        """Each plugin's name and distribution; the distribution's name read once per
        distribution (reading it parses its whole metadata file)."""
        if self._origin_cache is not None:
            return self._origin_cache
        names: dict[object, str] = {}
        origins: dict[int, tuple[str, str]] = {}
        for plugin, dist in self.pm.list_plugin_distinfo():
            inner = getattr(dist, "_dist", dist)
            key = getattr(inner, "_path", None) or id(inner)
            if key not in names:
                names[key] = f"{dist.project_name}"
            origins[id(plugin)] = (self.pm.get_name(plugin) or "?", names[key])
        self._origin_cache = origins
        return origins

    def _collect(self, kind: str) -> dict[str, Entry]:
        origins = self._origins()
        hook = getattr(self.pm.hook, f"ecotone_{kind}")
        merged: dict[str, Entry] = {}
        for impl in hook.get_hookimpls():
            result: Mapping[str, Any] | None = impl.function()
            if not result:
                continue
            plugin_name, dist = origins.get(id(impl.plugin), (impl.plugin_name, "(not installed)"))
            for name, value in result.items():
                if name in merged:
                    raise RegistryError(
                        f"{kind[:-1] if kind.endswith('s') else kind} {name!r} is contributed "
                        f"twice: by plugin {merged[name].plugin!r} and by {plugin_name!r}"
                    )
                merged[name] = Entry(name, kind, value, plugin_name, dist)
        return merged

    def environments(self) -> dict[str, Entry]:
        return self._collect("environments")

    def environment_patterns(self) -> dict[str, Entry]:
        """Name patterns resolved by `ecotone_resolve_environment` (values: descriptions)."""
        return self._collect("environment_patterns")

    def transports(self) -> dict[str, Entry]:
        return self._collect("transports")

    def channels(self) -> dict[str, Entry]:
        """Client channel factories, by URL scheme."""
        return self._collect("channels")

    def providers(self) -> dict[str, Entry]:
        return self._collect("providers")

    def env_spec(self, name: str) -> EnvSpec:
        """The validated spec of the env called `name`."""
        spec = self._specs.get(name)
        if spec is None:
            envs = self.environments()
            if name in envs:
                env_cls = envs[name].value
            else:
                env_cls = self.pm.hook.ecotone_resolve_environment(name=name)
                if env_cls is None:
                    known = ", ".join(sorted(envs)) or "none"
                    raise RegistryError(f"no environment named {name!r} (installed: {known})")
            spec = self._specs[name] = EnvSpec.from_class(env_cls, name)
        return spec

    def transport(self, name: str) -> Any:
        transports = self.transports()
        if name not in transports:
            known = ", ".join(sorted(transports)) or "none"
            raise RegistryError(f"no transport named {name!r} (installed: {known})")
        return transports[name].value
