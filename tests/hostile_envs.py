"""Envs whose code misbehaves the ways untrusted env code can: raising what is not an
Exception, hanging, blocking forever. The server must outlive each (tests/test_containment.py).
Contributed to a registry as the plugin module `tests.hostile_envs`."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

import anyio

import ecotone


class Misbehave(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    do: Literal["ok", "system_exit", "keyboard_interrupt", "base_exception", "hang", "sleep"] = "ok"
    seconds: float = 0.0


class Seen(ecotone.Observation, kw_only=True):
    steps: int = 0


class Crash(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


HANG = threading.Event()
"""Hung env calls wait on this: set it to let them go (tests do, at the end)."""


def misbehave(action: Misbehave) -> None:
    if action.do == "system_exit":
        raise SystemExit(3)
    if action.do == "keyboard_interrupt":
        raise KeyboardInterrupt
    if action.do == "base_exception":
        raise Crash("not an Exception")
    if action.do == "hang":
        HANG.wait()
    if action.do == "sleep":
        time.sleep(action.seconds)


class ThreadHostile(ecotone.Environment[Misbehave, Seen, ecotone.State]):
    """Runs in worker threads."""

    name = "thread_hostile"

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, do: str = "ok"
    ) -> Seen:
        misbehave(Misbehave(do=do))  # type: ignore[arg-type]
        self._state = ecotone.State(episode_id=episode_id)
        return Seen()

    def step(self, action: Misbehave) -> Seen:
        misbehave(action)
        self._state.step_count += 1
        return Seen(steps=self._state.step_count, reward=1.0)

    def state(self) -> ecotone.State:
        return self._state


class InlineHostile(ThreadHostile):
    """Runs on the event loop (inline): it cannot be given a deadline, but may not kill."""

    name = "inline_hostile"
    inline = True


class AsyncHostile(ecotone.AsyncEnvironment[Misbehave, Seen, ecotone.State]):
    """Coroutines, awaited on the server's loop."""

    name = "async_hostile"

    def __init__(self) -> None:
        self._state = ecotone.State()

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, do: str = "ok"
    ) -> Seen:
        await self._misbehave(Misbehave(do=do))  # type: ignore[arg-type]
        self._state = ecotone.State(episode_id=episode_id)
        return Seen()

    async def _misbehave(self, action: Misbehave) -> None:
        if action.do == "hang":
            await anyio.sleep_forever()
        if action.do == "sleep":
            await anyio.sleep(action.seconds)
        else:
            misbehave(action)

    async def step(self, action: Misbehave) -> Seen:
        await self._misbehave(action)
        self._state.step_count += 1
        return Seen(steps=self._state.step_count, reward=1.0)

    async def state(self) -> ecotone.State:
        return self._state


class Blow(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    do: Literal["ok", "abort", "segfault", "exit", "hang", "abort_once"] = "ok"
    flag: str = ""
    """`abort_once`: a file whose presence makes the step abort (it is removed first), so the
    step made again after a resume goes through."""


class Count(ecotone.Observation, kw_only=True):
    count: int = 0
    pid: int = 0
    """The process the env runs in."""


class CountState(ecotone.State, kw_only=True):
    count: int = 0


def blow(action: Blow) -> None:
    if action.do == "abort":
        os.abort()
    if action.do == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if action.do == "exit":
        os._exit(3)
    if action.do == "hang":
        time.sleep(3600)
    if action.do == "abort_once" and os.path.exists(action.flag):
        os.unlink(action.flag)
        os.abort()


class CrashingEnv(ecotone.Environment[Blow, Count, CountState]):
    """Kills its own process when told to: served with each session's env in a process of
    its own, which the crash costs that session only (tests/test_isolation.py)."""

    name = "crashing"
    isolation = "process"

    def __init__(self) -> None:
        self._state = CountState()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Count:
        self._state = CountState(episode_id=episode_id)
        return Count(pid=os.getpid())

    def step(self, action: Blow) -> Count:
        blow(action)
        self._state.count += 1
        self._state.step_count += 1
        return Count(count=self._state.count, pid=os.getpid(), reward=1.0)

    def state(self) -> CountState:
        return self._state

    def load_state(self, state: CountState) -> None:
        self._state = state


HOSTILE: dict[str, type] = {
    "thread_hostile": ThreadHostile,
    "inline_hostile": InlineHostile,
    "async_hostile": AsyncHostile,
    "crashing": CrashingEnv,
}


@ecotone.hookimpl
def ecotone_environments() -> Mapping[str, Any]:
    return dict(HOSTILE)
