"""The environment contract: what an ecotone environment is and promises.

An environment is a class with typed Action, Observation and State, and four methods:
`reset`, `step`, `state`, `close`. Subclass `Environment` and write them as plain functions,
or `AsyncEnvironment` and write them all as coroutines (`async def`); the base classes type
them, so a type checker checks an env's signatures. One rule, checked when the env is
registered: an env's methods are all plain or all coroutines (its optional `render`,
`list_tools` and `call_tool` included).

Several agents in one episode, each in a seat with a view of its own: subclass
`MultiAgentEnvironment` (turns: `step(seat, action)`) or `SimultaneousEnvironment` (every seat
moves, then the env steps once: `step(actions)`), or their async forms
(`AsyncMultiAgentEnvironment`, `AsyncSimultaneousEnvironment`: every method a coroutine);
their docstrings state their contracts, and the rules below hold for them too, with their
`step` in place of `step(action)`.

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
* An env whose code may crash the interpreter sets `isolation = "process"`: each session's
  env then runs in a process of its own, and a crash is that session's `env_error`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import msgspec


class InvalidAction(ValueError):
    """Raised by an env's `step` to reject an action that is well formed but not allowed.

    For what the action's type cannot rule out (an illegal chess move, a word not in the
    list). Raise it before changing any state: the kernel answers `invalid_action`, as for an
    action that fails the schema, does not count the step, and the episode goes on.

    Args:
        reason: What is wrong (the error's `reason` detail, and its message).
        field: The action field at fault, dotted as in `invalid_action` details (`""`: the
            action as a whole).
        **details: More details for the client (the legal moves, say); plain data only
            (str, numbers, lists, dicts), or they travel as their repr.

    Example:
        In an env's `step`::

            if move not in board.legal_moves:
                raise ecotone.InvalidAction(f"illegal move {move}", field="move", legal=legal)
    """

    def __init__(self, reason: str, *, field: str = "", **details: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field
        self.details = details


class Action(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Base for actions: subclass it and declare the action's fields.

    Unknown fields are rejected, so a typo in a field name is an error (`invalid_action`).
    Actions and observations are wire data, made anew for every step and acyclic (what can
    be encoded cannot hold a cycle), so Python's cyclic garbage collector does not track
    them (`gc=False`, inherited): a batch of hundreds of them per step would otherwise set
    off collections that walk the whole heap. A subclass that must be part of a reference
    cycle declares `gc=True`.

    Args:
        metadata: Plain data beside the action's own fields (OpenEnv's actions carry the same
            field); the kernel does not read it.
    """

    metadata: dict[str, Any] = {}


class Observation(msgspec.Struct, kw_only=True, gc=False):
    """Base for observations: what the agent sees after reset and after each step.

    Subclass it and declare what the agent sees; the fields here are the transition's
    outcome, which every env reports the same way (as in Gymnasium). Not tracked by the
    cyclic garbage collector, as `Action` (a subclass in a reference cycle declares
    `gc=True`).

    Args:
        reward: The reward for the transition that produced this observation (None after a
            reset).
        done: The episode reached a terminal state.
        truncated: The episode was cut short (a step limit, say) without reaching a terminal
            state.
        metadata: Plain data about the transition; a vector env hands it out as the step's
            `infos`, and a rubric lists its named rewards there (`metadata["rewards"]`).
    """

    reward: float | None = None
    """Reward for the transition that produced this observation (None after reset)."""
    done: bool = False
    """The episode reached a terminal state."""
    truncated: bool = False
    """The episode was cut short (for instance a step limit) without reaching a terminal state."""
    metadata: dict[str, Any] = {}


class State(msgspec.Struct, kw_only=True):
    """Base for env state: bookkeeping plus the env's own fields.

    Subclass it and add the fields `state()` reports besides these two.

    Args:
        episode_id: The current episode's id (the one `reset` was given, or the env's own).
        step_count: Steps taken since the last reset.
    """

    episode_id: str | None = None
    step_count: int = 0


def replaced(record: Any, **fields: Any) -> Any:
    """An env's record (an observation, a state) with `fields` changed.

    Args:
        record: A msgspec Struct, a dataclass, an attrs class, or any other object.
        **fields: The fields to change, by name.

    Returns:
        A copy with the fields changed; any other object is changed in place and returned.
    """
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.replace(record, **fields)
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.replace(record, **fields)
    if attrs.has(type(record)):
        return attrs.evolve(record, **fields)
    for name, value in fields.items():
        setattr(record, name, value)
    return record


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
    """What a str from `render()` is: "text", "markdown", "html" or "svg"."""
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
    isolation: ClassVar[str | None] = None
    """`"process"`: a server runs each session's env in a process of its own, forked from a
    warm parent that imported the env's module, so a crash of its code (a segfault in a C
    extension, `os.abort()`, `os._exit()`) costs that session an `env_error`, not the
    server. Its calls then cross a pipe (actions, observations and States as MessagePack
    of their declared types). `serve --isolate` does it for any env; `inproc://` never."""


class Environment(_EnvironmentClass, Generic[ActT, ObsT, StateT]):
    """Base class for environments whose methods are plain functions.

    Subclass it, set the three types, implement the methods; the rules each method keeps are
    in its docstring and in this module's. The types can be given as generic arguments
    (`class MyEnv(Environment[MyAction, MyObs, MyState])`, which also lets a type checker
    check the methods) or as class attributes (`action_type = MyAction`, ...). Each may be a
    msgspec Struct (recommended), a dataclass or an attrs class.

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
    of the current state (a board, a picture). A str is text, markdown, HTML or an SVG
    picture as the class attribute `render_kind` says (`"text"`, `"markdown"`, `"html"`,
    `"svg"`; default text); bytes are a PNG image. Served as the native `render` frame and
    shown by the web UI beside its generic view of the observation.

    Optionally, tools (served as the native `list_tools` / `call_tool` frames and over MCP):
    `list_tools(self) -> list[ecotone.ToolInfo]` and `call_tool(self, name, arguments) -> Any`.

    Optionally, a classmethod `status(cls) -> str`: one line on how the env runs on this
    machine (`ecotone list` shows it: the coding env names its sandbox there).

    Example:
        An env that counts up to a target, driven here by hand (a server calls the same
        methods):

        >>> class Add(ecotone.Action):
        ...     n: int
        >>> class Count(ecotone.Observation):
        ...     count: int
        >>> class CountState(ecotone.State):
        ...     count: int = 0
        >>> class CountTo(ecotone.Environment[Add, Count, CountState]):
        ...     name = "count-to"
        ...     inline = True  # arithmetic only: never worth a worker thread
        ...
        ...     def reset(self, *, seed=None, episode_id=None, target: int = 3) -> Count:
        ...         self._state = CountState(episode_id=episode_id)
        ...         self._target = target
        ...         return Count(count=0)
        ...
        ...     def step(self, action: Add) -> Count:
        ...         if action.n < 1:  # refused before any state changes
        ...             raise ecotone.InvalidAction("n must be at least 1", field="n")
        ...         st = self._state
        ...         st.step_count += 1
        ...         st.count += action.n
        ...         return Count(count=st.count, reward=1.0, done=st.count >= self._target)
        ...
        ...     def state(self) -> CountState:
        ...         return self._state
        >>> env = CountTo()
        >>> env.reset(target=2)
        Count(count=0, reward=None, done=False, truncated=False, metadata={})
        >>> env.step(Add(n=2)).done
        True
        >>> env.state().step_count
        1
    """

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode and return its first observation.

        It may be called at any time: mid-episode it abandons the current episode. The env
        is never stepped before its first reset nor past an episode's end: the kernel answers
        such a step `reset_required` or `episode_done` itself. The same `seed` with the same
        options and then the same actions gives the same observations. A subclass names the
        reset options it takes as keyword arguments with defaults (or as `**options:
        Unpack[SomeTypedDict]`); the kernel refuses any other with `invalid_argument` before
        calling it.

        Args:
            seed: Seeds the episode's randomness; None: the env's own choice.
            episode_id: The id the caller gives the episode (the State's `episode_id`);
                None: the env may choose one.

        Returns:
            The episode's first observation (its `reward` None, `done` and `truncated`
            False).
        """
        raise NotImplementedError

    def step(self, action: ActT) -> ObsT:
        """Apply one action and return the next observation.

        Called only between a reset and the end of the episode; one session's calls never
        overlap. Any exception but `InvalidAction` reaches the client as `env_error` (type
        and message); the session stays open and can be reset.

        Args:
            action: An instance of the env's Action type, already checked against its schema.

        Returns:
            The next observation: its `reward` the transition's, `done` if the episode reached
            a terminal state, `truncated` if it was cut short (a step limit).

        Raises:
            InvalidAction: The action is well formed but not allowed here (raised before
                changing any state: the step does not count, the episode goes on).
        """
        raise NotImplementedError

    def state(self) -> StateT:
        """Report the episode's state.

        Returns:
            The State: at least `episode_id` and `step_count` (steps since the last reset),
            plus the env's own fields.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release everything this instance holds (processes, files, sockets, threads).

        The kernel calls it exactly once per instance, even after errors; user code may call
        it again, so it must be idempotent. The default does nothing.
        """
        return None


class AsyncEnvironment(_EnvironmentClass, Generic[ActT, ObsT, StateT]):
    """Base class for environments whose methods are coroutines.

    `Environment`'s contract, with `async def reset`, `step`, `state`, `close` (and `render`,
    `list_tools`, `call_tool` when it has them). They are awaited on the server's event loop,
    so they must never block it (`inline` does not apply).
    """

    async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode and return its first observation (as `Environment.reset`).

        Args:
            seed: Seeds the episode's randomness; None: the env's own choice.
            episode_id: The id the caller gives the episode; None: the env may choose one.

        Returns:
            The episode's first observation.
        """
        raise NotImplementedError

    async def step(self, action: ActT) -> ObsT:
        """Apply one action and return the next observation (as `Environment.step`).

        Args:
            action: An instance of the env's Action type, already checked against its schema.

        Returns:
            The next observation, with the transition's `reward`, `done` and `truncated`.

        Raises:
            InvalidAction: The action is well formed but not allowed here (raised before
                changing any state).
        """
        raise NotImplementedError

    async def state(self) -> StateT:
        """Report the episode's state (as `Environment.state`).

        Returns:
            The State: at least `episode_id` and `step_count`, plus the env's own fields.
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Release everything this instance holds; idempotent (as `Environment.close`)."""
        return None


class _Seated(_EnvironmentClass):
    """What every multi-agent env declares, plain or async: its seats and their types.

    See `MultiAgentEnvironment` (turns) and `SimultaneousEnvironment` (rounds), and their
    async forms (`AsyncMultiAgentEnvironment`, `AsyncSimultaneousEnvironment`).
    """

    seats: ClassVar[tuple[str, ...]] = ()
    seat_action_types: ClassVar[dict[str, type[Any]]] = {}
    seat_observation_types: ClassVar[dict[str, type[Any]]] = {}
    seat_lost: ClassVar[str] = "wait"
    simultaneous: ClassVar[bool] = False
    """Every seat moves, then the env steps once (`SimultaneousEnvironment`)."""


class _SeatedEnvironment(_Seated, Generic[ActT, ObsT, StateT]):
    """What both kinds of multi-agent env whose methods are plain functions declare."""

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode; its public view (as `Environment.reset`).

        Args:
            seed: Seeds the episode's randomness; None: the env's own choice.
            episode_id: The id the caller gives the episode; None: the env may choose one.

        Returns:
            The public view of the episode's start.
        """
        raise NotImplementedError

    def observe(self, seat: str | None) -> ObsT:
        """What `seat` may see now, or (None) what anyone may.

        Args:
            seat: One of `seats`, or None for the public view.

        Returns:
            The view: its `reward` the seat's since its last move, `done` and `truncated`
            its own termination and truncation (the public view's: the episode's).
        """
        raise NotImplementedError

    def state(self) -> StateT:
        """Report the episode's state (the owner's to read).

        Returns:
            The State: at least `episode_id` and `step_count`, plus the env's own fields.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release everything this instance holds; idempotent (as `Environment.close`)."""
        return None


class MultiAgentEnvironment(_SeatedEnvironment[ActT, ObsT, StateT]):
    """Base class for turn-based environments of several agents, each in a seat of its own.

    `seats` names them. One episode, several connections: the session's owner resets it and
    hands out seat keys (`seats`); a connection that `join`s with a key plays that seat, and
    only sees that seat's view; a spectator key reads the public view. The env says whose
    turn it is (`current_seat`, as PettingZoo's AEC `agent_selection`), and the kernel refuses
    a move out of turn (`not_your_turn`) without calling the env. Its methods are plain
    functions (`AsyncMultiAgentEnvironment`: all coroutines).

    Subclasses implement:

    * `reset(self, *, seed=None, episode_id=None, **options) -> Observation`: the public view
      of the new episode (its `done`/`truncated` end the episode for every seat);
    * `current_seat(self) -> str | None`: whose turn it is (None: nobody's, the episode is
      over);
    * `step(self, seat, action) -> None`: the move of `seat` (always the current seat: the
      kernel checks); raise `ecotone.InvalidAction` to refuse it before changing any state;
    * `observe(self, seat) -> Observation`: what `seat` may see, with its own `reward`
      (since its last move), `done` (its termination) and `truncated`; `observe(None)`: the
      public view, for spectators. A seat's view never carries what it may not see: the
      kernel sends each seat's view only to that seat's holder (and to the owner);
    * `state(self) -> State`, read by the owner only; `close(self)` as `Environment`'s.

    Optionally, `render(self, seat) -> str | bytes`: a picture of what `seat` may see (as
    `Environment.render`, `render_kind` saying what a str is); `render(None)` the public
    one. A seat's holder gets its seat's picture, the owner and spectators the public one.

    The action and observation types are the env's own for every seat, unless
    `seat_action_types` or `seat_observation_types` give a seat its own.

    Class attributes:
        seats: The seats' names, in a fixed order.
        seat_lost: What becomes of the episode when a seat's connection dropped and nobody
            took the seat back within its lease (`[limits] lease`): `"wait"` (the episode
            waits for its key to join again) or `"truncate"` (it ends; every seat's view says
            which seats were lost).

    Example:
        Two seats taking turns to add to a shared count:

        >>> class Add(ecotone.Action):
        ...     n: int
        >>> class Tally(ecotone.Observation):
        ...     count: int
        >>> class Turns(ecotone.MultiAgentEnvironment[Add, Tally, ecotone.State]):
        ...     seats = ("a", "b")
        ...     inline = True
        ...
        ...     def reset(self, *, seed=None, episode_id=None) -> Tally:
        ...         self._count, self._moves = 0, 0
        ...         return self.observe(None)
        ...
        ...     def current_seat(self) -> str | None:
        ...         return None if self._count >= 3 else self.seats[self._moves % 2]
        ...
        ...     def step(self, seat: str, action: Add) -> None:
        ...         self._count += action.n
        ...         self._moves += 1
        ...
        ...     def observe(self, seat: str | None) -> Tally:
        ...         return Tally(count=self._count, done=self._count >= 3)
        ...
        ...     def state(self) -> ecotone.State:
        ...         return ecotone.State(step_count=self._moves)
        >>> env = Turns()
        >>> env.reset().count, env.current_seat()
        (0, 'a')
        >>> env.step("a", Add(n=2)); env.current_seat()
        'b'
    """

    def current_seat(self) -> str | None:
        """Whose turn it is.

        Returns:
            The seat to move next, or None when nobody may (the episode is over).
        """
        raise NotImplementedError

    def step(self, seat: str, action: ActT) -> None:
        """Apply the move of `seat`, the current seat (the kernel checks the turn).

        Args:
            seat: The seat moving.
            action: An instance of the seat's action type, already checked against its schema.

        Raises:
            InvalidAction: The move is well formed but not allowed (raised before changing any
                state: it does not count, and it is still that seat's turn).
        """
        raise NotImplementedError


class SimultaneousEnvironment(_SeatedEnvironment[ActT, ObsT, StateT]):
    """Base class for environments of several seats that move at once, each seeing its own view.

    As PettingZoo's parallel API. A session is opened, reset, shared out (`seats`, `join`) and
    watched as a `MultiAgentEnvironment`'s. What differs is the move: each round, every live
    seat (`live_seats()`) sends its own (`play`); the kernel keeps the moves until every live
    seat has moved, or until `move_deadline` seconds have passed since the round's first move,
    then calls `step(actions)` once with the moves it has. A live seat missing from `actions`
    did not move in time: what it does is the env's rule, written in its `step` (a default move,
    no move, or it loses the round or the game). Each seat's `play` is answered after the round,
    with that seat's own view; a seat waiting for the others holds back no other request of the
    session (another seat's move, an `observe`, the owner's `state`). Its methods are plain
    functions (`AsyncSimultaneousEnvironment`: all coroutines).

    Subclasses implement:

    * `reset(self, *, seed=None, episode_id=None, **options) -> Observation`: the public view
      of the new episode (its `done`/`truncated` end the episode for every seat);
    * `live_seats(self) -> Sequence[str]`: the seats that move in this round (PettingZoo's
      `agents`); empty when nobody may (the episode is over);
    * `step(self, actions) -> None`: the round, `actions` a dict from seat to move (each an
      instance of the seat's action type); raise `ecotone.InvalidAction` to refuse the round
      before changing any state: every seat's `play` of the round is answered
      `invalid_action`, and the round starts over;
    * `observe(self, seat) -> Observation`: what `seat` may see, with its own `reward` (for
      the last round), `done` and `truncated`; `observe(None)`: the public view;
    * `state(self) -> State`, read by the owner only; `close(self)` as `Environment`'s.

    Class attributes:
        seats: The seats' names, in a fixed order.
        move_deadline: Seconds a round waits for the seats that have not moved, counted from
            its first move (None: it waits for every live seat, however long). The server
            keeps the deadline: a connection to an in-process engine (`inproc://`) has no
            timer, and waits for every seat.
        seat_lost: As `MultiAgentEnvironment.seat_lost`.

    Example:
        Matching pennies, three rounds; a seat silent past the deadline shows heads:

        >>> class Coin(ecotone.Action):
        ...     heads: bool
        >>> class Score(ecotone.Observation):
        ...     round: int
        >>> class Pennies(ecotone.SimultaneousEnvironment[Coin, Score, ecotone.State]):
        ...     seats = ("even", "odd")
        ...     move_deadline = 5.0
        ...     inline = True
        ...
        ...     def reset(self, *, seed=None, episode_id=None) -> Score:
        ...         self._round, self._won = 0, {"even": 0.0, "odd": 0.0}
        ...         return self.observe(None)
        ...
        ...     def live_seats(self) -> tuple[str, ...]:
        ...         return () if self._round >= 3 else self.seats
        ...
        ...     def step(self, actions: dict[str, Coin]) -> None:
        ...         shown = [actions.get(s, Coin(heads=True)).heads for s in self.seats]
        ...         winner = "even" if shown[0] == shown[1] else "odd"
        ...         self._won = {s: 1.0 if s == winner else -1.0 for s in self.seats}
        ...         self._round += 1
        ...
        ...     def observe(self, seat: str | None) -> Score:
        ...         reward = None if seat is None else self._won[seat]
        ...         return Score(round=self._round, reward=reward, done=self._round >= 3)
        ...
        ...     def state(self) -> ecotone.State:
        ...         return ecotone.State(step_count=self._round)
        >>> env = Pennies()
        >>> env.reset().round, env.live_seats()
        (0, ('even', 'odd'))
        >>> env.step({"even": Coin(heads=True)}); env.observe("odd").reward
        -1.0
    """

    simultaneous: ClassVar[bool] = True
    move_deadline: ClassVar[float | None] = None

    def live_seats(self) -> Sequence[str]:
        """The seats that move in this round.

        Returns:
            Their names, in seat order; empty when nobody may (the episode is over).
        """
        raise NotImplementedError

    def step(self, actions: dict[str, ActT]) -> None:
        """Play one round: every live seat's move, or those made in time.

        Args:
            actions: Seat -> its move (an instance of the seat's action type, checked against
                its schema). A live seat missing did not move before the deadline: the env's
                rule says what it does.

        Raises:
            InvalidAction: The round is refused (raised before changing any state): every
                seat's move of it is answered `invalid_action`, and the round starts over.
        """
        raise NotImplementedError


class _AsyncSeatedEnvironment(_Seated, Generic[ActT, ObsT, StateT]):
    """What both kinds of multi-agent env whose methods are coroutines declare."""

    async def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ObsT:
        """Start a new episode; its public view (as `MultiAgentEnvironment.reset`).

        Args:
            seed: Seeds the episode's randomness; None: the env's own choice.
            episode_id: The id the caller gives the episode; None: the env may choose one.

        Returns:
            The public view of the episode's start.
        """
        raise NotImplementedError

    async def observe(self, seat: str | None) -> ObsT:
        """What `seat` may see now, or (None) what anyone may (as `MultiAgentEnvironment`'s).

        Args:
            seat: One of `seats`, or None for the public view.

        Returns:
            The view, with the seat's own `reward`, `done` and `truncated`.
        """
        raise NotImplementedError

    async def state(self) -> StateT:
        """Report the episode's state (the owner's to read).

        Returns:
            The State: at least `episode_id` and `step_count`, plus the env's own fields.
        """
        raise NotImplementedError

    async def close(self) -> None:
        """Release everything this instance holds; idempotent (as `Environment.close`)."""
        return None


class AsyncMultiAgentEnvironment(_AsyncSeatedEnvironment[ActT, ObsT, StateT]):
    """Base class for turn-based multi-agent environments whose methods are coroutines.

    `MultiAgentEnvironment`'s contract, with `async def reset`, `current_seat`, `step`,
    `observe`, `state`, `close` (and `render(seat)` when it has one). They are awaited on the
    server's event loop, as an `AsyncEnvironment`'s, so they must never block it. After each
    reset and move the kernel awaits `current_seat()` and every seat's `observe` (and the
    public one) within the same call, so a seat's `observe` or a turn check never calls the
    env again. The rules of the wire are the same as for a plain one: a move out of turn is
    refused without calling the env, a call past its deadline is answered `timeout` and sets
    the instance aside (the next reset makes a fresh one).
    """

    async def current_seat(self) -> str | None:
        """Whose turn it is.

        Returns:
            The seat to move next, or None when nobody may (the episode is over).
        """
        raise NotImplementedError

    async def step(self, seat: str, action: ActT) -> None:
        """Apply the move of `seat`, the current seat (as `MultiAgentEnvironment.step`).

        Args:
            seat: The seat moving.
            action: An instance of the seat's action type, already checked against its schema.

        Raises:
            InvalidAction: The move is well formed but not allowed (raised before changing any
                state: it does not count, and it is still that seat's turn).
        """
        raise NotImplementedError


class AsyncSimultaneousEnvironment(_AsyncSeatedEnvironment[ActT, ObsT, StateT]):
    """Base class for simultaneous multi-agent environments whose methods are coroutines.

    `SimultaneousEnvironment`'s contract (rounds, `move_deadline`, a silent seat missing from
    `actions`), with `async def reset`, `live_seats`, `step`, `observe`, `state`, `close`
    (and `render(seat)`), awaited on the server's event loop as an `AsyncEnvironment`'s.
    """

    simultaneous: ClassVar[bool] = True
    move_deadline: ClassVar[float | None] = None

    async def live_seats(self) -> Sequence[str]:
        """The seats that move in this round.

        Returns:
            Their names, in seat order; empty when nobody may (the episode is over).
        """
        raise NotImplementedError

    async def step(self, actions: dict[str, ActT]) -> None:
        """Play one round (as `SimultaneousEnvironment.step`).

        Args:
            actions: Seat -> its move; a live seat missing did not move before the deadline.

        Raises:
            InvalidAction: The round is refused (raised before changing any state): every
                seat's move of it is answered `invalid_action`, and the round starts over.
        """
        raise NotImplementedError
