"""Start an env server through a provider and connect to it: `ecotone.launch`.

    with ecotone.launch("counter", provider="process") as env:
        env.reset(seed=0)
        env.step({"delta": 1})

    async with ecotone.alaunch("counter", provider="podman") as env:   # trio or asyncio
        await env.reset(seed=0)

`launch` / `alaunch` yield a connected client and tear the server down on every way out of
the `with` block. `start_server` / `astart_server` give the server itself (its URL, logs,
stop) for callers that connect on their own, such as a vector env over several servers.

Composition only, like `ecotone.server`: the provider contract is `ecotone.providers.contract`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, TypeVar

import anyio
import anyio.from_thread
import attrs

from ecotone.client.aio import AsyncEnvClient, aconnect
from ecotone.client.sync import EnvClient, connect
from ecotone.kernel.exit import close_at_exit, forget_at_exit
from ecotone.kernel.registry import Registry
from ecotone.providers.contract import LaunchSpec, Provider, Resources, ServerHandle

T = TypeVar("T")


def provider_for(name: str, registry: Registry | None = None) -> Provider:
    """The provider registered as `name`; a ValueError listing the installed ones if none."""
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
    """A LaunchSpec for `env` from keywords.

    LaunchSpec's fields, with its defaults: `transport` ("websocket"), `image` (None),
    `resources` (Resources(); also a mapping of its fields), `environment`, `secrets` and
    `labels` (empty; None too), `ready_timeout` (60.0), `max_sessions` (None). Every other
    keyword is a provider option (`LaunchSpec.options`), which the provider checks when it
    starts (it refuses what it does not take, naming it)."""
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


async def astart_server(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> ServerHandle:
    """Start a server for `env` (an env name, with LaunchSpec fields as keywords, or a
    LaunchSpec) and return its handle once it answers. The caller stops it."""
    chosen = provider_for(provider, registry) if isinstance(provider, str) else provider
    if isinstance(env, LaunchSpec):
        if spec:
            raise TypeError(
                f"a LaunchSpec was given, so {', '.join(sorted(spec))} would be ignored: "
                "put them in the LaunchSpec (attrs.evolve(spec, ...))"
            )
        launch_spec = env
    else:
        launch_spec = make_spec(env, **spec)
    return await chosen.start(launch_spec)


@contextlib.asynccontextmanager
async def alaunch(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    codec: str = "json",
    timeout: float | None = 60.0,
    **spec: Any,
) -> AsyncIterator[AsyncEnvClient[Any, Any]]:
    """Start a server, connect one session to it, yield the client; on the way out close the
    client and stop the server (also when the block raises or is cancelled)."""
    handle = await astart_server(env, provider=provider, registry=registry, **spec)
    try:
        client = await aconnect(handle.url, codec=codec, timeout=timeout)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await client.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await handle.stop()


class LaunchedServer:
    """The blocking face of a started server: `start_server(...)` returns one.

    Its provider's async calls run in a private event loop thread (an anyio blocking portal
    on trio), so it can be used from plain threads. One left running when the program ends is
    stopped then (`ecotone.kernel.exit`)."""

    def __init__(
        self,
        env: str | LaunchSpec,
        *,
        provider: str | Provider = "process",
        registry: Registry | None = None,
        **spec: Any,
    ) -> None:
        self._portal_cm = anyio.from_thread.start_blocking_portal(backend="trio")
        self._portal = self._portal_cm.__enter__()
        try:
            self.handle: ServerHandle = self._portal.call(
                lambda: astart_server(env, provider=provider, registry=registry, **spec)
            )
        except BaseException:
            # With the exception (KeyboardInterrupt: Ctrl-C during a start), the portal
            # cancels the start instead of waiting it out, and the provider's own cleanup
            # removes what it had made; (None, None, None) would let it finish, then leak it.
            self._portal_cm.__exit__(*sys.exc_info())
            raise
        self._stopped = False
        # if the program ends first: the server, and the loop's thread
        self._at_exit = close_at_exit(self.stop)

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def id(self) -> str:
        return self.handle.id

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._stopped:  # the portal is gone; what a stopped handle answers needs no loop
            return anyio.run(fn, backend="trio")
        return self._portal.call(fn)

    def logs(self, tail: int | None = 200) -> str:
        """What the server printed, its last `tail` lines (also after `stop`, as far as the
        provider kept them)."""
        return self._call(lambda: self.handle.logs(tail))

    def alive(self) -> bool:
        return self._call(self.handle.alive)

    def connect(self, **kwargs: Any) -> EnvClient[Any, Any]:
        """Open a session on this server (`ecotone.connect(self.url, **kwargs)`)."""
        return connect(self.url, **kwargs)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and remove what it left; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        forget_at_exit(self._at_exit)
        try:
            self._portal.call(lambda: self.handle.stop(timeout))
        finally:
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> LaunchedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LaunchedServer {self.handle.provider}:{self.handle.id} at {self.url}>"


def start_server(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    **spec: Any,
) -> LaunchedServer:
    """Start a server and return it once it answers (blocking). Stop it with `.stop()` or
    use it as a context manager."""
    return LaunchedServer(env, provider=provider, registry=registry, **spec)


@contextlib.contextmanager
def launch(
    env: str | LaunchSpec,
    *,
    provider: str | Provider = "process",
    registry: Registry | None = None,
    codec: str = "json",
    timeout: float | None = 60.0,
    **spec: Any,
) -> Iterator[EnvClient[Any, Any]]:
    """Start a server, connect one session to it, yield the client; on the way out close the
    client and stop the server, however the block ends."""
    with start_server(env, provider=provider, registry=registry, **spec) as server:
        client = server.connect(codec=codec, timeout=timeout)
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()
