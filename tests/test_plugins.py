"""Plugins: entry-point discovery, name clashes, lifecycle hooks, and a real third-party
distribution built, installed into this venv, used, and uninstalled again."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.kernel import (
    Engine,
    EnvDefinitionError,
    EnvSpec,
    Limits,
    Mode,
    Registry,
    RegistryError,
)
from ecotone.plugins.counter import CounterAction, CounterEnv, CounterObservation
from ecotone.plugins.echo import EchoEnv
from ecotone.specs import Open, Opened, Reset
from ecotone.transports.inproc.server import InprocTransport
from ecotone.transports.websocket.server import WebSocketTransport
from tests.conftest import SessionRecorder, run_server, wait_until
from tests.engine_driver import Driver
from tests.envs import AsyncCounterEnv

PLUGIN_DIST = Path(__file__).resolve().parent / "plugin_dist"

# --- discovery -------------------------------------------------------------------------------


def test_bundled_plugins_come_through_entry_points_of_the_ecotone_distribution() -> None:
    registry = Registry.discover()
    environments = registry.environments()
    assert {"counter", "echo"} <= set(environments)
    assert environments["counter"].value is CounterEnv
    assert environments["echo"].value is EchoEnv
    for name in ("counter", "echo"):
        assert (environments[name].distribution, environments[name].plugin) == ("ecotone", name)
        assert environments[name].kind == "environments"

    transports = registry.transports()
    assert isinstance(transports["websocket"].value, WebSocketTransport)
    assert isinstance(transports["inproc"].value, InprocTransport)
    assert {transports[n].distribution for n in ("websocket", "inproc")} == {"ecotone"}


def test_env_spec_resolves_a_discovered_env_and_names_the_installed_ones_otherwise() -> None:
    registry = Registry.discover()
    spec = registry.env_spec("counter")
    assert (spec.name, spec.action_type, spec.inline) == ("counter", CounterAction, True)
    with pytest.raises(
        RegistryError, match=r"no environment named 'backgammon' \(installed: .*echo"
    ):
        registry.env_spec("backgammon")
    with pytest.raises(RegistryError, match="no transport named 'smoke-signals'"):
        registry.transport("smoke-signals")


class Impostor:
    """A hand-registered plugin that claims a bundled env's name."""

    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return {"counter": EchoEnv}


def test_a_name_claimed_by_two_plugins_is_an_error_naming_both() -> None:
    registry = Registry.discover()
    registry.register(Impostor(), "impostor")
    with pytest.raises(RegistryError) as clash:
        registry.environments()
    message = str(clash.value)
    assert "'counter' is contributed twice" in message
    assert "'impostor'" in message
    assert "by plugin 'counter'" in message or "by 'counter'" in message
    with pytest.raises(RegistryError):
        registry.env_spec("counter")


def test_a_hand_registered_plugin_is_marked_not_installed() -> None:
    class Extra:
        @ecotone.hookimpl
        def ecotone_environments(self) -> Mapping[str, Any]:
            return {"counter2": CounterEnv}

    registry = Registry.discover()
    registry.register(Extra(), "extra")
    entry = registry.environments()["counter2"]
    assert (entry.plugin, entry.distribution) == ("extra", "(not installed)")
    assert registry.env_spec("counter2").name == "counter2"


def test_an_env_class_without_its_types_is_rejected_with_a_clear_error() -> None:
    class Untyped:
        def reset(self) -> None: ...
        def step(self, action: Any) -> None: ...
        def close(self) -> None: ...

        def state(self) -> None: ...

    with pytest.raises(EnvDefinitionError, match="'untyped' does not declare its action_type"):
        EnvSpec.from_class(Untyped, "untyped")


# --- lifecycle hooks -------------------------------------------------------------------------


def test_lifecycle_hooks_fire_for_open_step_and_close() -> None:
    with run_server("counter") as server:
        recorder = server.recorder
        with ecotone.connect(server.url) as env:
            session = env.session_id
            env.reset()
            env.step({"delta": 2})
            with pytest.raises(ecotone.InvalidActionError):
                env.step({"delta": "x"})  # not a completed step
            env.step({"delta": 3})
        assert recorder.opened == [(session, "counter")]
        assert [(s, e, a, o) for s, e, a, o in recorder.steps] == [
            (session, "counter", CounterAction(delta=2), CounterObservation(count=2, reward=2.0)),
            (session, "counter", CounterAction(delta=3), CounterObservation(count=5, reward=3.0)),
        ]
        assert recorder.closed == [(session, "counter", "client")]


def test_the_closed_hook_says_why_a_session_closed() -> None:
    with run_server("counter") as server:
        recorder = server.recorder
        with ecotone.connect(server.url) as polite:
            by_client = polite.session_id
        leaving = ecotone.Connection(server.url)
        by_disconnect = leaving.open().session_id
        leaving.close()
        assert wait_until(lambda: recorder.close_reason(by_disconnect) is not None)
        staying = ecotone.connect(server.url)
        by_shutdown = staying.session_id
    try:
        assert recorder.close_reason(by_client) == "client"
        assert recorder.close_reason(by_disconnect) == "disconnect"
        # Stopping the server drops its connections first, so their sessions close as
        # `disconnect`; what matters is that none is left open.
        assert recorder.close_reason(by_shutdown) in ("disconnect", "shutdown")
        assert recorder.open_sessions == set()
    finally:
        staying.close()


async def test_kernel_hooks_report_idle_and_shutdown_closes() -> None:
    recorder = SessionRecorder()
    registry = Registry.discover()
    registry.register(recorder, "recorder")
    now = [0.0]
    driver = Driver(
        Engine(
            registry.env_spec("counter"),
            limits=Limits(lease=5.0),
            hooks=registry.pm.hook,
            clock=lambda: now[0],
        )
    )
    conn = driver.peer()
    opened = []
    for rid in (1, 2):
        reply = await driver.ask(conn, Open(id=rid))
        assert isinstance(reply, Opened)
        opened.append(reply.session)
    now[0] = 6.0
    reply = await driver.ask(conn, Reset(id=3, session=opened[1]))
    now[0] = 10.0
    await driver.expire()
    assert len(driver.engine.sessions) == 1
    await driver.shutdown()
    assert recorder.opened == [(opened[0], "counter"), (opened[1], "counter")]
    assert recorder.closed == [(opened[0], "counter", "lease"), (opened[1], "counter", "shutdown")]


# --- a third-party distribution --------------------------------------------------------------


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


PLAY_REVERSE = textwrap.dedent(
    """
    import ecotone

    with ecotone.connect("inproc://reverse") as env:
        env.reset(max_steps=5)
        first = env.step({"text": "ecotone"})
        last = env.step({"text": ""})
        print(first.observation["reversed"], first.reward, last.done, env.state()["step_count"])
    """
)


def test_a_third_party_distribution_is_discovered_through_its_entry_point(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(PLUGIN_DIST, source, ignore=shutil.ignore_patterns("__pycache__", "build"))
    wheels = tmp_path / "wheels"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, source)
    (wheel,) = wheels.glob("ecotone_testplugin-*.whl")

    try:
        run(*pip, "install", "--no-deps", "--no-index", "--force-reinstall", "-q", wheel)

        listed = run(sys.executable, "-m", "ecotone", "list", cwd=tmp_path).stdout
        assert re.search(r"^  reverse\s+from ecotone-testplugin\s+Reverses each text", listed, re.M)
        assert re.search(r"^  counter\s+from ecotone\s", listed, re.M)

        played = run(sys.executable, "-c", PLAY_REVERSE, cwd=tmp_path).stdout
        assert played.split() == ["enotoce", "7.0", "True", "2"]

        served = run(
            sys.executable, "-m", "ecotone", "play", "reverse", "--action", '{"text": "abc"}',
            cwd=tmp_path,
        ).stdout  # fmt: skip
        assert '{"text": "abc"} -> {' in served
        assert '"reversed": "cba"' in served
        assert "episode truncated" in served
    finally:
        subprocess.run(
            [*pip, "uninstall", "-y", "-q", "ecotone-testplugin"],
            capture_output=True,
            timeout=120,
        )
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("ecotone-testplugin")
    assert "reverse" not in Registry.discover().environments()


# --- the typed contract: one form of state, plain or async, never mixed -----------------------


class _Tick(ecotone.Action):
    n: int = 1


class _Seen(ecotone.Observation):
    n: int = 0


def test_a_state_property_is_refused_with_what_to_write_instead() -> None:
    class Old(ecotone.Environment[_Tick, _Seen, ecotone.State]):
        def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> _Seen:
            return _Seen()

        def step(self, action: _Tick) -> _Seen:
            return _Seen()

        @property
        def state(self) -> ecotone.State:  # type: ignore[override]
            return ecotone.State()

    with pytest.raises(
        EnvDefinitionError, match=r"`state` is a property.*def state\(self\) -> State"
    ):
        EnvSpec.from_class(Old, "old")


def test_a_coroutine_in_a_plain_environment_is_refused_naming_it() -> None:
    class Mixed(ecotone.Environment[_Tick, _Seen, ecotone.State]):
        def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> _Seen:
            return _Seen()

        async def step(self, action: _Tick) -> _Seen:  # type: ignore[override]
            return _Seen()

        def state(self) -> ecotone.State:
            return ecotone.State()

    with pytest.raises(
        EnvDefinitionError, match=r"step\(\) is a coroutine: subclass ecotone.AsyncEnvironment"
    ):
        EnvSpec.from_class(Mixed, "mixed")


def test_a_plain_method_in_an_async_environment_is_refused_naming_it() -> None:
    class Mixed(ecotone.AsyncEnvironment[_Tick, _Seen, ecotone.State]):
        async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> _Seen:
            return _Seen()

        async def step(self, action: _Tick) -> _Seen:
            return _Seen()

        def state(self) -> ecotone.State:  # type: ignore[override]
            return ecotone.State()

        def render(self) -> str:
            return ""

    with pytest.raises(EnvDefinitionError, match=r"state\(\), render\(\) are plain functions"):
        EnvSpec.from_class(Mixed, "mixed")


def test_a_method_left_to_the_base_class_is_not_implemented() -> None:
    class Lazy(ecotone.Environment[_Tick, _Seen, ecotone.State]):
        def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> _Seen:
            return _Seen()

        def state(self) -> ecotone.State:
            return ecotone.State()

    with pytest.raises(EnvDefinitionError, match=r"'lazy' does not implement step\(\)"):
        EnvSpec.from_class(Lazy, "lazy")


def test_an_env_class_of_its_own_may_be_plain_or_async_but_not_both() -> None:
    class Duck:
        action_type = _Tick
        observation_type = _Seen
        state_type = ecotone.State

        async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> _Seen:
            return _Seen()

        async def step(self, action: _Tick) -> _Seen:
            return _Seen()

        def state(self) -> ecotone.State:
            return ecotone.State()

        def close(self) -> None:
            return None

    with pytest.raises(EnvDefinitionError, match=r"mixes coroutines \(reset\(\), step\(\)\)"):
        EnvSpec.from_class(Duck, "duck")


def test_an_async_environment_is_awaited_for_every_method() -> None:
    spec = EnvSpec.from_class(AsyncCounterEnv, "async_counter")
    assert spec.asynchronous and spec.mode is Mode.AWAIT and not spec.inline
