"""The checks by name, in the order they run: how a check is declared and registered.

A check is declared with `@check(...)`, which makes the function a `Check` (still callable
as the function), and registered with `register(...)`, whose order is the order checks run
and are reported in: `checks/__init__.py` registers the env's checks, `protocol.py` the
protocol's. Nothing here imports the runner: a check is a function of one (`CheckFn`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import attrs

CheckFn = Callable[[Any], str | None]
"""A check: a function of a `Runner` that returns an optional note (it passed), or raises
`CheckFailed` or `CheckSkipped`."""


@attrs.frozen
class Check:
    name: str
    title: str
    """What the check verifies, in one line."""
    fn: CheckFn
    needs: tuple[str, ...] = ()
    """Checks that must pass first (a failed one makes this one a skip)."""
    openenv_skip: str = ""
    """Why the check does not apply to an OpenEnv server (empty: it does)."""
    seated: bool | None = None
    """Which envs it applies to: multi-agent ones (True: their sessions have seats), the
    others (False: their moves are `step`s), or both (None)."""

    def applies(self, seats: list[str]) -> bool:
        """Whether the check applies to an env with these seats (none: a single-agent env)."""
        return self.seated is None or self.seated == bool(seats)

    def __call__(self, runner: Any) -> str | None:
        """Run the check's function (the runner's `run` also memoizes and reports it)."""
        return self.fn(runner)


CHECKS: dict[str, Check] = {}
"""The env's checks (the contract), by name, in the order they run."""

PROTOCOL_CHECKS: dict[str, Check] = {}
"""The protocol's checks (`protocol.py`: rules every transport keeps), in the order they run.
They run by default against a URL; in process only when asked for."""


def check(
    name: str,
    *,
    needs: tuple[str, ...] = (),
    openenv_skip: str = "",
    seated: bool | None = None,
) -> Callable[[CheckFn], Check]:
    """Declare a check: the decorated function becomes a `Check` (not registered yet), its
    title the first paragraph of its docstring, joined into one line.

    The docstring says what the check checks (that first paragraph), then in a `Raises:`
    section when it fails (`CheckFailed`) and when it does not apply (`CheckSkipped`); the
    runner's own skips (a `needs` that did not pass, `openenv_skip`) are not repeated there.

    Raises:
        TypeError: the function has no docstring.
    """

    def declare(fn: CheckFn) -> Check:
        return Check(name, title_of(fn), fn, needs, openenv_skip, seated)

    return declare


def title_of(fn: CheckFn) -> str:
    """The first paragraph of `fn`'s docstring, in one line.

    Raises:
        TypeError: `fn` has no docstring.
    """
    doc = inspect.getdoc(fn)
    if not doc:
        raise TypeError(f"check {fn.__qualname__} has no docstring: its first line is its title")
    return " ".join(line.strip() for line in doc.split("\n\n", 1)[0].splitlines())


def register(*checks: Check, protocol: bool = False) -> None:
    """Register `checks` (the protocol's, with `protocol`), to run in this order after those
    registered before.

    Raises:
        ValueError: a name registered already.
    """
    into = PROTOCOL_CHECKS if protocol else CHECKS
    for chk in checks:
        if chk.name in CHECKS or chk.name in PROTOCOL_CHECKS:
            raise ValueError(f"a check named {chk.name!r} is registered already")
        into[chk.name] = chk


def check_named(name: str) -> Check:
    """An env or protocol check, by name; ValueError naming them all when there is none."""
    found = CHECKS.get(name) or PROTOCOL_CHECKS.get(name)
    if found is None:
        known = ", ".join([*CHECKS, *PROTOCOL_CHECKS])
        raise ValueError(f"no check named {name!r} (checks: {known})")
    return found
