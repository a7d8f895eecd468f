# Generated from ecotone/client/_async/connection.py by scripts/unasync.py: do not edit.
"""A connection to a server and the sessions on it: the client, written once.

The source is ecotone/client/_async/connection.py (trio or asyncio, through anyio);
scripts/unasync.py generates ecotone/client/_sync/connection.py from it (blocking), so both
faces keep the same rules:

* Every request carries a fresh id and its answer is matched by id (`Matcher`), so requests
  may be pipelined (`send`, then `poll`) and sessions multiplexed on one connection.
* A call that times out raises TimeoutError; its late answer is recognised by id and dropped,
  so the next call gets its own answer, never a stale one.
* There is no background reader: whoever waits holds the read lock, reads, and hands each
  answer to its owner. So a connection needs no task group (async) and no thread (blocking):
  a blocking step costs one send and one receive.
* A session or a connection closes once however often it is asked to, and closing a session
  never raises for a connection that is already gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar, Unpack

from ecotone.client._sync import io
from ecotone.client._sync.exchange import Exchange
from ecotone.client._sync.resuming import RESUME_TIMEOUT, Resumer
from ecotone.client._sync.seats import Seat, SessionSeats
from ecotone.client._sync.snapshots import SessionSnapshots
from ecotone.client._core import (
    ConnectOptions,
    EnvTypes,
    split_options,
)
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.client.results import StepResult, Task, Tasks
from ecotone.specs import (
    CallTool,
    Close,
    Describe,
    Described,
    EnvInfo,
    Error,
    GetState,
    GetTask,
    Join,
    Joined,
    Keepalive,
    Kept,
    ListTasks,
    ListTools,
    Open,
    Opened,
    Ping,
    Pong,
    Reset,
    Share,
    Shared,
    SharedSteps,
    SharedStepsResult,
    Step,
    StepItem,
    StepMany,
    StepManyResult,
    ToolInfo,
    ToolResult,
    Tools,
)
from ecotone.specs.errors import ErrorCode

ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")

CLOSE_TIMEOUT = 10.0
"""Seconds closing a session waits for the server's answer (then the session is left to the
server, which closes it with the connection)."""


class Connection(Exchange):
    """One connection to a server; it may carry many sessions (`open`).

    In the async face any number of tasks may share it; a blocking one serves one thread at a
    time. Every request is matched to its answer by id, so requests may be pipelined (`send`,
    then `poll`) and sessions multiplexed (the module docstring has the rules). Close it with
    `close()`, or use it as `with`: the server closes its sessions with it.

    Args:
        url: The server's URL: `ws://HOST:PORT`, `http://`, `tcp://`, `unix://`, `stdio:ENV`,
            `inproc://ENV`, `openenv+http://`... A `?token=` in it is taken out, and shown to
            the server when `token` is not given.
        codec: `json` or `msgpack`.
        timeout: The default per-call timeout in seconds (None: none).
        connect_timeout: Seconds to connect and shake hands.
        channel: Used instead of opening one for `url` (an embedded engine's channel, for
            instance); `url` then only labels the connection. Without one, the blocking face
            connects at once; the async face needs the classmethod `open_url`, which both
            have.
        token: The server's token, for a server that requires one (else `?token=` in the URL,
            else `$ECOTONE_TOKEN`).

    Raises:
        TypeError: The async face made without a `channel` (it opens with `open_url`).
        ValueError: A URL no installed transport handles, or a malformed one.
        ConnectionLost: Nothing answers at `url`, or the connection broke while opening.
        AccessDenied: The server refused the token (or wants one).
        EcotoneError: What answered is not a server of this transport, or did not complete
            its handshake within `connect_timeout`.

    Attributes:
        url: The server's URL, without its token.
        timeout: The default per-call timeout in seconds.
        channel: What carries the frames.

    Example:
        Two sessions on one connection, stepped in one round trip:

        >>> connection = ecotone.Connection.open_url("inproc://counter")
        >>> with connection:
        ...     first = connection.open()
        ...     second = connection.open()
        ...     result = first.reset(seed=0)
        ...     result = second.reset(seed=0)
        ...     steps = [(first, {"delta": 1}), (second, {"delta": 2})]
        ...     results = connection.step_many(steps)
        >>> [result.observation["count"] for result in results]
        [1, 2]
    """

    # --- sessions ------------------------------------------------------------------------------

    def open(
        self,
        env: str | None = None,
        *,
        observation_type: Any = None,
        state_type: Any = None,
        timeout: float | None = None,
    ) -> EnvClient[Any, Any]:
        """Open a session (its own env instance) on this connection.

        Args:
            env: Which env, when the server serves several (None: its default).
            observation_type: Decode observations into this type (a msgspec Struct, a
                dataclass...); None: dicts.
            state_type: Decode states into this type; None: dicts.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The session's client. Closing it leaves this connection open.

        Raises:
            ServerError: The server refused: `unknown_env`, `CapacityError`, or `EnvError`
                when the env's constructor raised.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        response = self.core.check(
            self.request(Open(id=self.core.next_id(), env=env), timeout),
        )
        assert isinstance(response, Opened)
        types = EnvTypes(observation_type, state_type)
        client = EnvClient[Any, Any](self, response.session, response.env, types)
        client.resume_key = response.resume
        self.hold(response.session, response.lease, client)
        return client

    def join(
        self,
        key: str,
        *,
        observation_type: Any = None,
        timeout: float | None = None,
    ) -> Seat:
        """Take the seat of a multi-agent session a key names (or watch it: a spectator key).

        Args:
            key: A seat key, or the spectator key, from the session's owner (`seat_keys()`).
            observation_type: Decode views into this type; None: dicts.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The seat, to `play` and `observe`; it is held until this connection closes.

        Raises:
            ServerError: `unknown_seat_key`, `seat_taken` (another live connection holds it).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout.
        """
        frame = Join(id=self.core.next_id(), key=key)
        answer = self.core.check(self.request(frame, timeout))
        assert isinstance(answer, Joined), answer
        types = EnvTypes(observation_type, None)
        seat = Seat(self, answer.session, answer.env, answer.seat, answer.seats, types)
        self.hold(key, answer.lease, seat, seat=True)
        return seat

    def describe(self, env: str | None = None) -> EnvInfo:
        """Describe an env: its name, version, description and JSON Schemas.

        Args:
            env: Which env (None: the server's default).

        Returns:
            What the env is (`EnvInfo`).

        Raises:
            ServerError: `unknown_env`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        response = self.core.check(self.request(Describe(id=self.core.next_id(), env=env)))
        assert isinstance(response, Described)
        return response.info

    def ready(self) -> bool | None:
        """Whether the server has room for another session and is not draining.

        Its answer to `ping`, which needs no token; `GET /ready` on the HTTP ports says the
        same.

        Returns:
            True or False; None from a server that does not say.

        Raises:
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        response = self.core.check(self.request(Ping(id=self.core.next_id())))
        assert isinstance(response, Pong)
        return response.ready

    def keepalive(self, timeout: float | None = None) -> list[str]:
        """Renew the leases of every session and seat this connection holds, now.

        A server reclaims what nothing renewed for its lease (`[limits] lease`); every
        request renews what it names, and the process's lease keeper renews the rest on its
        own (unless the connection was opened with `keepalive=False`).

        Args:
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The session ids and seat keys the server no longer held (reclaimed or closed),
            which this connection forgets.

        Raises:
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        sessions, seats = self.leases()
        frame = Keepalive(id=self.core.next_id(), sessions=list(sessions), seats=list(seats))
        answer = self.core.check(self.request(frame, timeout))
        assert isinstance(answer, Kept), answer
        for name in answer.unknown:
            self.release(name)
        return list(answer.unknown)

    def list_tasks(
        self,
        split: str | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        env: str | None = None,
    ) -> Tasks:
        """List the env's task splits and a page of one split's tasks.

        Args:
            split: Which split (None: the first).
            offset: The page's first task's position in the split.
            limit: How many tasks at most (the server gives 1000 a page at most).
            env: Which env (None: the server's default).

        Returns:
            Every split's size and the page (`Tasks`); an env that publishes no tasks has no
            splits.

        Raises:
            ServerError: `invalid_argument` (an unknown split), `unknown_env`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        frame = ListTasks(id=self.core.next_id(), env=env, split=split, offset=offset, limit=limit)
        return self.core.tasks(self.request(frame))

    def get_task(
        self,
        task: str | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        env: str | None = None,
    ) -> Task:
        """Fetch one task: by id (`task`), or by `split` and `index`.

        Args:
            task: The task's id.
            split: Its split (None: the first).
            index: Its position in the split.
            env: Which env (None: the server's default).

        Returns:
            The task record and where it is (`Task`).

        Raises:
            ServerError: `invalid_argument` naming what is unknown, `unsupported` (the env
                publishes no tasks), `unknown_env`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        frame = GetTask(id=self.core.next_id(), env=env, task=task, split=split, index=index)
        return self.core.task(self.request(frame))

    def step_many(
        self,
        steps: Iterable[tuple[EnvClient[Any, Any], Any]],
        timeout: float | None = None,
        *,
        call_timeout: float | None = None,
    ) -> list[StepResult[Any] | ServerError]:
        """Step several sessions of this connection in one round trip.

        Args:
            steps: Each session's client and its action (a dict, or the env's Action type).
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).
            call_timeout: A shorter deadline for each env step than the server's.

        Returns:
            The results in the order given; a session that failed gets its ServerError in its
            place (a session named twice gets `invalid_argument` for its second item, which is
            not stepped).

        Raises:
            ServerError: The server refused the whole request.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        steps = list(steps)
        core = self.core
        frame = StepMany(
            id=core.next_id(),
            steps=[StepItem(session=c.session_id, action=core.raw(a)) for c, a in steps],
            call_timeout=call_timeout,
        )
        response = core.check(self.request(frame, timeout))
        assert isinstance(response, StepManyResult)
        out: list[StepResult[Any] | ServerError] = []
        for (client, _), item in zip(steps, response.results, strict=True):
            if isinstance(item, Error):
                out.append(ServerError.from_frame(item))
            else:
                out.append(core.observation(item.observation, client.types))
        return out


class EnvClient(SessionSnapshots, SessionSeats, Generic[ObsT, StateT]):
    """One session on a server: its own env instance, to reset, step, inspect and close.

    `ecotone.connect` makes one on a connection of its own, `Connection.open` on a
    shared one. A context manager that closes the session (and the connection, when the
    client made its own). Calls of one session are answered in the order they were made.

    Args:
        connection: The connection the session is on.
        session_id: The server's id for the session.
        env: The session's env name.
        types: The types observations and states are decoded into.
        owns_connection: Close `connection` with the session.

    Attributes:
        connection: The connection the session is on.
        session_id: The server's id for the session.
        env: The session's env name.

    Example:
        >>> with ecotone.connect("inproc://counter") as env:
        ...     result = env.reset(seed=0, target=2)
        ...     result = env.step({"delta": 1})
        ...     result = env.step({"delta": 1})
        >>> result.observation["count"], result.reward, result.done
        (2, 1.0, True)
    """

    def __init__(
        self,
        connection: Connection,
        session_id: str,
        env: str,
        types: EnvTypes,
        owns_connection: bool = False,
    ) -> None:
        self.connection = connection
        self.session_id = session_id
        self.env = env
        self.types = types
        self._owns = owns_connection
        self._closed = False
        self.resume_key: str | None = None
        """The session's resume key, on a server that keeps checkpoints (else None)."""
        self._resumer: Resumer | None = None

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        timeout: float | None = None,
        call_timeout: float | None = None,
        **options: Any,
    ) -> StepResult[ObsT]:
        """Start an episode, abandoning the current one if any.

        Args:
            seed: Seeds the episode: the same seed, options and actions give the same episode.
            episode_id: The id to give the episode (None: the env's choice).
            timeout: Seconds to wait for the answer here (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server than the
                server's own (past it: a `timeout` error).
            **options: The env's own reset options (for an env that publishes tasks, `task`,
                or `split` and `index`, choose the episode's task).

        Returns:
            The first observation (`reward` None); `task` names the episode's task, for an env
            that publishes tasks.

        Raises:
            ServerError: `invalid_argument` (an option the env does not take, a task it cannot
                give), `unknown_session` (the session is closed), `timeout` (`call_timeout`
                or the server's passed: the env is set aside, the next reset gets a fresh
                one).
            EnvError: The env raised; the session stays open.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
            msgspec.ValidationError: The observation does not fit `observation_type`.
        """
        args: dict[str, Any] = {"seed": seed, "episode_id": episode_id, "options": options}
        args["call_timeout"] = call_timeout
        if self._resumer is not None:
            return self._resumer.reset(self, args, timeout)
        return self._reset_once(args, timeout)

    def _reset_once(self, args: dict[str, Any], timeout: float | None) -> StepResult[ObsT]:
        core = self.connection.core
        frame = Reset(id=core.next_id(), session=self.session_id, **args)
        return core.step_result(self.connection.request(frame, timeout), self.types)

    def step(
        self, action: Any, *, timeout: float | None = None, call_timeout: float | None = None
    ) -> StepResult[ObsT]:
        """Apply one action, and return what it led to.

        Args:
            action: A dict, or an instance of the env's Action type.
            timeout: Seconds to wait for the answer here (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server than the
                server's own.

        Returns:
            The next observation, with the transition's `reward`, `done` and `truncated`.

        Raises:
            InvalidActionError: The action failed validation, or the env refused it (its
                `field` names the bad field); the step did not count, the episode goes on.
            ServerError: `reset_required` (no reset yet), `episode_done` (the episode ended:
                reset first), `unknown_session`, `timeout`.
            EnvError: The env raised; the session stays open and can be reset.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
            msgspec.ValidationError: The observation does not fit `observation_type`.
        """
        if self._resumer is not None:
            return self._resumer.step(self, action, timeout, call_timeout)
        return self._step_once(action, timeout, call_timeout)

    def _step_once(
        self, action: Any, timeout: float | None, call_timeout: float | None
    ) -> StepResult[ObsT]:
        core = self.connection.core
        frame = Step(
            id=core.next_id(),
            session=self.session_id,
            action=core.raw(action),
            call_timeout=call_timeout,
        )
        return core.step_result(self.connection.request(frame, timeout), self.types)

    def state(
        self,
        *,
        timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> StateT:
        """Read the env's state.

        Args:
            timeout: Seconds to wait for the answer here (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the env's call on the server than the
                server's own.

        Returns:
            The State: at least `episode_id` and `step_count`, plus the env's own fields (a
            dict, or `state_type`).

        Raises:
            ServerError: `unknown_session`, `timeout`, `reset_required` (the env was set
                aside after a timeout).
            EnvError: The env raised.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        core = self.connection.core
        frame = GetState(id=core.next_id(), session=self.session_id, call_timeout=call_timeout)
        return core.state(self.connection.request(frame, timeout), self.types)

    def describe(self) -> EnvInfo:
        """Describe this session's env: its name, version, description and JSON Schemas.

        Returns:
            What the env is (`EnvInfo`).

        Raises:
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        return self.connection.describe(self.env)

    def list_tasks(
        self,
        split: str | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
    ) -> Tasks:
        """List this session's env's tasks (see `Connection.list_tasks`).

        Args:
            split: Which split (None: the first).
            offset: The page's first task's position in the split.
            limit: How many tasks at most (the server gives 1000 a page at most).

        Returns:
            Every split's size and the page (`Tasks`).

        Raises:
            ServerError: `invalid_argument` (an unknown split).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        return self.connection.list_tasks(split, offset=offset, limit=limit, env=self.env)

    def get_task(
        self, task: str | None = None, *, split: str | None = None, index: int | None = None
    ) -> Task:
        """Fetch one of this session's env's tasks (see `Connection.get_task`).

        Args:
            task: The task's id.
            split: Its split (None: the first).
            index: Its position in the split.

        Returns:
            The task record and where it is (`Task`).

        Raises:
            ServerError: `invalid_argument` naming what is unknown, `unsupported` (the env
                publishes no tasks).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        return self.connection.get_task(task, split=split, index=index, env=self.env)

    def list_tools(self, *, timeout: float | None = None) -> list[ToolInfo]:
        """List the tools this session's env exposes.

        Args:
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            Each tool's name, description and argument schema.

        Raises:
            ServerError: `unsupported` (the env exposes no tools), `unknown_session`.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        core = self.connection.core
        frame = ListTools(id=core.next_id(), session=self.session_id)
        answer = core.check(self.connection.request(frame, timeout))
        assert isinstance(answer, Tools), answer
        return list(answer.tools)

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> Any:
        """Call one of the env's tools.

        Args:
            name: The tool's name.
            arguments: Its arguments (None: none).
            timeout: Seconds to wait for the answer here (None: the connection's `timeout`).
            call_timeout: A shorter deadline for the tool's call on the server than the
                server's own.

        Returns:
            What the tool returned, as plain data.

        Raises:
            ServerError: `invalid_argument` (an unknown tool, bad arguments), `unsupported`
                (the env exposes no tools), `unknown_session`, `timeout`.
            EnvError: The tool raised.
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        core = self.connection.core
        frame = CallTool(
            id=core.next_id(),
            session=self.session_id,
            name=name,
            arguments=dict(arguments or {}),
            call_timeout=call_timeout,
        )
        answer = core.check(self.connection.request(frame, timeout))
        assert isinstance(answer, ToolResult), answer
        return core.codec.decode_as(answer.result, Any)

    def share(self, *, timeout: float | None = None) -> str:
        """Let another connection act in this session.

        Whoever presents the key (an MCP agent: as the `X-Ecotone-Share` header) may step,
        read state and call tools; resetting and closing stay here, and the session closes
        with this client. The same key every time.

        Args:
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The key.

        Raises:
            ServerError: `unknown_session`, `forbidden` (this connection is itself a guest).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        core = self.connection.core
        frame = Share(id=core.next_id(), session=self.session_id)
        answer = core.check(self.connection.request(frame, timeout))
        assert isinstance(answer, Shared), answer
        return answer.key

    def shared_steps(
        self, since: int = 0, *, timeout: float | None = None
    ) -> tuple[list[StepResult[ObsT]], int]:
        """Read what the steps others made in this shared session observed.

        Args:
            since: The first step to report (steps are numbered from 0, in the order they
                ran; the server keeps the last 1,024).
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The observations (reward and flags included) from step `since` on, and the number
            to ask from next time.

        Raises:
            ServerError: `unknown_session`, `forbidden` (this connection is itself a guest).
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        core = self.connection.core
        frame = SharedSteps(id=core.next_id(), session=self.session_id, since=since)
        answer = core.check(self.connection.request(frame, timeout))
        assert isinstance(answer, SharedStepsResult), answer
        steps = [core.observation(raw, self.types) for raw in answer.observations]
        return steps, answer.next

    def close(self) -> None:
        """Close the session (idempotent; never raises for a connection already gone).

        Raises:
            ServerError: The server refused the close (never `shutting_down`: a stopping
                server closes its sessions itself; nor for a session the server reclaimed
                as its lease ran out).
        """
        if self._closed:
            return
        self._closed = True
        self.connection.release(self.session_id)
        try:
            core = self.connection.core
            frame = Close(id=core.next_id(), session=self.session_id)
            with io.shielded():
                core.check(self.connection.request(frame, timeout=CLOSE_TIMEOUT))
        except (ConnectionLost, TimeoutError):
            pass  # the server closes the session itself when the connection goes
        except ServerError as exc:
            if exc.code != ErrorCode.SHUTTING_DOWN and "reclaimed" not in exc.details:
                raise  # (a stopping server closes its sessions itself; a reclaimed one is)
        finally:
            if self._owns:
                self.connection.close()

    def __enter__(self) -> EnvClient[ObsT, StateT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"<{name} {self.env} session={self.session_id} url={self.connection.url}>"


def connect(
    url: str,
    env: str | None = None,
    **options: Unpack[ConnectOptions],
) -> EnvClient[Any, Any]:
    """Connect to a server and open one session, on a connection of its own.

    Close the session (and its connection) with `close()`, or use it as `with`.

    Args:
        url: `ws://HOST:PORT`, `http://`, `tcp://`, `unix://`, `stdio:ENV`, `inproc://ENV`,
            `openenv+http://`... (a `?token=` in it is shown to the server, never logged).
        env: Which env, when the server serves several (None: its default).
        **options: `ConnectOptions`, each optional: `observation_type` and `state_type`, the
            types to decode observations and states into (None: dicts); `codec`, `json` (the
            default) or `msgpack`; `timeout`, the default per-call timeout in seconds (60;
            None: none); `connect_timeout`, seconds to connect and shake hands (10); `token`,
            for a server that requires one (else `?token=` in the URL, else
            `$ECOTONE_TOKEN`); `keepalive`, whether the process's lease keeper renews the
            session's lease while it sits idle (True); `resume`, `checkpoint_every`,
            `resume_timeout` (docs/snapshots.md).

    Returns:
        The session's client.

    Raises:
        TypeError: A keyword that is not one of the options.
        ValueError: A URL no installed transport handles, or a malformed one.
        ConnectionLost: Nothing answers at `url`, or the connection broke.
        AccessDenied: The server refused the token (or wants one).
        EcotoneError: What answered is not a server of this transport, or did not complete
            its handshake within `connect_timeout`.
        ServerError: The server refused the session: `unknown_env`, `CapacityError`, or
            `EnvError` when the env's constructor raised.
        TimeoutError: No answer to the opening within `timeout`.

    Example:
        >>> env = ecotone.connect("inproc://counter")
        >>> result = env.reset(seed=0)
        >>> result = env.step({"delta": 2})
        >>> result.observation["count"], result.reward, result.finished
        (2, 2.0, False)
        >>> env.close()
    """
    resume = options.pop("resume", False)
    every = options.pop("checkpoint_every", None)
    patience = options.pop("resume_timeout", RESUME_TIMEOUT)
    connecting, opening = split_options(options)
    connection = Connection.open_url(url, **connecting)
    try:
        client = connection.open(env, **opening)
        if resume:
            if client.resume_key is None:
                raise ValueError(
                    f"resume=True: the server at {connection.url} keeps no checkpoints (start "
                    "it with --checkpoint-dir DIR)"
                )
            opener = Connection.open_url
            client._resumer = Resumer(url, opener, connecting, every, patience)
            client._resumer.key = client.resume_key
    except BaseException:
        with io.shielded():
            connection.close()
        raise
    client._owns = True
    return client
