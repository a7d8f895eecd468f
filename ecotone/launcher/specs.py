"""What a launch starts: a provider by name, and a LaunchSpec from keywords.

Shared by `ecotone.launch` and the others (compose.py), the pools (pool.py, warm.py) and
`ecotone launch`.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ecotone.kernel.registry import Registry
from ecotone.providers.contract import LaunchSpec, Provider, Resources


def provider_for(name: str, registry: Registry | None = None) -> Provider:
    """Find the provider registered under a name.

    Args:
        name: The provider's name (`process`, `podman`...).
        registry: Where plugins are found (default: the installed ones).

    Returns:
        The provider.

    Raises:
        ValueError: No provider has that name (the message lists the installed ones).
    """
    registry = registry or Registry.discover()
    providers = registry.providers()
    entry = providers.get(name)
    if entry is None:
        known = ", ".join(sorted(providers)) or "none"
        raise ValueError(f"unknown provider {name!r}; installed: {known}")
    provider: Provider = entry.value
    return provider


_SPEC_FIELDS: Final = frozenset(
    field.name for field in attrs.fields(LaunchSpec) if field.name not in ("env", "options")
)
"""The LaunchSpec fields `make_spec` (and so `launch`, `start_server`...) takes as keywords."""


# Not `**fields: Unpack[SomeTypedDict]`: the keywords are open, every provider has options of
# its own, and a TypedDict cannot leave room for them (PEP 728's `extra_items`, which mypy
# does not support yet); `launch(**spec: Any)` and the others hand theirs on untyped anyway.
def make_spec(env: str, **fields: Any) -> LaunchSpec:
    """Make a LaunchSpec for `env` from keywords.

    Args:
        env: The env name, as `ecotone serve` takes it.
        **fields: LaunchSpec's fields, with its defaults: `transport` ("websocket"), `image`
            (None), `resources` (Resources(); also a mapping of its fields), `environment`,
            `secrets` and `labels` (empty; None too), `ready_timeout` (60.0), `max_sessions`
            (None). Every other keyword is a provider option (`LaunchSpec.options`), which the
            provider checks when it starts (it refuses what it does not take, naming it).

    Returns:
        The LaunchSpec.

    Raises:
        ValueError: A field's value LaunchSpec or Resources refuses.
        TypeError: A `resources` mapping with a key that is not a Resources field.
    """
    given = {name: value for name, value in fields.items() if name in _SPEC_FIELDS}
    options = {name: value for name, value in fields.items() if name not in _SPEC_FIELDS}
    resources = given.pop("resources", None)
    if resources is None:
        resources = Resources()
    elif not isinstance(resources, Resources):
        resources = Resources(**resources)
    for name in ("environment", "secrets", "labels"):
        given[name] = dict(given.get(name) or {})
    return LaunchSpec(env=env, resources=resources, options=options, **given)


def spec_of(env: str | LaunchSpec, fields: dict[str, Any]) -> LaunchSpec:
    """The LaunchSpec a launch or a pool was given: `env` itself, or one made from `fields`.

    Args:
        env: A LaunchSpec, or the env name for `make_spec`.
        fields: LaunchSpec fields and provider options (none beside a LaunchSpec).

    Returns:
        The LaunchSpec.

    Raises:
        TypeError: A LaunchSpec given with fields beside it (they would be ignored).
        ValueError: A field's value that `make_spec` refuses.
    """
    if isinstance(env, LaunchSpec):
        if fields:
            raise TypeError(
                f"a LaunchSpec was given, so {', '.join(sorted(fields))} would be ignored: "
                "put them in the LaunchSpec (attrs.evolve(spec, ...))"
            )
        return env
    return make_spec(env, **fields)
