"""The environment contract: what an ecotone environment is and promises.

An environment is a class with typed Action, Observation and State, and four methods:
`reset`, `step`, `state`, `close`. Subclass `Environment` and write them as plain functions,
or `AsyncEnvironment` and write them all as coroutines (`async def`); the base classes type
them, so a type checker checks an env's signatures. One rule, checked when the env is
registered: an env's methods are all plain or all coroutines (its optional `render`,
`list_tools` and `call_tool` included).

The rules every environment keeps (the conformance suite checks them):

* `reset(seed=None, episode_id=None, **options)` starts a new episode and returns its first
  Observation. It may be called at any time: mid-episode it abandons the current episode. A
  session must be reset before its first `step`; the kernel answers a step before reset with a
  `reset_required` error and never calls the env.
* The same `seed` with the same options and then the same actions gives the same observations.
* `step(action)` applies one action and returns the next Observation. Its `reward` is the
  reward for that transition; `done` means the episode reached a terminal state, `truncated`
  that it was cut short (a time limit), as in Gymnasium. After an observation with `done` or
  `truncated`, the kernel answers further steps with `episode_done` until the next reset; the
  env is never stepped past the end of an episode.
* `state()` (a method) returns the State: at least `episode_id` and `step_count` (steps taken
  since the last reset), plus the env's own fields.
* `close()` releases everything the instance holds (processes, files, sockets, threads). It is
  called exactly once per instance by the kernel, even after errors, and may be called by user
  code more than once: it must be idempotent.
* To reject an action its type cannot rule out (an illegal chess move, a word not in the
  list), `step` raises `ecotone.InvalidAction(reason, field=..., **details)` before changing
  any state. The client gets an `invalid_action` error, as for an action that fails the
  schema, with details `field`, `path`, `reason` and the extra details (say, the legal moves);
  the step does not count and the episode goes on.
* Any other exception raised by any method is reported to the client as an `env_error` (type
  and message); the session stays open and can be reset.
* A plain env's methods run in a worker thread, so a slow env never stalls the server's other
  sessions. An env whose methods are fast and never block may set `inline = True` to run them
  on the event loop and skip the thread hop. An async env's coroutines are awaited on the
  server's event loop: they must not block it. One session's calls never overlap: the engine
  calls an instance once at a time.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import msgspec


class InvalidAction(ValueError):
    """Raised by an env's `step` to reject an action that is well formed but not allowed.

    `reason` says what is wrong, `field` names the action field at fault (dotted, as in
    `invalid_action` details), and keyword `details` travel to the client with the error (they
    must be plain data: str, numbers, lists, dicts). Raise it before changing any state: the
    kernel answers `invalid_action`, does not count the step, and the episode goes on.

        raise ecotone.InvalidAction("illegal move 'e2e5'", field="move", legal=legal_moves)
    """

    def __init__(self, reason: str, *, field: str = "", **details: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field
        self.details = details


class Action(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Base for actions. Unknown fields are rejected, so a typo in a field name is an error.

    Actions and observations are wire data, made anew for every step and acyclic (what can
    be encoded cannot hold a cycle), so Python's cyclic garbage collector does not track
    them (`gc=False`, inherited): a batch of hundreds of them per step would otherwise set
    off collections that walk the whole heap. A subclass that must be part of a reference
    cycle declares `gc=True`."""

    metadata: dict[str, Any] = {}


class Observation(msgspec.Struct, kw_only=True, gc=False):
    """Base for observations: what the agent sees after reset and after each step.

    Not tracked by the cyclic garbage collector, as `Action` (a subclass in a reference
    cycle declares `gc=True`)."""

    reward: float | None = None
    """Reward for the transition that produced this observation (None after reset)."""
    done: bool = False
    """The episode reached a terminal state."""
    truncated: bool = False
    """The episode was cut short (for instance a step limit) without reaching a terminal state."""
    metadata: dict[str, Any] = {}


class State(msgspec.Struct, kw_only=True):
    """Base for env state: bookkeeping plus the env's own fields."""

    episode_id: str | None = None
    step_count: int = 0


ActT = TypeVar("ActT")
ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")


class _EnvironmentClass:
    """What both base classes declare about an env class (see `Environment`)."""

    action_type: ClassVar[type[Any]]
    observation_type: ClassVar[type[Any]]
    state_type: ClassVar[type[Any]]
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    inline: ClassVar[bool] = False
    """Run the (plain) methods on the event loop instead of a worker thread: only for envs
    whose methods are fast and never block."""
    readme: ClassVar[str] = ""
    render_kind: ClassVar[str] = "text"
    """What a str from `render()` is: "text", "markdown" or "html"."""
    rubric: ClassVar[Any] = None
    """The rubric that scores every step (an `ecotone.rubrics.Rubric`): it replaces the
    observation's `reward` and lists its named parts in `metadata["rewards"]`."""
    tasks: ClassVar[Any] = None
    """The tasks the env publishes: an `ecotone.TaskSet`, or a function returning one (called
    once, when the env is registered). The kernel then picks each episode's task and passes
    it to `reset(..., task=record)`: see `ecotone.kernel.tasks`."""
    call_timeout: ClassVar[float | None] = None
    """Seconds one call of this env may take (None: the server's `call_timeout`). Past it the
    request is answered `timeout` and the instance is set aside (closed once the call ends);
    the session's next reset gets a fresh instance."""


class Environment(_EnvironmentClass, Generic[ActT, ObsT, StateT]):
    """Base class for environments whose methods are plain functions. Subclass it, set the
    three types, implement the methods.

    The types can be given as generic arguments (`class MyEnv(Environment[MyAction, MyObs,
    MyState])`, which also lets a type checker check the methods) or as class attributes
    (`action_type = MyAction`, ...). Each may be a msgspec Struct (recommended), a dataclass
    or an attrs class.

    `name`, `description` and `version` describe the env to clients and tools; `readme` (a
    class attribute) is longer documentation for people, plain text or markdown (without it,
    clients are shown the env module's and class's docstrings).

    Subclasses implement:

    * `reset(self, *, seed=None, episode_id=None, **options) -> Observation`; name the options
      the env accepts as keyword arguments (with defaults), and unknown options are rejected
      for you;
    * `step(self, action) -> Observation`;
    * `state(self) -> State`;
    * `close(self)` when the env holds anything to release (the default does nothing).

    Optionally, `sample_action(self, rng: random.Random) -> Action`: a valid action for the
    current state, chosen with `rng` only (so a seeded rng gives the same actions). The
    conformance suite plays with it; without it, it derives actions from the schema.

    Optionally, a custom view: `render(self) -> str | bytes`, what a person would like to see
    of the current state (a board, a picture). A str is text, markdown or HTML as the class
    attribute `render_kind` says (`"text"`, `"markdown"`, `"html"`; default text); bytes are a
    PNG image. Served as the native `render` frame and shown by the web UI beside its generic
    view of the observation.

    Optionally, tools (served as the native `list_tools` / `call_tool` frames and over MCP):
    `list_tools(self) -> list[ecotone.ToolInfo]` and `call_tool(self, name, arguments) -> Any`.

    Optionally, a classmethod `status(cls) -> str`: one line on how the env runs on this
    machine (`ecotone list` shows it: the coding env names its sandbox there).
    """

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode and return its first observation."""
        raise NotImplementedError

    def step(self, action: ActT) -> ObsT:
        """Apply one action and return the next observation."""
        raise NotImplementedError

    def state(self) -> StateT:
        """The episode's state: at least `episode_id` and `step_count`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release everything this instance holds. Idempotent."""
        return None


class AsyncEnvironment(_EnvironmentClass, Generic[ActT, ObsT, StateT]):
    """Base class for environments whose methods are coroutines: `Environment`'s contract,
    with `async def reset`, `step`, `state`, `close` (and `render`, `list_tools`,
    `call_tool` when it has them). They are awaited on the server's event loop, so they must
    never block it (`inline` does not apply)."""

    async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode and return its first observation."""
        raise NotImplementedError

    async def step(self, action: ActT) -> ObsT:
        """Apply one action and return the next observation."""
        raise NotImplementedError

    async def state(self) -> StateT:
        """The episode's state: at least `episode_id` and `step_count`."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release everything this instance holds. Idempotent."""
        return None
