"""The `ray` provider: env servers on a Ray cluster, each owned by a Ray actor.

    with ecotone.launch("counter", provider="ray", address="ray://head:10001") as env:
        env.reset(seed=0)

    envs = ecotone.launch_vector("counter", 64, servers=8, provider="ray",
                                 spec={"strategy": "SPREAD"})

Needs the `ray` package (`pip install ecotone[ray]`), the same Ray and Python on the cluster,
and ecotone installed on its nodes. The rules it keeps, beyond the provider contract:

- Each server is a Ray actor (`ServerHost`, in the namespace `ecotone`) that Ray places on a
  node by the spec's resources: `cpus` becomes the actor's `num_cpus` and `memory_mb` its
  `memory` (Ray's logical resources: what the scheduler counts, not a cgroup); the options
  add `custom_resources` ({name: amount}), a `strategy` (`DEFAULT`, or `SPREAD` to spread
  servers over the nodes), or a `placement_group` (with `bundle_index`) for `PACK` / `SPREAD`
  / `STRICT_*` groups made with `ray.util.placement_group`. `pids` has no Ray equivalent.
- The actor starts `ecotone serve` on its node with the process provider, bound to the
  node's address (`ray.util.get_node_ip_address()`), with a token (the server is reachable
  from the cluster's network), and holds its lifeline: if the actor dies (its node lost, or
  `ray.kill`), the server ends. The handle's `url` is that address; the provider then probes
  it from here, so a handle means the server answers *from the launcher's side*.
- `alive()` asks the actor (a lost node: False); `stop()` stops the server and kills the
  actor; `restart(ids)` of `launch_vector` starts a new actor, on whichever node Ray picks.
- Cleanup: the actors are not detached, so Ray ends them when the driver (this process, or
  its Ray Client session) ends, and their servers follow. Each actor's name carries an id,
  and it keeps the owner label; `gc()` (with `RAY_ADDRESS` set) kills the actors in the
  `ecotone` namespace whose owner is gone.
- Options: `address` (else `$RAY_ADDRESS`, else `auto`; `ray://host:port` for Ray Client),
  `strategy`, `custom_resources`, `placement_group`, `bundle_index`, `sandbox` (passed to
  the process provider on the node). Anything else is a ValueError naming it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

import anyio
import anyio.to_thread
import attrs

from ecotone.providers.contract import (
    EngineUnavailable,
    LaunchSpec,
    ReadinessTimeout,
    StartFailed,
    check_spec,
)
from ecotone.providers.owner import LABEL_OWNER, labels_for, owner_alive
from ecotone.providers.ready import wait_ready
from ecotone.specs.hookspecs import hookimpl

log = logging.getLogger("ecotone.launcher")

NAMESPACE: Final = "ecotone"
NAME_PREFIX: Final = "ecotone-server-"
NODE_LOST_RETRIES: Final = 2
"""Starts tried again when the actor's node died under it (within the ready timeout)."""
OPTIONS: Final = (
    "address",
    "strategy",
    "custom_resources",
    "placement_group",
    "bundle_index",
    "sandbox",
)
STRATEGIES: Final = ("DEFAULT", "SPREAD")
ADDRESS_VARIABLE: Final = "RAY_ADDRESS"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise EngineUnavailable(
            "the ray provider needs the `ray` package (pip install 'ecotone[ray]')"
        ) from exc
    return ray


_init_lock = threading.Lock()
_connected = ""
"""The address this process's Ray driver joined."""


def connect(address: str | None) -> Any:
    """Ray, connected to the cluster at `address` (else $RAY_ADDRESS, else `auto`), once per
    process; EngineUnavailable if it cannot be reached."""
    global _connected
    ray = _ray()
    with _init_lock:
        if ray.is_initialized():
            if address and _connected and address != _connected:
                raise ValueError(
                    f"this process is connected to the Ray cluster at {_connected}; a Ray "
                    f"driver joins one cluster, so {address} cannot be used too"
                )
        else:
            target = address or os.environ.get(ADDRESS_VARIABLE) or "auto"
            for attempt in range(3):
                try:
                    ray.init(
                        address=target,
                        namespace=NAMESPACE,
                        log_to_driver=False,
                        logging_level=logging.WARNING,
                    )
                    _connected = target
                    break
                except Exception as exc:
                    # Ray Client's proxy starts a server per client, which can fail on a busy
                    # head ("Starting Ray client server failed"): tried again, twice.
                    if attempt == 2 or not target.startswith("ray://"):
                        raise EngineUnavailable(
                            f"cannot reach the Ray cluster at {target}: {exc}"
                        ) from exc
                    time.sleep(1.0)
    return ray


@functools.cache
def _remote_class(ray: Any) -> Any:
    return ray.remote(ServerHost)


def _options(spec: LaunchSpec) -> dict[str, Any]:
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"the ray provider has no option {unknown[0]!r} (options: {', '.join(OPTIONS)})"
        )
    if spec.image is not None:
        raise ValueError("the ray provider runs ecotone as installed on the nodes: no `image`")
    strategy = spec.options.get("strategy", "DEFAULT")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    custom = spec.options.get("custom_resources", {})
    if not isinstance(custom, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int | float) and v >= 0 for k, v in custom.items()
    ):
        raise ValueError(f"custom_resources must map names to amounts >= 0, got {custom!r}")
    return dict(spec.options)


def actor_options(spec: LaunchSpec, options: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What `ServerHost.options(...)` gets for `spec`: resources, placement, name."""
    out: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "max_restarts": 0}
    out["num_cpus"] = spec.resources.cpus if spec.resources.cpus is not None else 0
    if spec.resources.memory_mb:
        out["memory"] = spec.resources.memory_mb * 1024 * 1024
    if options.get("custom_resources"):
        out["resources"] = dict(options["custom_resources"])
    group = options.get("placement_group")
    if group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        out["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=group,
            placement_group_bundle_index=int(options.get("bundle_index", -1)),
        )
    elif options.get("strategy", "DEFAULT") != "DEFAULT":
        out["scheduling_strategy"] = options["strategy"]
    return out


class ServerHost:
    """The actor's body: one `ecotone serve` on its node, through the process provider (run
    in a private event-loop thread: the actor's methods are plain calls)."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.server: Any = None
        self._portal_cm: Any = None
        self._portal: Any = None

    def start(self, spec: LaunchSpec) -> dict[str, str]:
        import ray
        from anyio.from_thread import start_blocking_portal

        from ecotone.providers.process import ProcessProvider

        node_ip = ray.util.get_node_ip_address()
        options = {"host": node_ip}
        if spec.options.get("sandbox"):
            options["sandbox"] = True
        local = attrs.evolve(spec, options=options)
        self._portal_cm = start_blocking_portal(backend="trio")
        self._portal = self._portal_cm.__enter__()
        self.server = self._portal.call(ProcessProvider().start, local)
        context = ray.get_runtime_context()
        return {"url": self.server.url, "node_ip": node_ip, "node_id": context.get_node_id()}

    def alive(self) -> bool:
        return self.server is not None and bool(self._portal.call(self.server.alive))

    def logs(self, tail: int | None) -> str:
        return "" if self.server is None else str(self._portal.call(self.server.logs, tail))

    def owner(self) -> str:
        return self.labels.get(LABEL_OWNER, "")

    def stop(self, timeout: float) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        try:
            self._portal.call(server.stop, timeout)
        finally:
            self._portal_cm.__exit__(None, None, None)


@attrs.define(eq=False)
class RayServer:
    """A server on the cluster (its actor's handle), as the provider contract wants it."""

    url: str
    id: str
    actor: Any
    node_ip: str
    node_id: str
    provider: str = "ray"
    _stopped: bool = False
    _last_logs: str = ""

    async def alive(self) -> bool:
        if self._stopped:
            return False
        ray = _ray()

        def ask() -> bool:
            try:
                return bool(ray.get(self.actor.alive.remote(), timeout=10))
            except Exception:
                return False  # the actor or its node is gone

        return await anyio.to_thread.run_sync(ask)

    async def logs(self, tail: int | None = 200) -> str:
        if self._stopped:
            return self._last_logs
        ray = _ray()

        def ask() -> str:
            try:
                return str(ray.get(self.actor.logs.remote(tail), timeout=10))
            except Exception as exc:
                return f"(no logs: the server's actor is gone: {type(exc).__name__})"

        return await anyio.to_thread.run_sync(ask)

    async def stop(self, timeout: float = 10.0) -> None:
        if self._stopped:
            return
        ray = _ray()

        def end() -> None:
            try:
                self._last_logs = str(ray.get(self.actor.logs.remote(200), timeout=5))
                ray.get(self.actor.stop.remote(timeout), timeout=timeout + 5)
            except Exception:
                pass  # gone already: killing it below is all there is to do
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:
                pass

        self._stopped = True
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(end)


class RayProvider:
    name = "ray"
    description = "env servers as Ray actors' processes, placed across a Ray cluster"

    async def start(self, spec: LaunchSpec) -> RayServer:
        check_spec(spec)
        options = _options(spec)
        ray = await anyio.to_thread.run_sync(connect, options.get("address"))
        if spec.resources.pids not in (None, 256):
            log.warning("ray provider: `pids` has no Ray resource; it is not enforced")
        labels = labels_for(spec.env, dict(spec.labels))
        node_spec = attrs.evolve(spec, options={"sandbox": options.get("sandbox", False)})
        deadline = anyio.current_time() + spec.ready_timeout

        def create() -> tuple[str, Any, Any]:
            name = NAME_PREFIX + secrets.token_hex(8)
            actor = _remote_class(ray).options(**actor_options(spec, options, name)).remote(labels)
            return name, actor, actor.start.remote(node_spec)

        def done(ref: Any) -> bool:
            ready, _ = ray.wait([ref], timeout=0.5)
            return bool(ready)

        for attempt in range(NODE_LOST_RETRIES + 1):
            name, actor, ref = await anyio.to_thread.run_sync(create)
            try:
                # Short waits, each in a thread of its own: a cancellation lands between them.
                while not await anyio.to_thread.run_sync(done, ref):
                    if anyio.current_time() > deadline:
                        raise ReadinessTimeout(
                            f"the Ray cluster did not start a {spec.env} server in "
                            f"{spec.ready_timeout:g} s (resources it cannot place stay pending)"
                        )
                placed = await anyio.to_thread.run_sync(ray.get, ref)
                break
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_kill, ray, actor)
                if _node_died(exc) and attempt < NODE_LOST_RETRIES:
                    # Placed on a node that was dying (Ray had not seen it go yet): again.
                    log.warning("ray provider: the node of a starting server died; retrying")
                    continue
                if isinstance(exc, Exception) and not isinstance(exc, ReadinessTimeout):
                    raise StartFailed(
                        f"a {spec.env} server did not start on the Ray cluster: {exc}"
                    ) from exc
                raise
        server = RayServer(
            url=placed["url"],
            id=name,
            actor=actor,
            node_ip=placed["node_ip"],
            node_id=placed["node_id"],
        )
        try:
            reached = await wait_ready(server.url, deadline, alive=server.alive)
        except TimeoutError as exc:
            await server.stop()
            raise ReadinessTimeout(
                f"a {spec.env} server started on {server.node_ip} but does not answer from "
                f"here ({exc}): is the node's address reachable from this host?"
            ) from exc
        except BaseException:
            await server.stop()
            raise
        if not reached:
            logs = await server.logs(40)
            await server.stop()
            raise StartFailed(f"the {spec.env} server on {server.node_ip} exited:\n{logs}")
        return server

    async def gc(self) -> list[str]:
        """Kill `ecotone` actors whose owner is gone (only with $RAY_ADDRESS set and ray
        installed: gc does not go looking for clusters)."""
        if not os.environ.get(ADDRESS_VARIABLE):
            return []
        try:
            ray = await anyio.to_thread.run_sync(connect, None)
        except EngineUnavailable:
            return []
        return await anyio.to_thread.run_sync(_gc, ray)


def _node_died(exc: BaseException) -> bool:
    """Whether a start failed because the actor's node died (Ray's ActorDiedError says so)."""
    return type(exc).__name__ in ("ActorDiedError", "ActorUnavailableError") and (
        "node" in str(exc).lower()
    )


def _kill(ray: Any, actor: Any) -> bool:
    """Whether the kill was sent (an actor already gone makes it fail: nothing to kill)."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        return False
    return True


def _gc(ray: Any) -> list[str]:
    """Ask every ecotone actor for its owner at once, then stop those whose owner is gone, at
    once: an actor that cannot answer (its node died, it waits for resources) costs the whole
    run one timeout, not one each, and none of them stops the run."""
    asked = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name, namespace = entry["name"], entry["namespace"]
        if namespace != NAMESPACE or not name.startswith(NAME_PREFIX):
            continue
        try:
            actor = ray.get_actor(name, namespace=namespace)
            asked.append((name, actor, actor.owner.remote()))
        except Exception:
            continue
    _wait(ray, [ref for _, _, ref in asked], 10.0)
    orphans = []
    for name, actor, ref in asked:
        try:
            owner = ray.get(ref, timeout=0)
        except Exception:  # no answer in time, or the actor died: not judged this run
            continue
        if owner and not owner_alive(owner):
            orphans.append((name, actor, owner))
    stops = []
    for _, actor, _ in orphans:
        with contextlib.suppress(Exception):
            stops.append(actor.stop.remote(5.0))
    _wait(ray, stops, 15.0)  # then killed, stopped or not
    return [
        f"ray actor {name} (owner {owner} is gone)"
        for name, actor, owner in orphans
        if _kill(ray, actor)
    ]


def _wait(ray: Any, refs: list[Any], timeout: float) -> None:
    """Until every ref is ready or `timeout` passed; a wait that fails only ends sooner."""
    if refs:
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=timeout)


PROVIDER = RayProvider()


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {"ray": PROVIDER}


__all__ = ["PROVIDER", "RayProvider", "RayServer", "ServerHost", "actor_options", "connect"]
