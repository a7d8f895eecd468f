"""The runner: runs the checks against one target, and the helpers the checks play it with.

Each check is a function of a `Runner`; it raises `CheckFailed(what, expected, seen)` or
`CheckSkipped(reason)`, or returns (an optional note: it passed). Anything else it raises (an
error frame, a lost connection, an env exception) fails it, with what the runner was doing at
the time. Results are memoized per runner, so a check that needs another one (`needs`) runs it
first, once.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, TypedDict

import attrs

from ecotone.client.errors import EcotoneError, InvalidActionError, ServerError
from ecotone.client.results import StepResult
from ecotone.client.sync import EnvClient
from ecotone.conformance.expect import error_text, fail, show
from ecotone.conformance.generate import generate
from ecotone.conformance.registry import CHECKS, PROTOCOL_CHECKS, Check, check_named
from ecotone.conformance.report import CheckFailed, CheckResult, CheckSkipped, Report, Status
from ecotone.conformance.target import Target
from ecotone.specs import Response

REDRAWS: Final = 20
"""Schema-generated actions the env refuses (`invalid_action`) are drawn again, this often."""
EPISODE_ID: Final = "ecotone-conformance-episode"


def _seeds(seeds: Iterable[int]) -> tuple[int, ...]:
    return tuple(seeds)


def _reset_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(options or {})


class SettingKnobs(TypedDict, total=False):
    """`Settings`' fields, as the keyword arguments of `ecotone.conformance.run`."""

    seeds: Iterable[int]
    steps: int
    max_episode_steps: int
    reset_options: Mapping[str, Any] | None
    timeout: float


@attrs.frozen(kw_only=True)
class Settings:
    """The suite's knobs.

    `seeds`: the seeds episodes are played with (determinism is checked for each; the first two
    seed the concurrent sessions). `steps`: how many steps the short episodes take.
    `max_episode_steps`: the step budget for playing an episode to its end (`step_after_done`).
    `reset_options`: passed to every reset (for an env whose episodes end only with some).
    `timeout`: seconds per call.
    """

    seeds: tuple[int, ...] = attrs.field(default=(0, 1, 2), converter=_seeds)
    steps: int = 10
    max_episode_steps: int = 500
    reset_options: Mapping[str, Any] = attrs.field(factory=dict, converter=_reset_options)
    timeout: float = 30.0

    @classmethod
    def of(cls, knobs: Mapping[str, Any], owner: str) -> Settings:
        """The settings keyword `knobs` (`SettingKnobs`) give, the defaults for the others.

        Raises:
            TypeError: a knob that is not a setting, named as Python names an unknown keyword
                argument of `owner` (`"run()"`).
            ValueError: no seeds, or fewer than one step.
        """
        for name in knobs:
            if name not in SettingKnobs.__optional_keys__:
                raise TypeError(f"{owner} got an unexpected keyword argument {name!r}")
        return cls(**knobs)

    def __attrs_post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: give at least one seed")
        if self.steps < 1 or self.max_episode_steps < 1:
            raise ValueError("steps and max_episode_steps must be at least 1")


@attrs.define
class Sample:
    """An observation and the state right after it, from a short seeded episode."""

    label: str
    observation: Any
    state: Any


@attrs.define
class Played:
    """A session played step by step (concurrent_sessions)."""

    name: str
    client: EnvClient[Any, Any]
    seed: int
    rng: random.Random
    observations: list[Any] = attrs.field(factory=list)
    actions: list[Any] = attrs.field(factory=list)
    finished: bool = False
    state: Any = None


class Runner:
    """Runs checks against one target, each once; `report()` runs them all."""

    def __init__(self, target: Target, settings: Settings | None = None) -> None:
        self.target = target
        self.settings = settings or Settings()
        self.info = target.info
        self.results: dict[str, CheckResult] = {}
        self.doing = ""
        self._samples: dict[int, list[Sample]] = {}

    @property
    def seed(self) -> int:
        return self.settings.seeds[0]

    def run(self, name: str) -> CheckResult:
        """The result of check `name` (run now unless it already ran)."""
        if name in self.results:
            return self.results[name]
        chk = check_named(name)
        started = time.perf_counter()
        fields: dict[str, Any] = {"name": name, "title": chk.title}
        blocker = self._blocker(chk)
        if blocker:
            fields.update(status=Status.SKIP, reason=blocker)
        else:
            self.doing = "starting"
            try:
                note = chk.fn(self)
                fields.update(status=Status.PASS, note=note or "")
            except CheckFailed as exc:
                fields.update(
                    status=Status.FAIL, what=exc.what, expected=exc.expected, seen=exc.seen
                )
            except CheckSkipped as exc:
                fields.update(status=Status.SKIP, reason=str(exc))
            except Exception as exc:
                fields.update(
                    status=Status.FAIL,
                    what=f"while {self.doing}",
                    expected="no error",
                    seen=error_text(exc) + self._hint(exc),
                )
        result = CheckResult(seconds=round(time.perf_counter() - started, 4), **fields)
        self.results[name] = result
        return result

    def _blocker(self, chk: Check) -> str:
        if self.target.openenv and chk.openenv_skip:
            return chk.openenv_skip
        if not chk.applies(self.info.seats):
            if chk.seated:
                return "a multi-agent env's check: this env has no seats"
            return "a single-agent env's check: this env's moves are its seats' (seat checks)"
        for need in chk.needs:
            status = self.run(need).status
            if status is not Status.PASS:
                word = "failed" if status is Status.FAIL else "was skipped"
                return f"needs {need}, which {word}"
        return ""

    def _hint(self, exc: Exception) -> str:
        if isinstance(exc, InvalidActionError) and not self.target.has_sample_action:
            return (
                " (actions were generated from the Action schema: give the env a "
                "sample_action(rng) that returns valid actions)"
            )
        return ""

    def default_checks(self, protocol: bool | None = None) -> list[str]:
        """What runs when no check is named: the env's checks, and the protocol's when
        `protocol` says so; by default when the target is a server (its transport is then
        part of what is checked)."""
        if protocol is None:
            protocol = self.target.engine is None
        seats = self.info.seats
        env_checks = [name for name, chk in CHECKS.items() if chk.applies(seats)]
        return [*env_checks, *PROTOCOL_CHECKS] if protocol else env_checks

    def report(self, names: Iterable[str] | None = None, protocol: bool | None = None) -> Report:
        results = tuple(self.run(name) for name in (names or self.default_checks(protocol)))
        return Report(
            target=self.target.label,
            env=self.info.name,
            actions=self.target.action_source,
            results=results,
        )

    def close(self) -> None:
        self.target.close()

    # --- helpers the checks use ---------------------------------------------------------------

    def open(self) -> EnvClient[Any, Any]:
        self.doing = "opening a session"
        return self.target.open()

    @contextlib.contextmanager
    def session(self) -> Iterator[EnvClient[Any, Any]]:
        client = self.open()
        try:
            yield client
        finally:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()

    def reset(
        self, client: EnvClient[Any, Any], *, seed: int | None = None, episode_id: str | None = None
    ) -> StepResult[Any]:
        args = [f"seed={seed}"] if seed is not None else []
        if episode_id is not None:
            args.append(f"episode_id={episode_id!r}")
        args += [f"{k}={v!r}" for k, v in self.settings.reset_options.items()]
        self.doing = f"reset({', '.join(args)})"
        return client.reset(seed=seed, episode_id=episode_id, **self.settings.reset_options)

    def state(self, client: EnvClient[Any, Any]) -> dict[str, Any]:
        self.doing = "state()"
        state = client.state()
        if not isinstance(state, dict):  # pragma: no cover - the client decodes into dicts
            fail("state()", "a JSON object", show(state))
        return state

    def action(self, client: EnvClient[Any, Any], rng: random.Random) -> Any:
        """The next action: the env's sample_action(rng), else one from the Action schema."""
        if self.target.has_sample_action:
            self.doing = "sample_action(rng)"
            sampled = self.target.sample_action(client, rng)
            if sampled is not None:
                return sampled
        self.doing = "generating an action from the Action schema"
        return generate(self.info.action_schema, rng)

    def step(self, client: EnvClient[Any, Any], action: Any, label: str) -> StepResult[Any]:
        self.doing = f"{label} with action {show(action)}"
        return client.step(action)

    def step_sampled(
        self, client: EnvClient[Any, Any], rng: random.Random, label: str
    ) -> tuple[Any, StepResult[Any]]:
        """One step with a chosen action. A schema-generated action the env refuses (an
        illegal move its type cannot rule out) is drawn again, and when every draw is refused
        the check cannot play the env: it is skipped, as the env broke no rule."""
        for _ in range(REDRAWS):
            action = self.action(client, rng)
            try:
                return action, self.step(client, action, label)
            except InvalidActionError as exc:
                if self.target.has_sample_action:
                    raise
                refusal = exc
        last = str(refusal.details.get("reason") or refusal.message)
        last = last if len(last) <= 100 else last[:97] + "..."
        remedy = (
            "give the env a sample_action(rng)"
            if self.target.engine is not None
            else "check it in process (ecotone validate ENV) to use its sample_action(rng)"
        )
        raise CheckSkipped(
            f"cannot choose an action the env accepts: {REDRAWS} drawn from its Action schema "
            f"were refused at {label} (last: {last}); {remedy}"
        )

    def play(
        self, client: EnvClient[Any, Any], rng: random.Random, limit: int
    ) -> list[tuple[Any, StepResult[Any]]]:
        """Up to `limit` steps, stopping when the episode ends."""
        played: list[tuple[Any, StepResult[Any]]] = []
        for i in range(1, limit + 1):
            action, result = self.step_sampled(client, rng, f"step {i}")
            played.append((action, result))
            if result.finished:
                break
        return played

    def replay(self, client: EnvClient[Any, Any], seed: int, actions: list[Any]) -> list[Any]:
        """reset(seed) and the given actions: the observations seen (an error frame ends it)."""
        seen = [self.reset(client, seed=seed).observation]
        for i, action in enumerate(actions, 1):
            try:
                seen.append(self.step(client, action, f"replayed step {i}").observation)
            except ServerError as exc:
                seen.append({"error": exc.code, "message": exc.message})
                break
        return seen

    def samples(self, seed: int) -> list[Sample]:
        """A short seeded episode's observations, each with the state after it (memoized)."""
        if seed not in self._samples:
            out: list[Sample] = []
            with self.session() as client:
                rng = random.Random(seed)
                first = self.reset(client, seed=seed)
                out.append(Sample("after reset", first.observation, self.state(client)))
                for i in range(1, self.settings.steps + 1):
                    _, result = self.step_sampled(client, rng, f"step {i}")
                    out.append(Sample(f"after step {i}", result.observation, self.state(client)))
                    if result.finished:
                        break
            self._samples[seed] = out
        return self._samples[seed]

    def request(self, frame: Any) -> Response:
        """Send one raw request frame on the target's connection."""
        self.doing = f"sending a {type(frame).__name__.lower()} frame"
        return self.target.connection.request(frame)

    def next_id(self) -> int:
        return self.target.connection.core.next_id()
