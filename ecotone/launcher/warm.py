"""Warm servers where users start them: the pools behind `launch(pool=N)` and
`launch_vector(..., pool=N)`.

    for task in tasks:
        with ecotone.launch("coding", provider="podman", pool=4) as env:   # warm after the first
            env.reset(task=task)

Rules:

* **One pool per provider, spec and size**, made by the first launch that asks for it and
  kept for the process: a `ServerPool` (pool.py) keeping `N` servers of that LaunchSpec
  started and ready. Later launches with the same provider, spec and `N` take from it; a
  launch with another spec or size has its own.
* **A server is handed out once.** The launch takes a ready server (waiting for one when
  none is ready yet: the first launch waits for a cold start), and on the way out stops it;
  the pool is starting its replacement meanwhile, so the next launch finds a warm one. No
  episode ever sees a server another touched.
* **Stopped with the program**: every pool is closed at exit (each `ServerPool` registers
  itself), or now with `close_pools()`; a closed pool is made again by the next launch.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Final

import attrs

from ecotone.kernel.registry import Registry
from ecotone.launcher.pool import ServerPool
from ecotone.launcher.specs import spec_of
from ecotone.providers.contract import LaunchSpec, Provider

_lock: Final = threading.Lock()
_pools: dict[tuple[object, ...], ServerPool] = {}


def _key(spec: LaunchSpec, size: int, provider: str | Provider, registry: Any) -> tuple[Any, ...]:
    """What tells two pools apart: the provider (its name, or which object), the registry
    (which object; None: the installed plugins), the spec's fields, and the size."""
    fields = json.dumps(attrs.asdict(spec), sort_keys=True, default=repr)
    chosen = provider if isinstance(provider, str) else id(provider)
    return (chosen, None if registry is None else id(registry), fields, size)


def warm_pool(
    env: str | LaunchSpec,
    size: int,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> ServerPool:
    """The process's pool of `size` warm servers of this spec, made on first use.

    Args:
        env: An env name (with LaunchSpec fields as keywords), or a LaunchSpec.
        size: How many servers the pool keeps started and ready (at least 1).
        provider: The provider's name, or a provider.
        registry: Where plugins are found (default: the installed ones).
        **spec: LaunchSpec fields and provider options, as `ecotone.launch` takes them.

    Returns:
        The pool (`take()` hands out a server of its own).

    Raises:
        ValueError: A size that is not a whole number >= 1, an unknown provider, or a
            LaunchSpec field's value that is refused.
        TypeError: A LaunchSpec given with LaunchSpec fields beside it.
    """
    launch_spec = spec_of(env, spec)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"pool= is how many servers to keep warm, a whole number >= 1: {size!r}")
    key = _key(launch_spec, size, provider, registry)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = _pools[key] = ServerPool(launch_spec, size, provider=provider, registry=registry)
        return pool


def close_pools() -> None:
    """Stop every server of the pools `launch(pool=N)` and `launch_vector(pool=N)` keep.

    The next such launch makes its pool again. The program's end does this too.
    """
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
