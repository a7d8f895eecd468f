"""Rubrics: reward functions attached to an env without touching its `step`.

A rubric turns a step (the action and the observation the env returned, with the episode so
far) into a number. Attached to an env (the class attribute `rubric`, or a server's
`--rubric MODULE:NAME`), it replaces the observation's `reward` after every step, and the
observation's `metadata["rewards"]` carries every named part beside it, so trainers can log
them:

    rubric = WeightedSum(
        {
            "solved": (Gate(Fn(is_valid), Fn(solved)), 1.0),
            "brevity": (Fn(lambda action, obs: -len(action.code) / 1e4), 0.1),
            "judge": (Trajectory(judge_episode, gamma=0.9), 0.5),
        }
    )

* `Fn(fn)`: a step rubric, `fn(action, observation) -> float` (or `async def`); `Reward()`
  is the env's own reward.
* `WeightedSum`: the weighted sum of its parts. `Gate(condition, rubric, threshold=1.0)`: the
  rubric's score when the condition scores at least the threshold, else 0 (the rubric is not
  evaluated: a hard constraint that zeroes the rest). `Sequential(a, b, ...)`: evaluated in
  order, 0 as soon as one scores 0, else the last one's score.
* `Trajectory(fn, gamma=1.0)`: a delayed reward, `fn(turns) -> float` over the episode's
  `Turn`s, scored once when the episode ends (0 before). The last observation's
  `metadata["discounted"][name]` gives it back to every step, discounted: step t of T gets
  `score * gamma ** (T - 1 - t)`.

Async rubrics (an LLM judge: any `async def` the user supplies) are awaited on the server's
event loop: for a thread env, from the step's own worker thread (the call, its deadline and
its abandonment stay the runner's); an inline env with one has its calls awaited instead. A
sync rubric runs where the step runs (on an async env, the loop: it must not block). A
rubric that raises, or returns something other than a number, fails the step as an
`env_error` whose message names the rubric; the server and the session go on, and if the
env's step had ended the episode, it is ended.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
import attrs

from ecotone.kernel.contract import replaced
from ecotone.kernel.loading import load_named


class RubricError(RuntimeError):
    """A rubric raised, or returned something other than a finite number. `observation` is
    the env's own observation of the step it was scoring (the step happened: the engine ends
    the episode if that observation did)."""

    observation: Any = None


@attrs.frozen(slots=True)
class Turn:
    """One step of an episode, as rubrics see it: the action and the observation it got (the
    env's own, before any rubric)."""

    action: Any
    observation: Any


@attrs.define(slots=True)
class Scoring:
    """What one step's scoring produced: each named part's score, and per-step credit of
    trajectory rubrics (at the episode's end)."""

    parts: dict[str, float] = attrs.field(factory=dict)
    discounted: dict[str, list[float]] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class Context:
    turn: Turn
    history: Sequence[Turn]
    """The episode's turns so far, this one included."""
    ended: bool
    scoring: Scoring


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RubricError(f"rubric {name!r} returned {value!r}, not a finite number")
    return float(value)


class Rubric:
    """Base of every rubric: a name, and `score(context)` (a coroutine when `is_async`)."""

    name: str = "rubric"

    @property
    def parts(self) -> Sequence[Rubric]:
        return ()

    @property
    def is_async(self) -> bool:
        return any(p.is_async for p in self.parts)

    def walk(self) -> Iterator[Rubric]:
        yield self
        for part in self.parts:
            yield from part.walk()

    def score(self, ctx: Context) -> float:
        """The score of one step (sync rubrics)."""
        raise NotImplementedError

    async def ascore(self, ctx: Context) -> float:
        """The score of one step, awaiting async parts."""
        return self.score(ctx)

    def _record(self, ctx: Context, value: float) -> float:
        ctx.scoring.parts[self.name] = value
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Fn(Rubric):
    """A step rubric from a function `fn(action, observation) -> float` (sync or async)."""

    def __init__(self, fn: Callable[[Any, Any], float | Awaitable[float]], name: str = "") -> None:
        if not callable(fn):
            raise TypeError(f"Fn needs a callable, not {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "") or "fn"
        if self.name == "<lambda>":
            self.name = "fn"
        self._async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )

    @property
    def is_async(self) -> bool:
        return self._async

    def score(self, ctx: Context) -> float:
        value = _call(self.name, self.fn, ctx.turn.action, ctx.turn.observation)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()
            raise RubricError(f"rubric {self.name!r} returned an awaitable: make it `async def`")
        return self._record(ctx, _number(value, self.name))

    async def ascore(self, ctx: Context) -> float:
        value = _call(self.name, self.fn, ctx.turn.action, ctx.turn.observation)
        if inspect.isawaitable(value):
            value = await _awaited(self.name, value)
        return self._record(ctx, _number(value, self.name))


def _call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except RubricError:
        raise
    except Exception as exc:
        raise RubricError(f"rubric {name!r} raised {type(exc).__qualname__}: {exc}") from exc


async def _awaited(name: str, value: Awaitable[Any]) -> Any:
    try:
        return await value
    except RubricError:
        raise
    except Exception as exc:
        raise RubricError(f"rubric {name!r} raised {type(exc).__qualname__}: {exc}") from exc


class Reward(Rubric):
    """The env's own reward for the step (0 when it gives none)."""

    def __init__(self, name: str = "env") -> None:
        self.name = name

    def score(self, ctx: Context) -> float:
        reward = getattr(ctx.turn.observation, "reward", None)
        return self._record(ctx, 0.0 if reward is None else float(reward))


def _parts(parts: Mapping[str, tuple[Rubric, float]] | Sequence[tuple[Rubric, float]]) -> Any:
    if isinstance(parts, Mapping):
        named = []
        for name, (rubric, weight) in parts.items():
            rubric.name = name
            named.append((rubric, float(weight)))
        return named
    return [(rubric, float(weight)) for rubric, weight in parts]


class WeightedSum(Rubric):
    """The weighted sum of its parts: `{name: (rubric, weight)}` (the names are given to the
    rubrics) or `[(rubric, weight), ...]`."""

    def __init__(
        self,
        parts: Mapping[str, tuple[Rubric, float]] | Sequence[tuple[Rubric, float]],
        name: str = "total",
    ) -> None:
        self.weighted: list[tuple[Rubric, float]] = _parts(parts)
        self.name = name

    @property
    def parts(self) -> Sequence[Rubric]:
        return [r for r, _ in self.weighted]

    def score(self, ctx: Context) -> float:
        return self._record(ctx, sum(w * r.score(ctx) for r, w in self.weighted))

    async def ascore(self, ctx: Context) -> float:
        total = 0.0
        for rubric, weight in self.weighted:
            total += weight * await rubric.ascore(ctx)
        return self._record(ctx, total)


class Gate(Rubric):
    """`rubric`'s score when `condition` scores at least `threshold`, else 0 (and `rubric` is
    not evaluated)."""

    def __init__(
        self, condition: Rubric, rubric: Rubric, *, threshold: float = 1.0, name: str = ""
    ) -> None:
        self.condition = condition
        self.rubric = rubric
        self.threshold = float(threshold)
        self.name = name or f"gate({condition.name})"

    @property
    def parts(self) -> Sequence[Rubric]:
        return [self.condition, self.rubric]

    def score(self, ctx: Context) -> float:
        if self.condition.score(ctx) < self.threshold:
            return self._record(ctx, 0.0)
        return self._record(ctx, self.rubric.score(ctx))

    async def ascore(self, ctx: Context) -> float:
        if await self.condition.ascore(ctx) < self.threshold:
            return self._record(ctx, 0.0)
        return self._record(ctx, await self.rubric.ascore(ctx))


class Sequential(Rubric):
    """Its rubrics in order: 0 as soon as one scores 0 (the rest are not evaluated), else
    the last one's score."""

    def __init__(self, *rubrics: Rubric, name: str = "sequential") -> None:
        if not rubrics:
            raise ValueError("Sequential needs at least one rubric")
        self.rubrics = list(rubrics)
        self.name = name

    @property
    def parts(self) -> Sequence[Rubric]:
        return self.rubrics

    def score(self, ctx: Context) -> float:
        value = 0.0
        for rubric in self.rubrics:
            value = rubric.score(ctx)
            if value == 0:
                break
        return self._record(ctx, value)

    async def ascore(self, ctx: Context) -> float:
        value = 0.0
        for rubric in self.rubrics:
            value = await rubric.ascore(ctx)
            if value == 0:
                break
        return self._record(ctx, value)


class Trajectory(Rubric):
    """A delayed reward: `fn(turns) -> float` over the whole episode, scored once when it
    ends (0 on every step before); its per-step credit, discounted by `gamma`, is in the last
    observation's `metadata["discounted"][name]`."""

    def __init__(
        self,
        fn: Callable[[Sequence[Turn]], float | Awaitable[float]],
        *,
        gamma: float = 1.0,
        name: str = "",
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be between 0 and 1, got {gamma}")
        self.fn = fn
        self.gamma = float(gamma)
        self.name = name or getattr(fn, "__name__", "") or "trajectory"
        self._async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )

    @property
    def is_async(self) -> bool:
        return self._async

    def _credit(self, ctx: Context, value: float) -> float:
        steps = len(ctx.history)
        ctx.scoring.discounted[self.name] = [
            value * self.gamma ** (steps - 1 - t) for t in range(steps)
        ]
        return self._record(ctx, value)

    def score(self, ctx: Context) -> float:
        if not ctx.ended:
            return self._record(ctx, 0.0)
        value = _call(self.name, self.fn, list(ctx.history))
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()
            raise RubricError(f"rubric {self.name!r} returned an awaitable: make it `async def`")
        return self._credit(ctx, _number(value, self.name))

    async def ascore(self, ctx: Context) -> float:
        if not ctx.ended:
            return self._record(ctx, 0.0)
        value = _call(self.name, self.fn, list(ctx.history))
        if inspect.isawaitable(value):
            value = await _awaited(self.name, value)
        return self._credit(ctx, _number(value, self.name))


def check_rubric(rubric: Any, where: str) -> Rubric:
    """`rubric` if it is a Rubric whose parts' names are unique, else TypeError/ValueError."""
    if not isinstance(rubric, Rubric):
        raise TypeError(f"{where}: a rubric is an ecotone.rubrics.Rubric, not {rubric!r}")
    seen: set[str] = set()
    for part in rubric.walk():
        if part.name in seen:
            raise ValueError(
                f"{where}: two parts of the rubric are named {part.name!r}: name them apart "
                "(the names key the observation's metadata['rewards'])"
            )
        seen.add(part.name)
    return rubric


# --- the wrapper that applies a rubric to an env instance -------------------------------------


def _with_reward(obs: Any, reward: float, scoring: Scoring) -> Any:
    """The observation with the rubric's reward and parts (in `metadata`)."""
    metadata = dict(getattr(obs, "metadata", None) or {})
    metadata["rewards"] = dict(scoring.parts)
    if scoring.discounted:
        metadata["discounted"] = dict(scoring.discounted)
    return replaced(obs, reward=reward, metadata=metadata)


class _Scored:
    """What the plain and async wrappers share: the inner env, the rubric, the episode (kept
    only when a `Trajectory` part needs it)."""

    def __init__(self, inner: Any, rubric: Rubric) -> None:
        self._inner = inner
        self._rubric = rubric
        self._history: list[Turn] = []
        self._keep = any(isinstance(part, Trajectory) for part in rubric.walk())

    def _context(self, action: Any, obs: Any) -> Context:
        turn = Turn(action, obs)
        if self._keep:
            self._history.append(turn)
        ended = bool(getattr(obs, "done", False) or getattr(obs, "truncated", False))
        return Context(turn, self._history if self._keep else (turn,), ended, Scoring())

    @staticmethod
    def _failed(exc: RubricError, obs: Any) -> RubricError:
        exc.observation = obs
        return exc

    def __getattr__(self, name: str) -> Any:  # render, list_tools, call_tool, sample_action...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def _awaited_in_thread(rubric: Rubric, ctx: Context) -> float:
    """An async rubric's score from a worker thread: awaited on the event loop that runs the
    thread (the server's, or an async inproc channel's), or, in a thread no loop started (the
    blocking inproc channel runs calls in the caller's own), on a loop of its own."""

    async def guarded() -> tuple[float, BaseException | None]:
        try:
            return await rubric.ascore(ctx), None
        except BaseException as exc:  # returned, so that only a wrong context raises below
            return 0.0, exc

    outcome: tuple[float, BaseException | None] | None = None
    try:
        outcome = anyio.from_thread.run(guarded)
    except RuntimeError:
        try:
            import trio

            outcome = trio.from_thread.run(guarded)
        except (ImportError, RuntimeError):
            outcome = None
    if outcome is None:
        outcome = anyio.run(guarded)
    value, error = outcome
    if error is not None:
        raise error
    return value


class ScoredEnv(_Scored):
    """A plain env: the same calls, each step scored right after, in the same call (a worker
    thread's, or inline for a sync rubric). An async rubric's parts are awaited on the event
    loop meanwhile; the call stays the runner's, with its deadline."""

    def reset(self, **kwargs: Any) -> Any:
        self._history = []
        return self._inner.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs = self._inner.step(action)
        ctx = self._context(action, obs)
        try:
            if self._rubric.is_async:
                value = _awaited_in_thread(self._rubric, ctx)
            else:
                value = self._rubric.score(ctx)
        except RubricError as exc:
            raise self._failed(exc, obs) from exc.__cause__
        return _with_reward(obs, value, ctx.scoring)

    def state(self) -> Any:
        return self._inner.state()

    def close(self) -> None:
        self._inner.close()


class AsyncScoredEnv(_Scored):
    """An async env (any rubric), or an inline env with an async rubric: coroutines that
    call the inner env (awaited, or inline) and then await the rubric, on the event loop. A
    sync rubric on an async env runs on the loop too: like the env's own methods, it must
    not block."""

    def __init__(self, inner: Any, rubric: Rubric, *, mode: str) -> None:
        super().__init__(inner, rubric)
        self._mode = mode  # "await" or "inline": how the inner methods run

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._mode == "await":
            return await fn(*args, **kwargs)
        return fn(*args, **kwargs)

    async def reset(self, **kwargs: Any) -> Any:
        self._history = []
        return await self._run(self._inner.reset, **kwargs)

    async def step(self, action: Any) -> Any:
        obs = await self._run(self._inner.step, action)
        ctx = self._context(action, obs)
        try:
            value = await self._rubric.ascore(ctx)
        except RubricError as exc:
            raise self._failed(exc, obs) from exc.__cause__
        return _with_reward(obs, value, ctx.scoring)

    async def state(self) -> Any:
        return await self._run(self._inner.state)

    async def close(self) -> None:
        await self._run(self._inner.close)

    async def render(self) -> Any:
        return await self._run(self._inner.render)

    async def list_tools(self) -> Any:
        return await self._run(self._inner.list_tools)

    async def call_tool(self, name: str, arguments: Any) -> Any:
        return await self._run(self._inner.call_tool, name, arguments)


def unwrap_scored(env: Any) -> tuple[Any, list[Turn] | None]:
    """The env under a rubric's wrapper (or `env` itself), and the turns the wrapper keeps of
    the episode (None: it keeps none, or there is no wrapper): what a snapshot saves."""
    if isinstance(env, _Scored):
        return env._inner, (env._history if env._keep else None)
    return env, None


def restore_turns(env: Any, turns: list[Turn]) -> None:
    """Give a rubric's wrapper the turns of a saved episode (no wrapper: nothing to do)."""
    if isinstance(env, _Scored) and env._keep:
        env._history = list(turns)


def scored_mode(rubric: Rubric, mode: str) -> str:
    """How a wrapped env's methods run: as the env's do, except that an inline env with an
    async rubric becomes awaited (the loop cannot block on the rubric)."""
    return "await" if mode == "inline" and rubric.is_async else mode


def scored_factory(factory: Callable[[], Any], rubric: Rubric, mode: str) -> Callable[[], Any]:
    """A factory of `factory`'s instances wrapped to apply `rubric`; `mode` is how the env's
    methods run ("inline", "thread" or "await"). No wrapper makes threads: a thread env's
    step and its rubric run in the worker the runner gives the call."""
    if mode == "await" or scored_mode(rubric, mode) == "await":
        return lambda: AsyncScoredEnv(factory(), rubric, mode=mode)
    return lambda: ScoredEnv(factory(), rubric)


def load_rubric(spec: str) -> Rubric:
    """The rubric `MODULE:NAME` names (a Rubric, or a function of no arguments making one);
    MODULE is imported from the installed packages or the working directory."""
    value = load_named(spec, "rubric")
    if not isinstance(value, Rubric) and callable(value):
        value = value()
    return check_rubric(value, f"rubric {spec!r}")


__all__ = [
    "Context",
    "Fn",
    "Gate",
    "Reward",
    "Rubric",
    "RubricError",
    "Scoring",
    "Sequential",
    "Trajectory",
    "Turn",
    "WeightedSum",
    "check_rubric",
    "load_rubric",
    "scored_factory",
]
