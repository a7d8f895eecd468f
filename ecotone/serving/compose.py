"""Running a server: registry + engine + runner + transport, from a ServerConfig.

Composition only: this module wires the public pieces together for `ecotone serve`, for tests
and for users who embed a server in their own program (`BackgroundServer`).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import trio

from ecotone.kernel import Engine, Registry
from ecotone.kernel.config import ServerConfig, with_token
from ecotone.kernel.exposure import mark_served
from ecotone.kernel.rubrics import load_rubric
from ecotone.kernel.sealing import Seal
from ecotone.server.admission import admission_for, is_loopback, resolve_tokens, tls_context
from ecotone.server.checkpoints import CheckpointDir
from ecotone.server.isolation import Workers, check, isolated
from ecotone.server.logs import SessionLog
from ecotone.server.metrics import Metrics
from ecotone.server.runner import Runner

log = logging.getLogger("ecotone.server")

NETWORK_TRANSPORTS = frozenset({"websocket", "http", "tcp"})
"""Transports that listen on an address (unix, stdio, mcp and inproc do not)."""


def build_engine(
    config: ServerConfig,
    registry: Registry,
    tokens: tuple[str, ...] = (),
    workers: Workers | None = None,
) -> Engine:
    """The engine serving `config`'s env. An env to run in processes of its own
    (`config.isolate`, or the env's `isolation`) is checked here, and its zygote started
    by `workers` (None: only checked, as before the event loop starts)."""
    if not config.env:
        raise ValueError("no environment to serve: name one (ecotone serve ENV) or set `env`")
    spec = registry.env_spec(config.env)
    if config.tasks:
        spec = spec.with_task_files(config.tasks)
    if config.rubric:
        spec = spec.with_rubric(load_rubric(config.rubric))
    if isolated(spec, config.isolate):
        check(spec)
        if workers is not None:
            spec = workers.isolate(spec, config.limits)
    engine = Engine(spec, limits=config.limits, hooks=registry.pm.hook, tokens=tokens)
    snapshots = config.snapshots
    key_file = snapshots.key_file
    if key_file is None and snapshots.checkpoint_dir is not None:
        # A server started later on the same directory must open what this one sealed.
        key_file = str(Seal.write_key(CheckpointDir(snapshots.checkpoint_dir).path / "key"))
    if key_file is not None:
        engine.seal = Seal.from_file(key_file)
    if snapshots.checkpoint_dir is not None:
        engine.checkpoints = CheckpointDir(snapshots.checkpoint_dir)
    return engine


def transport_for(config: ServerConfig, registry: Registry) -> Any:
    """The transport `config` names; with `web`, one that can serve the web UI (`serves_web`),
    else ValueError."""
    transport = registry.transport(config.transport)
    if config.web and not getattr(transport, "serves_web", False):
        raise ValueError(
            f"transport {config.transport!r} cannot serve the web UI (web = true): "
            "use the http transport"
        )
    return transport


def web_url(url: str) -> str:
    """The web UI's address on a server started at `url` (http://HOST:PORT[?token=...])."""
    base, sep, query = url.partition("?")
    return base.rstrip("/") + "/web" + sep + query


class Stopping:
    """What the code that stops a server may do first, while its connections are open: hand
    one to `serve` and `await drain()` before cancelling it (`ecotone serve` drains on
    SIGTERM, and on SIGINT without waiting for episodes)."""

    def __init__(self) -> None:
        self.runner: Runner | None = None

    async def drain(self, wait: bool = True) -> None:
        """Admit nothing new, let running episodes end (`limits.drain_timeout`; without
        `wait`, at once), checkpoint the sessions left (with `--checkpoint-dir`) and tell
        their clients (`shutting_down`): `Runner.drain`."""
        if self.runner is not None:
            await self.runner.drain(wait)


async def serve(
    config: ServerConfig,
    *,
    registry: Registry | None = None,
    stopping: Stopping | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `config.env` over `config.transport` until cancelled; close every session then
    (`stopping`: what its stopper may do first)."""
    registry = registry or Registry.discover()
    transport = transport_for(config, registry)
    recorder = None
    if config.recording.dir is not None:
        from ecotone.recording import TrajectoryRecorder

        # Registered before the engine is built: the engine looks its hooks up once.
        recorder = TrajectoryRecorder(config.recording.dir, format=config.recording.format)  # type: ignore[arg-type]
        registry.register(recorder, name="ecotone.recording")
    # Plugins of the server itself, registered before the engine looks its hooks up.
    metrics = Metrics(step_latency=config.metrics.step_latency)
    own = [*metrics.plugins(), SessionLog()]
    for plugin in own:
        registry.register(plugin)
    auth = config.auth
    tokens, made = resolve_tokens(auth.token, auth.token_file, auth.required, config.host)
    token = tokens[0] if tokens else None
    # Before the engine (and any env) is made: envs may be stricter on an exposed server.
    mark_served(config.transport in NETWORK_TRANSPORTS and not is_loopback(config.host))
    workers = Workers()
    try:
        engine = build_engine(config, registry, tokens, workers)
        admission = admission_for(tokens, config.access.origins, config.access.hosts, config.host)
        tls = tls_context(config.tls.cert, config.tls.key, config.transport)
    except BaseException:
        workers.stop()
        raise
    options = {"web": True} if config.web else {}
    runner: Runner | None = None
    if made and token is not None:
        announced, shown = task_status, token

        class _Announce:
            def started(self, value: Any = None) -> None:
                announced.started(with_token(str(value), shown))

        task_status = _Announce()
    try:
        # The runner's nursery holds the env calls: they outlive the connection that asked
        # (its sessions close when they end) and end, at the latest, with the server.
        async with trio.open_nursery() as calls:
            runner = Runner(engine, calls)
            if stopping is not None:
                stopping.runner = runner
            runner.admission = admission
            runner.mcp = config.mcp
            runner.metrics = metrics
            runner.tls = tls
            runner.openenv = config.openenv
            metrics.runner = runner
            calls.start_soon(runner.reap_idle)
            await transport.serve(
                runner, config.host, config.port, task_status=task_status, **options
            )
            calls.cancel_scope.cancel()  # the transport returned: stop reaping
    finally:
        with trio.CancelScope(shield=True):
            if runner is not None:
                await runner.shutdown()
            # Every session is closed (its worker gone); what is left (a worker whose close
            # outlived shutdown_timeout) ends with its zygote.
            await trio.to_thread.run_sync(workers.stop)
            if recorder is not None:
                recorder.close()
                registry.pm.unregister(recorder)
            for plugin in own:
                registry.pm.unregister(plugin)


class BackgroundServer:
    """A server in a background thread of this process (tests, notebooks, `ecotone play`).

    with BackgroundServer(ServerConfig(env="counter", port=0)) as server:
        client = ecotone.connect(server.url)
    """

    def __init__(self, config: ServerConfig, registry: Registry | None = None) -> None:
        self.config = config
        self.registry = registry
        self.url = ""
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ecotone-server", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._cancel = scope
                async with trio.open_nursery() as nursery:
                    self.url = await nursery.start(
                        lambda task_status: serve(
                            self.config, registry=self.registry, task_status=task_status
                        )
                    )
                    self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"server did not start within {timeout}s")
        if self._error is not None:
            raise RuntimeError(f"server failed to start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        if self._token is not None and self._cancel is not None and self._thread.is_alive():
            try:
                self._token.run_sync_soon(self._cancel.cancel)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
