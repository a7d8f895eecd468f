"""`Workers`: the envs a server runs in processes of their own, one zygote per env.

`Workers.isolate(spec, limits)` starts the env's zygote and returns the spec the engine
serves instead: the same env (name, types, schemas, tasks, rubric, snapshots), whose
instances are `IsolatedEnv`s (awaited calls to a worker process). A rubric still scores in
the server, around the worker's env; tasks are still chosen by the server, and handed to the
worker's `reset`. `stop()` ends every zygote, and with it every worker still running.

A zygote that died while the server runs is started again at the next session's open.
"""

from __future__ import annotations

import functools
import logging
import pickle
import sys
import threading

import attrs

from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.limits import Limits
from ecotone.server.isolation import wire
from ecotone.server.isolation.parent import Zygote, ZygoteDied
from ecotone.server.isolation.proxy import Host, IsolatedEnv

log = logging.getLogger("ecotone.isolation")

IMPORTABLE = (
    "an isolated env's class (and its types) must be importable by their module's name: not "
    "defined in __main__ or inside a function"
)


def isolated(spec: EnvSpec, isolate: bool | None) -> bool:
    """Whether a server runs `spec`'s sessions in processes of their own: as it is told
    (`isolate`, `serve --isolate`), else as the env class asks (`isolation = "process"`)."""
    return spec.isolation == "process" if isolate is None else isolate


def check(spec: EnvSpec) -> None:
    """Refuse an env that cannot be isolated (before anything starts).

    Raises:
        ValueError: Not on Linux (the workers rest on PR_SET_PDEATHSIG), or a multi-agent
            env (its seats are kept by the server around plain calls).
    """
    if not sys.platform.startswith("linux"):
        raise ValueError(f"env {spec.name!r}: running envs in processes of their own needs Linux")
    if spec.seats:
        raise ValueError(
            f"env {spec.name!r} is a multi-agent env, which cannot run in a process of its own "
            "(serve it without --isolate)"
        )


def recipe_of(spec: EnvSpec) -> wire.Recipe:
    """How a zygote makes `spec`'s env: its factory and types pickled (imported by
    reference), or, when they cannot be, its name, for the plugins to resolve."""
    task_type = None if spec.tasks is None else spec.tasks.type
    parts = (spec.factory, spec.action_type, spec.state_type, task_type)
    factory: bytes | None
    try:
        factory = pickle.dumps(parts)
    except (pickle.PicklingError, AttributeError, TypeError):
        factory = None
    if getattr(spec.factory, "__module__", None) == "__main__":
        factory = None
    return wire.Recipe(
        name=spec.name, path=list(sys.path), factory=factory, asynchronous=spec.asynchronous
    )


class Workers:
    """The zygotes of a server's isolated envs, by env name."""

    def __init__(self) -> None:
        self._zygotes: dict[str, Zygote] = {}
        self._recipes: dict[str, wire.Recipe] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def isolate(self, spec: EnvSpec, limits: Limits) -> EnvSpec:
        """Start `spec`'s zygote; the spec whose sessions run in its workers.

        Raises:
            ValueError: The env cannot be isolated (`check`), or its zygote could not make it
                ready (its module does not import in a fresh interpreter, say).
        """
        check(spec)
        recipe = recipe_of(spec)
        try:
            zygote = Zygote.start(recipe)
        except ZygoteDied as exc:
            raise ValueError(f"{exc} ({IMPORTABLE})") from exc
        with self._lock:
            self._recipes[spec.name] = recipe
            self._zygotes[spec.name] = zygote
        timeout = spec.call_timeout if spec.call_timeout is not None else limits.call_timeout
        host = Host(
            zygote=functools.partial(self.zygote, spec.name),
            observation_type=spec.observation_type,
            state_type=spec.state_type,
            open_timeout=timeout,
        )
        return attrs.evolve(
            spec, factory=functools.partial(IsolatedEnv, host), inline=False, asynchronous=True
        )

    def zygote(self, name: str) -> Zygote:
        """Env `name`'s zygote, started again if it died.

        Raises:
            ZygoteDied: The server is stopping, or it could not be started again.
        """
        with self._lock:
            if self._stopped:
                raise ZygoteDied("the server is stopping")
            zygote = self._zygotes[name]
            if zygote.dead:
                log.warning(
                    "the zygote of env %r died (pid %s): starting another", name, zygote.pid
                )
                zygote.stop(0)
                zygote = self._zygotes[name] = Zygote.start(self._recipes[name])
            return zygote

    def processes(self) -> set[int]:
        """The pids of the zygotes and of their workers still running."""
        with self._lock:
            zygotes = list(self._zygotes.values())
        pids: set[int] = set()
        for zygote in zygotes:
            if zygote.process.poll() is None:
                pids.add(zygote.pid)
            pids |= zygote.workers()
        return pids

    def stop(self) -> None:
        """End every zygote, and with it every worker still running (blocking)."""
        with self._lock:
            self._stopped = True
            zygotes = list(self._zygotes.values())
        for zygote in zygotes:
            zygote.stop()
