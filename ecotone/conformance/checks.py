"""The checks, the runner that runs them, and the report.

Each check is a function of a `Runner`; it raises `CheckFailed(what, expected, seen)` or
`CheckSkipped(reason)`, or returns (an optional note: it passed). Anything else it raises (an
error frame, a lost connection, an env exception) fails it, with what the runner was doing at
the time. Results are memoized per runner, so a check that needs another one (`needs`) runs it
first, once.
"""

from __future__ import annotations

import contextlib
import enum
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, NoReturn

import attrs
import msgspec

from ecotone.client.errors import CapacityError, EcotoneError, InvalidActionError, ServerError
from ecotone.client.results import StepResult
from ecotone.client.sync import EnvClient
from ecotone.conformance.generate import generate, invalid_action, object_schema
from ecotone.conformance.schema import SchemaDefinitionError, refs, resolve, validate
from ecotone.conformance.target import Target
from ecotone.specs import (
    Close,
    Error,
    ErrorCode,
    GetState,
    Hello,
    ObservationFrame,
    Ping,
    Pong,
    Reset,
    ResetArgs,
    Response,
    Step,
    StepColumns,
    StepColumnsResult,
    StepItem,
    StepMany,
    StepManyResult,
    Welcome,
)

REDRAWS: Final = 20
"""Schema-generated actions the env refuses (`invalid_action`) are drawn again, this often."""
EPISODE_ID: Final = "ecotone-conformance-episode"


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


class CheckFailed(Exception):
    """A check saw something other than what the contract promises."""

    def __init__(self, what: str, expected: str, seen: str) -> None:
        super().__init__(f"{what}: expected {expected} / seen {seen}")
        self.what = what
        self.expected = expected
        self.seen = seen


class CheckSkipped(Exception):
    """A check cannot apply to this env or server; the message says why."""


@attrs.frozen(kw_only=True)
class CheckResult:
    """The outcome of one check. A failure says `what` was looked at, what was `expected`
    and what was `seen`; a skip gives its `reason`; a pass may carry a `note`."""

    name: str
    status: Status
    title: str
    what: str = ""
    expected: str = ""
    seen: str = ""
    reason: str = ""
    note: str = ""
    seconds: float = 0.0

    @property
    def message(self) -> str:
        """The line's text after the check's name."""
        if self.status is Status.FAIL:
            return f"{self.what}: expected {self.expected} / seen {self.seen}"
        if self.status is Status.SKIP:
            return self.reason
        return f"({self.note})" if self.note else ""

    def line(self, width: int = 0) -> str:
        """`PASS  name`, `FAIL  name  what: expected ... / seen ...`, `SKIP  name  reason`."""
        text = f"{self.status.value}  {self.name:<{width}}  {self.message}"
        return text.rstrip()

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["status"] = self.status.value
        return data


def _seeds(seeds: Iterable[int]) -> tuple[int, ...]:
    return tuple(seeds)


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
    reset_options: Mapping[str, Any] = attrs.field(factory=dict)
    timeout: float = 30.0

    def __attrs_post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: give at least one seed")
        if self.steps < 1 or self.max_episode_steps < 1:
            raise ValueError("steps and max_episode_steps must be at least 1")


CheckFn = Callable[["Runner"], str | None]


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


CHECKS: dict[str, Check] = {}
"""The env's checks (the contract), by name, in the order they run."""

PROTOCOL_CHECKS: dict[str, Check] = {}
"""The protocol's checks (`protocol.py`: rules every transport keeps), in the order they run.
They run by default against a URL; in process only when asked for."""


def check(
    name: str,
    title: str,
    *,
    needs: tuple[str, ...] = (),
    openenv_skip: str = "",
    protocol: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        (PROTOCOL_CHECKS if protocol else CHECKS)[name] = Check(
            name, title, fn, needs, openenv_skip
        )
        return fn

    return register


def check_named(name: str) -> Check:
    """An env or protocol check, by name; ValueError naming them all when there is none."""
    found = CHECKS.get(name) or PROTOCOL_CHECKS.get(name)
    if found is None:
        known = ", ".join([*CHECKS, *PROTOCOL_CHECKS])
        raise ValueError(f"no check named {name!r} (checks: {known})")
    return found


# --- helpers ---------------------------------------------------------------------------------


def show(value: Any, limit: int = 160) -> str:
    """Compact JSON for messages, cut at `limit` characters."""
    try:
        text = json.dumps(msgspec.to_builtins(value), separators=(", ", ": "), default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expect(ok: object, what: str, expected: str, seen: str) -> None:
    if not ok:
        raise CheckFailed(what, expected, seen)


def fail(what: str, expected: str, seen: str) -> NoReturn:
    raise CheckFailed(what, expected, seen)


def answer(response: Response) -> str:
    """A response frame, for messages."""
    if isinstance(response, Error):
        return f"[{response.code}] {response.message}"
    return f"a {type(response).__name__.lower()} frame"


def error_text(exc: BaseException, limit: int = 300) -> str:
    """An exception, for messages (an error frame as `[code] message`), cut at `limit`."""
    if isinstance(exc, ServerError):
        text = f"[{exc.code}] {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expect_refused(
    client: Any, action: Any, code: ErrorCode, what: str, expected: str
) -> ServerError:
    """Step with `action` and require the server to refuse it with `code`; the error."""
    try:
        result = client.step(action)
    except ServerError as exc:
        expect(exc.code == code, what, expected, error_text(exc))
        return exc
    fail(what, expected, f"an observation {show(result.observation)}")


def _difference(expected: Any, seen: Any) -> tuple[Any, Any]:
    """The keys where two dicts differ (all of both values otherwise)."""
    if isinstance(expected, dict) and isinstance(seen, dict):
        keys = [k for k in {**expected, **seen} if expected.get(k, ...) != seen.get(k, ...)]
        return (
            {k: expected.get(k, "(absent)") for k in keys},
            {k: seen.get(k, "(absent)") for k in keys},
        )
    return expected, seen


def same_trajectory(expected: list[Any], seen: list[Any], labels: list[str], context: str) -> None:
    for i, (want, got) in enumerate(zip(expected, seen, strict=False)):
        if want != got:
            want, got = _difference(want, got)
            fail(f"{context}: {labels[i]}", show(want), show(got))
    if len(seen) < len(expected):
        fail(f"{context}: {labels[len(seen)]}", show(expected[len(seen)]), "nothing")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _without_episode_id(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "episode_id"}


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


# --- the runner ------------------------------------------------------------------------------


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
        return [*CHECKS, *PROTOCOL_CHECKS] if protocol else list(CHECKS)

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


@attrs.frozen(kw_only=True)
class Report:
    """Every result, and the lines `ecotone validate` prints."""

    target: str
    env: str
    actions: str
    results: tuple[CheckResult, ...]

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status is status)

    @property
    def ok(self) -> bool:
        """Nothing failed (skips are not failures)."""
        return self.count(Status.FAIL) == 0

    @property
    def summary(self) -> str:
        return (
            f"{len(self.results)} checks: {self.count(Status.PASS)} passed, "
            f"{self.count(Status.FAIL)} failed, {self.count(Status.SKIP)} skipped"
        )

    def lines(self) -> list[str]:
        width = max((len(r.name) for r in self.results), default=0)
        return [
            f"ecotone conformance: {self.target}; actions {self.actions}",
            *(r.line(width) for r in self.results),
            self.summary,
        ]

    def text(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "env": self.env,
            "actions": self.actions,
            "ok": self.ok,
            "summary": {
                "checks": len(self.results),
                "passed": self.count(Status.PASS),
                "failed": self.count(Status.FAIL),
                "skipped": self.count(Status.SKIP),
            },
            "checks": [r.to_dict() for r in self.results],
        }


# --- the checks ------------------------------------------------------------------------------

_OPENENV_NO_RULE = "OpenEnv's protocol has no {} error: the rule cannot be checked there"
_OPENENV_CLOSE = (
    "ecotone's OpenEnv adapter answers a closed session itself (it drops the socket): the "
    "server's side of close cannot be observed"
)


@check(
    "describe",
    "describe() gives a name and object schemas for action, observation and state; the state "
    "schema has episode_id and step_count",
)
def check_describe(r: Runner) -> str:
    info = r.info
    expect(
        isinstance(info.name, str) and info.name.strip(),
        "describe().name",
        "a non-empty name",
        show(info.name),
    )
    for kind in ("action", "observation", "state"):
        schema = getattr(info, f"{kind}_schema")
        what = f"describe().{kind}_schema"
        expect(isinstance(schema, dict) and schema, what, "a JSON Schema object", show(schema))
        for ref in refs(schema):
            try:
                resolve(ref, schema)
            except SchemaDefinitionError as exc:
                fail(what, "every $ref to resolve", str(exc))
        top = object_schema(schema)
        expect(
            top.get("type") == "object" or "properties" in top,
            what,
            'an object schema ("type": "object")',
            show(top),
        )
    properties = object_schema(info.state_schema).get("properties", {})
    missing = [name for name in ("episode_id", "step_count") if name not in properties]
    expect(
        not missing,
        "describe().state_schema properties",
        "episode_id and step_count (ecotone.State has both)",
        f"no {' and no '.join(missing)} among {show(sorted(properties))}",
    )
    return f"env {info.name!r}, version {info.version!r}"


@check(
    "reset_before_step",
    "a step before the first reset is refused with reset_required; reset then works",
    openenv_skip=_OPENENV_NO_RULE.format("reset_required"),
)
def check_reset_before_step(r: Runner) -> str | None:
    with r.session() as client:
        action = generate(r.info.action_schema, random.Random(r.seed))
        what = "step before the first reset"
        r.doing = what
        expect_refused(client, action, ErrorCode.RESET_REQUIRED, what, "a reset_required error")
        r.reset(client, seed=r.seed)
        try:
            r.step_sampled(client, random.Random(r.seed), "the first step after reset")
        except CheckSkipped:
            return "no action the env accepts could be drawn for the step after reset"
    return None


@check(
    "observation_flags",
    "every observation has reward (a number; null after reset), done and truncated (booleans)",
    openenv_skip=(
        "OpenEnv observations have no `truncated`, and ecotone's adapter fills in reward and "
        "done itself"
    ),
)
def check_observation_flags(r: Runner) -> str:
    count = 0
    for seed in r.settings.seeds:
        for sample in r.samples(seed):
            _flags_typed(sample, seed)
            count += 1
    return f"{count} observations"


def _flags_typed(sample: Sample, seed: int) -> None:
    obs = sample.observation
    where = f"observation {sample.label} (seed {seed})"
    expect(isinstance(obs, dict), where, "a JSON object", show(obs))
    for flag in ("reward", "done", "truncated"):
        expect(flag in obs, where, f"a `{flag}` field", f"no `{flag}` in {show(obs)}")
    for flag in ("done", "truncated"):
        expect(isinstance(obs[flag], bool), f"`{flag}` {where}", "true or false", show(obs[flag]))
    reward = obs["reward"]
    if sample.label == "after reset":
        expect(
            reward is None or _number(reward), f"`reward` {where}", "a number or null", show(reward)
        )
    else:
        expect(_number(reward), f"`reward` {where}", "a number", show(reward))


def _schema_check(r: Runner, kind: str) -> str:
    schema = getattr(r.info, f"{kind}_schema")
    count = 0
    for seed in r.settings.seeds:
        for sample in r.samples(seed):
            value = getattr(sample, kind)
            errors = validate(value, schema)
            count += 1
            if errors:
                fail(
                    f"{kind} {sample.label} (seed {seed})",
                    f"a value matching describe().{kind}_schema",
                    "; ".join(str(e) for e in errors[:3]),
                )
    return f"{count} {kind}s"


@check("observation_schema", "observations match the observation schema from describe()")
def check_observation_schema(r: Runner) -> str:
    return _schema_check(r, "observation")


@check("state_schema", "states match the state schema from describe()")
def check_state_schema(r: Runner) -> str:
    return _schema_check(r, "state")


def _step_count_is(r: Runner, client: EnvClient[Any, Any], count: int, when: str) -> None:
    state = r.state(client)
    expect(
        "step_count" in state,
        f"state() {when}",
        "a step_count field",
        f"no step_count in {show(state)}",
    )
    seen = state["step_count"]
    expect(
        seen == count and isinstance(seen, int) and not isinstance(seen, bool),
        f"state().step_count {when}",
        str(count),
        show(seen),
    )


@check(
    "step_count",
    "state().step_count is 0 after reset, counts each step, and a reset (mid-episode too) "
    "sets it back to 0",
)
def check_step_count(r: Runner) -> None:
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        _step_count_is(r, client, 0, "after reset")
        finished = False
        for i in range(1, r.settings.steps + 1):
            _, result = r.step_sampled(client, rng, f"step {i}")
            _step_count_is(r, client, i, f"after {i} step{'s' if i > 1 else ''}")
            if result.finished:
                finished = True
                break
        again = r.reset(client, seed=r.seed)
        when = "after a reset at the end of an episode" if finished else "after a mid-episode reset"
        _step_count_is(r, client, 0, when)
        if not again.finished:
            r.step_sampled(client, rng, "step 1 after the second reset")
            _step_count_is(r, client, 1, "after the second reset and 1 step")


def _episode_id(r: Runner, client: EnvClient[Any, Any], when: str) -> Any:
    state = r.state(client)
    expect(
        "episode_id" in state,
        f"state() {when}",
        "an episode_id field",
        f"no episode_id in {show(state)}",
    )
    return state["episode_id"]


@check(
    "episode_id",
    "reset(episode_id=X) keeps X for the episode; each reset without one makes a new id",
)
def check_episode_id(r: Runner) -> None:
    with r.session() as client:
        given = r.reset(client, seed=r.seed, episode_id=EPISODE_ID)
        seen = _episode_id(r, client, f"after reset(episode_id={EPISODE_ID!r})")
        expect(
            seen == EPISODE_ID,
            "state().episode_id after reset with one",
            repr(EPISODE_ID),
            show(seen),
        )
        if not given.finished:
            r.step_sampled(client, random.Random(r.seed), "step 1")
            seen = _episode_id(r, client, "after a step")
            expect(
                seen == EPISODE_ID, "state().episode_id after a step", repr(EPISODE_ID), show(seen)
            )
        previous: Any = EPISODE_ID
        for n in ("first", "second"):
            r.reset(client, seed=r.seed)
            seen = _episode_id(r, client, f"after the {n} reset without one")
            expect(
                isinstance(seen, str) and seen and seen != previous,
                f"state().episode_id after the {n} reset without one",
                f"a new id (a non-empty string other than {show(previous)})",
                show(seen),
            )
            previous = seen


@check(
    "seeded_determinism",
    "the same seed gives the same first observation, and the same actions then give the same "
    "observations, on the same session and on a fresh one",
)
def check_seeded_determinism(r: Runner) -> str:
    total = 0
    for seed in r.settings.seeds:
        with r.session() as client:
            first = r.reset(client, seed=seed)
            played = r.play(client, random.Random(seed), r.settings.steps)
            actions = [action for action, _ in played]
            original = [first.observation] + [result.observation for _, result in played]
            labels = [f"first observation of reset(seed={seed})"] + [
                f"observation after step {i} (action {show(a, 80)})"
                for i, a in enumerate(actions, 1)
            ]
            again = r.replay(client, seed, actions)
            same_trajectory(
                original, again, labels, f"seed {seed}, reset again on the same session"
            )
        with r.session() as fresh:
            seen = r.replay(fresh, seed, actions)
            same_trajectory(original, seen, labels, f"seed {seed}, on a fresh session")
        total += len(actions)
    return f"{len(r.settings.seeds)} seeds, {total} steps each replayed twice"


@check(
    "step_after_done",
    "once an episode is done or truncated, steps are refused with episode_done until reset",
    openenv_skip=_OPENENV_NO_RULE.format("episode_done"),
)
def check_step_after_done(r: Runner) -> str:
    budget = r.settings.max_episode_steps
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        played = r.play(client, rng, budget)
        last_action, last = played[-1]
        if not last.finished:
            raise CheckSkipped(
                f"the episode did not end within {budget} steps (max_episode_steps), with "
                f"actions {r.target.action_source}; pass reset options that end it "
                "(reset_options, --reset-options) or a larger budget"
            )
        ended = f"{'done' if last.done else 'truncated'} at step {len(played)}"
        before = r.state(client).get("step_count")
        for again in ("", "again "):
            what = f"step {again}after the episode ended ({ended})"
            r.doing = what
            expect_refused(
                client, last_action, ErrorCode.EPISODE_DONE, what, "an episode_done error"
            )
        after = r.state(client).get("step_count")
        expect(
            after == before, "state().step_count after the refused steps", show(before), show(after)
        )
        r.reset(client, seed=r.seed)
        r.step_sampled(client, rng, "the first step after reset")
    return f"episode {ended}"


@check(
    "invalid_action",
    "an action with a wrong-typed required field (or an unknown field) is refused with "
    "invalid_action naming the field; the step does not count and the episode goes on",
)
def check_invalid_action(r: Runner) -> str:
    with r.session() as client:
        rng = random.Random(r.seed)
        r.reset(client, seed=r.seed)
        valid = msgspec.to_builtins(r.action(client, rng))
        if not isinstance(valid, dict):
            raise CheckSkipped(f"actions are not JSON objects ({show(valid)})")
        try:
            case = invalid_action(r.info.action_schema, valid)
        except LookupError as exc:
            raise CheckSkipped(str(exc)) from None
        before = r.state(client).get("step_count")
        what = f"step with {case.how}"
        expected = f"an invalid_action error naming `{case.field}`"
        r.doing = what
        refused = expect_refused(client, case.action, ErrorCode.INVALID_ACTION, what, expected)
        field = str(refused.details.get("field", ""))
        expect(field == case.field, what, expected, f"details.field {field!r}")
        after = r.state(client).get("step_count")
        expect(
            after == before,
            "state().step_count after the refused action",
            show(before),
            show(after),
        )
        r.step_sampled(client, rng, "a valid step after the refused one")
    return case.how


@check(
    "close_idempotent",
    "closing a session twice: the second close is unknown_session on the wire and a no-op "
    "through EnvClient.close(); the env's close() may be called again",
    openenv_skip=_OPENENV_CLOSE,
)
def check_close_idempotent(r: Runner) -> str | None:
    client = r.open()
    sid = client.session_id
    closed = False
    try:
        r.reset(client, seed=r.seed)
        r.step_sampled(client, random.Random(r.seed), "step 1")
        instance = r.target.instance(client)
        mark = r.target.error_mark()
        first = r.request(Close(id=r.next_id(), session=sid))
        closed = True
        expect(not isinstance(first, Error), "the first close", "a closed frame", answer(first))
        second = r.request(Close(id=r.next_id(), session=sid))
        expect(
            isinstance(second, Error) and second.code == ErrorCode.UNKNOWN_SESSION,
            "the second close of the same session",
            "an unknown_session error",
            answer(second),
        )
    finally:
        if not closed:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()
    logged = r.target.errors_since(mark)
    expect(not logged, "env.close() called by the kernel", "no exception", "; ".join(logged))
    if instance is not None:
        r.doing = "calling close() a second time on the env instance"
        try:
            r.target.close_instance(instance)
        except Exception as exc:
            fail(
                "env.close() called a second time on the same instance",
                "no exception (close must be idempotent)",
                error_text(exc),
            )
    other = r.open()
    r.reset(other, seed=r.seed)
    r.doing = "EnvClient.close()"
    other.close()
    r.doing = "EnvClient.close() a second time"
    other.close()
    return None if instance is not None else "wire level only: the env instance is remote"


@check(
    "close_releases_session",
    "after close, reset, step and state on the session are unknown_session",
    openenv_skip=_OPENENV_CLOSE,
)
def check_close_releases_session(r: Runner) -> None:
    client = r.open()
    sid = client.session_id
    try:
        r.reset(client, seed=r.seed)
        action, _ = r.step_sampled(client, random.Random(r.seed), "step 1")
    except BaseException:
        with contextlib.suppress(EcotoneError, TimeoutError):
            client.close()
        raise
    r.doing = "EnvClient.close()"
    client.close()
    core = r.target.connection.core
    for label, frame in (
        ("reset", Reset(id=r.next_id(), session=sid, seed=r.seed)),
        ("step", Step(id=r.next_id(), session=sid, action=core.raw(action))),
        ("state", GetState(id=r.next_id(), session=sid)),
    ):
        response = r.request(frame)
        expect(
            isinstance(response, Error) and response.code == ErrorCode.UNKNOWN_SESSION,
            f"{label} on the closed session",
            "an unknown_session error",
            answer(response),
        )


@check(
    "concurrent_sessions",
    "two sessions stepped in turn (different seeds and actions) each see what they would alone",
    needs=("seeded_determinism",),
)
def check_concurrent_sessions(r: Runner) -> str:
    seeds = r.settings.seeds
    second = seeds[1] if len(seeds) > 1 else seeds[0] + 1
    runs: list[Played] = []
    try:
        for name, seed, salt in (("A", seeds[0], 1000), ("B", second, 2000)):
            runs.append(Played(name, r.open(), seed, random.Random(salt + seed)))
        for run in runs:
            run.observations.append(r.reset(run.client, seed=run.seed).observation)
        for i in range(1, r.settings.steps + 1):
            for run in runs:
                if not run.finished:
                    action, result = r.step_sampled(
                        run.client, run.rng, f"session {run.name} step {i}"
                    )
                    run.actions.append(action)
                    run.observations.append(result.observation)
                    run.finished = result.finished
        for run in runs:
            run.state = _without_episode_id(r.state(run.client))
    finally:
        for run in runs:
            with contextlib.suppress(EcotoneError, TimeoutError):
                run.client.close()
    for run, other in zip(runs, reversed(runs), strict=True):
        context = (
            f"session {run.name} (seed {run.seed}) stepped in turn with session {other.name}, "
            "against the same actions alone"
        )
        labels = [f"first observation of reset(seed={run.seed})"] + [
            f"observation after step {i} (action {show(a, 80)})"
            for i, a in enumerate(run.actions, 1)
        ]
        with r.session() as alone:
            observations = r.replay(alone, run.seed, run.actions)
            state = _without_episode_id(r.state(alone))
        same_trajectory(observations, run.observations, labels, context)
        want, got = _difference(state, run.state)
        expect(state == run.state, f"{context}: state() at the end", show(want), show(got))
    steps = sum(len(run.actions) for run in runs)
    return f"{steps} interleaved steps"


@check(
    "tasks",
    "an env that publishes tasks lists each split as describe() counts it, every listed task "
    "matches the task schema, get_task finds it by index and by id, and reset(split=, index=) "
    "and a seeded reset name the task they start",
    openenv_skip="OpenEnv's clients have no task frames (its Task API is plain HTTP)",
)
def check_tasks(r: Runner) -> str:
    counts = r.info.tasks
    schema = r.info.task_schema
    with r.session() as client:
        r.doing = "list_tasks()"
        first = client.list_tasks(limit=0)
        expect(first.splits == counts, "list_tasks().splits", show(counts), show(first.splits))
        if not counts:
            return "the env publishes no tasks, and list_tasks says so"
        for split, count in counts.items():
            r.doing = f"list_tasks({split!r}, limit=20)"
            page = client.list_tasks(split, limit=20)
            expect(page.total == count, f"list_tasks({split!r}).total", str(count), str(page.total))
            expect(
                len(page.tasks) == min(20, count),
                f"list_tasks({split!r}, limit=20)",
                f"{min(20, count)} tasks",
                f"{len(page.tasks)}",
            )
            for index, task in enumerate(page.tasks):
                errors = validate(task, schema)
                if errors:
                    fail(
                        f"task {split}[{index}]",
                        "a record matching describe().task_schema",
                        "; ".join(str(e) for e in errors[:3]),
                    )
            if not count:
                continue
            r.doing = f"get_task(split={split!r}, index=0)"
            got = client.get_task(split=split, index=0)
            expect(
                got.task == page.tasks[0],
                f"get_task({split!r}, 0)",
                show(page.tasks[0]),
                show(got.task),
            )
            r.doing = f"get_task({got.id!r})"
            by_id = client.get_task(got.id)
            expect(
                by_id.ref == got.ref, f"get_task({got.id!r}).ref", show(got.ref), show(by_id.ref)
            )
            r.doing = f"reset(split={split!r}, index=0)"
            started = client.reset(split=split, index=0, **r.settings.reset_options)
            expect(
                started.task == got.ref,
                f"reset(split={split!r}, index=0).task",
                show(got.ref),
                show(started.task),
            )
        r.doing = f"reset(seed={r.seed}) twice"
        once = client.reset(seed=r.seed, **r.settings.reset_options).task
        again = client.reset(seed=r.seed, **r.settings.reset_options).task
        expect(once is not None, f"reset(seed={r.seed}).task", "the task drawn", "none")
        expect(once == again, f"reset(seed={r.seed}).task, twice", show(once), show(again))
    splits = ", ".join(f"{s} ({n})" for s, n in counts.items())
    return f"splits {splits}"


_COLUMNS_ROUNDS: Final = 4
"""How many step_columns the `step_columns` check compares with step_many (then one that
resets a position)."""


def _features(r: Runner) -> list[str]:
    """What the server lists in its `welcome`."""
    welcome = r.request(Hello(id=r.next_id()))
    if not isinstance(welcome, Welcome):
        fail("the answer to hello", "a welcome frame", answer(welcome))
    return list(welcome.features)


def _as_items(response: StepColumnsResult) -> list[ObservationFrame | Error]:
    """A step_columns_result as the step_many_result items it stands for (no session ids)."""
    return [
        response.errors.get(j)
        or ObservationFrame(session="", observation=obs, task=response.tasks.get(j))
        for j, obs in enumerate(response.observations)
    ]


def _outcome(r: Runner, item: ObservationFrame | Error, names: dict[str, str]) -> Any:
    """One item's outcome, comparable across sessions: its observation and task, or its
    error's code, session and details, the session ids named as `names` says (not its message:
    a server may word the same error for a step_columns and a step_many differently)."""
    if isinstance(item, Error):
        named = names.get(item.session or "", item.session)
        details = {
            key: names.get(value, value) if isinstance(value, str) else value
            for key, value in item.details.items()
        }
        return {"error": str(item.code), "session": named, **details}
    codec = r.target.connection.core.codec
    observation = codec.decode_as(item.observation, Any)
    task = None if item.task is None else msgspec.to_builtins(item.task)
    return {"observation": observation, "task": task}


def _same_as_step_many(
    r: Runner,
    what: str,
    columns: Response,
    many: Response,
    names: tuple[dict[str, str], dict[str, str]],
) -> None:
    if not isinstance(columns, StepColumnsResult):
        fail(f"the answer to {what}", "a step_columns_result", answer(columns))
    if not isinstance(many, StepManyResult):
        fail("the answer to the step_many of its items", "a step_many_result", answer(many))
    expect(
        len(columns.observations) == len(many.results),
        f"the observations of {what}",
        f"{len(many.results)}, one per session",
        str(len(columns.observations)),
    )
    stray = sorted({*columns.errors, *columns.tasks} - set(range(len(columns.observations))))
    expect(not stray, f"the positions {what} names", "0 to the last session's", show(stray))
    for j, item in enumerate(_as_items(columns)):
        if isinstance(item, Error):
            expect(
                r.target.connection.core.codec.decode_as(columns.observations[j], Any) is None,
                f"observations[{j}] of {what} (an error at {j})",
                "null",
                "an observation",
            )
        want = _outcome(r, many.results[j], names[1])
        got = _outcome(r, item, names[0])
        if want != got:
            want, got = _difference(want, got)
            fail(
                f"position {j} of {what}, against the step_many of its items", show(want), show(got)
            )


@check(
    "step_columns",
    "where the server lists step_columns: a step_columns of two sessions answers what the "
    "step_many of the same items answers (steps and a reset, by position), and a malformed "
    "one is one clear error that steps nothing",
    needs=("seeded_determinism", "concurrent_sessions"),
    openenv_skip="OpenEnv's protocol has no step_columns",
)
def check_step_columns(r: Runner) -> str:
    r.doing = "asking for the server's features (hello)"
    features = _features(r)
    if "step_columns" not in features:
        raise CheckSkipped("the server does not list step_columns in its welcome's features")
    seeds = r.settings.seeds
    pair_seeds = (seeds[0], seeds[1] if len(seeds) > 1 else seeds[0] + 1)
    options = dict(r.settings.reset_options)
    connection = r.target.connection
    clients: list[EnvClient[Any, Any]] = []
    try:
        for _ in range(4):
            try:
                clients.append(r.open())
            except CapacityError as exc:  # a server may hold fewer: this check needs four
                raise CheckSkipped(
                    f"the check holds four sessions at once and the server allows fewer: {exc}"
                ) from exc
        # Two pairs alike: (A, B) stepped by columns, (A', B') by step_many, the same actions.
        by_columns, by_items = clients[:2], clients[2:]
        for pair in (by_columns, by_items):
            for client, seed in zip(pair, pair_seeds, strict=True):
                r.reset(client, seed=seed)
        columns_ids = [c.session_id for c in by_columns]
        items_ids = [c.session_id for c in by_items]
        names = (
            {sid: f"<session {'AB'[j]}>" for j, sid in enumerate(columns_ids)},
            {sid: f"<session {'AB'[j]}>" for j, sid in enumerate(items_ids)},
        )
        rngs = [random.Random(3000 + seed) for seed in pair_seeds]
        for i in range(1, _COLUMNS_ROUNDS + 2):
            resets = [1] if i == _COLUMNS_ROUNDS + 1 else []
            actions = [
                None if j in resets else r.action(client, rng)
                for j, (client, rng) in enumerate(zip(by_columns, rngs, strict=True))
            ]
            reset = ResetArgs(seed=pair_seeds[1], options=options) if resets else None
            what = f"step_columns {i} (actions {show(actions, 80)}" + (
                ", resetting position 1)" if resets else ")"
            )
            r.doing = f"sending {what}"
            columns = r.request(
                StepColumns(
                    id=r.next_id(),
                    sessions=columns_ids,
                    actions=connection.core.raw(actions),
                    resets=resets,
                    reset=reset,
                )
            )
            many: Response
            if resets and "step_many.reset" not in features:  # the reset as a reset frame
                step = r.request(
                    StepMany(
                        id=r.next_id(),
                        steps=[
                            StepItem(session=items_ids[0], action=connection.core.raw(actions[0]))
                        ],
                    )
                )
                alone = r.request(
                    Reset(id=r.next_id(), session=items_ids[1], seed=pair_seeds[1], options=options)
                )
                if not isinstance(step, StepManyResult):
                    fail("the answer to a step_many", "a step_many_result", answer(step))
                if not isinstance(alone, ObservationFrame | Error):
                    fail("the answer to a reset", "an observation", answer(alone))
                many = StepManyResult(id=step.id, results=[*step.results, alone])
            else:
                r.doing = "sending the step_many of the same items"
                items = [
                    StepItem(session=sid, reset=reset)
                    if j in resets
                    else StepItem(session=sid, action=connection.core.raw(actions[j]))
                    for j, sid in enumerate(items_ids)
                ]
                many = r.request(StepMany(id=r.next_id(), steps=items))
            _same_as_step_many(r, what, columns, many, names)
        # Malformed ones: each one error, the server goes on, nothing is stepped.
        before = [_without_episode_id(r.state(client)) for client in clients]
        # Valid actions where a position steps: a server that stepped what it could before
        # refusing the frame would change a state.
        valid = [r.action(client, rng) for client, rng in zip(by_columns, rngs, strict=True)]
        pair = connection.core.raw(valid)
        malformed: list[tuple[str, dict[str, Any]]] = [
            ("one action for two sessions", {"actions": connection.core.raw(valid[:1])}),
            ("actions that are not an array", {"actions": connection.core.raw({"a": 1})}),
            ("a reset position beyond the sessions", {"actions": pair, "resets": [2]}),
            ("a negative reset position", {"actions": pair, "resets": [-1]}),
            ("a reset position twice", {"actions": pair, "resets": [0, 0]}),
        ]
        for label, fields in malformed:
            frame = StepColumns(id=r.next_id(), sessions=columns_ids, **fields)
            r.doing = f"sending a step_columns with {label}"
            response = r.request(frame)
            expect(
                isinstance(response, Error)
                and response.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.INVALID_FRAME)
                and response.id == frame.id
                and bool(response.message),
                f"the answer to a step_columns with {label}",
                "one error frame (invalid_argument) with the request's id and a message",
                answer(response),
            )
        r.doing = "pinging after the malformed step_columns"
        pong = r.request(Ping(id=r.next_id()))
        expect(isinstance(pong, Pong), "a ping after them", "pong", answer(pong))
        after = [_without_episode_id(r.state(client)) for client in clients]
        for j, (want, got) in enumerate(zip(before, after, strict=True)):
            if want != got:
                want, got = _difference(want, got)
                fail(
                    f"state() of session {'ABAB'[j]} after the malformed step_columns",
                    f"unchanged {show(want)}",
                    show(got),
                )
    finally:
        for client in clients:
            with contextlib.suppress(EcotoneError, TimeoutError):
                client.close()
    return f"{_COLUMNS_ROUNDS + 1} step_columns of 2 sessions, {len(malformed)} malformed"
