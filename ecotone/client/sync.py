"""The blocking client: `ecotone.connect(url)`.

Calls go straight through a blocking socket (no event loop, no background thread), which is
what makes one-session stepping fast. Every call has a timeout; a call that times out raises
`TimeoutError`, and its late answer is recognised by id and dropped, so the next call gets its
own answer, never a stale one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from ecotone.client._core import ClientCore, EnvTypes
from ecotone.client.channels import SyncChannel, open_sync_channel
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.kernel.contract import StepResult
from ecotone.wire import (
    Close,
    Describe,
    Described,
    EnvInfo,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Response,
    Step,
    StepItem,
    StepMany,
    StepManyResult,
)

ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")

DEFAULT_TIMEOUT = 60.0


class Connection:
    """One connection to a server; it may carry many sessions (`open`).

    `channel`, when given, is used instead of opening one for `url` (an embedded kernel's
    channel, for instance); `url` then only labels the connection.
    """

    def __init__(
        self,
        url: str,
        *,
        codec: str = "json",
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
        channel: SyncChannel | None = None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.core = ClientCore(codec)
        self.channel: SyncChannel = (
            channel if channel is not None else open_sync_channel(url, codec, connect_timeout)
        )
        self._pending: set[Any] = set()
        self._stash: list[Response] = []
        self.decode: Callable[[bytes | str], Response] = self.core.decode
        """How received frames are decoded (replaceable: a vector env installs one that decodes
        observations straight into their type, in the same pass)."""
        self._closed = False

    def request(self, frame: Any, timeout: float | None = None) -> Response:
        """Send one request frame and return its answer (error frames included)."""
        timeout = self.timeout if timeout is None else timeout
        self.send(frame)
        deadline = None if timeout is None else time.monotonic() + timeout
        rid = frame.id
        others: list[Response] = []
        try:
            while True:
                for response in self._read(deadline):
                    if response.id == rid or response.id is None:
                        self._pending.discard(rid)
                        return response  # an error the server could not tie to an id: ours
                    others.append(response)
        except TimeoutError:
            self.abandon(rid)
            raise TimeoutError(
                f"no answer to {type(frame).__name__.lower()} within {timeout}s "
                f"(its late answer will be ignored)"
            ) from None
        finally:
            if others:
                self._stash.extend(others)

    # --- pipelining: send now, collect answers later -------------------------------------------

    def send(self, frame: Any) -> None:
        """Send one request frame without waiting; its answer comes out of `poll`."""
        if self._closed:
            raise ConnectionLost("this connection is closed")
        rid = frame.id
        self._pending.add(rid)
        try:
            self.channel.send(self.core.encode(frame))
        except ConnectionLost:
            self._pending.discard(rid)
            self._closed = True
            raise

    def poll(self, deadline: float | None) -> list[Response]:
        """Answers to requests sent with `send`, as they arrive: whatever is already in, else
        one read (TimeoutError past `deadline`; ConnectionLost if the connection broke). An
        error frame the server could not tie to a request has `id` None."""
        if self._stash:
            out, self._stash = self._stash, []
        else:
            out = self._read(deadline)
        for response in out:
            self._pending.discard(response.id)
        return out

    def abandon(self, rid: Any) -> None:
        """Stop waiting for `rid`: its late answer will be dropped."""
        self._pending.discard(rid)
        self.core.abandoned.add(rid)

    @property
    def pending(self) -> int:
        """Requests sent and not answered yet (nor abandoned)."""
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int | None:
        """The socket's file descriptor, for `select`; None when the channel has none."""
        sock = getattr(self.channel, "sock", None) or getattr(self.channel, "_sock", None)
        return sock.fileno() if sock is not None else None

    def _read(self, deadline: float | None) -> list[Response]:
        """One read from the channel: the answers to pending requests (and id-less errors);
        answers to abandoned requests are dropped."""
        if self._closed:
            raise ConnectionLost("this connection is closed")
        try:
            messages = self.channel.receive(deadline)
        except ConnectionLost:
            self._closed = True
            raise
        core = self.core
        pending = self._pending
        out: list[Response] = []
        for message in messages:
            response = self.decode(message)
            if response.id in pending or (response.id is None and isinstance(response, Error)):
                out.append(response)
            else:
                core.abandoned.discard(response.id)
        return out

    def open(
        self,
        env: str | None = None,
        *,
        observation_type: Any = None,
        state_type: Any = None,
        timeout: float | None = None,
    ) -> EnvClient[Any, Any]:
        """Open a session (its own env instance) on this connection."""
        response = self.core.check(self.request(Open(id=self.core.next_id(), env=env), timeout))
        assert isinstance(response, Opened)
        types = EnvTypes(observation_type, state_type)
        return EnvClient(self, response.session, response.env, types)

    def describe(self, env: str | None = None) -> EnvInfo:
        response = self.core.check(self.request(Describe(id=self.core.next_id(), env=env)))
        assert isinstance(response, Described)
        return response.info

    def step_many(
        self, steps: Iterable[tuple[EnvClient[Any, Any], Any]], timeout: float | None = None
    ) -> list[StepResult[Any] | ServerError]:
        """Step several sessions of this connection in one round trip. Results are in the
        order given; a session that failed gets its ServerError in its place."""
        steps = list(steps)
        core = self.core
        frame = StepMany(
            id=core.next_id(),
            steps=[StepItem(session=c.session_id, action=core.raw(a)) for c, a in steps],
        )
        response = core.check(self.request(frame, timeout))
        assert isinstance(response, StepManyResult)
        out: list[StepResult[Any] | ServerError] = []
        for (client, _), item in zip(steps, response.results, strict=True):
            if isinstance(item, Error):
                out.append(ServerError.from_frame(item))
            else:
                result = core.observation(item.observation, client.types)
                client._finished = result.finished
                out.append(result)
        return out

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.channel.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvClient(Generic[ObsT, StateT]):
    """One session: reset, step, state, close. A context manager that closes the session
    (and the connection, when the client made its own through `ecotone.connect`)."""

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
        self._finished = False

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> StepResult[ObsT]:
        core = self.connection.core
        frame = Reset(
            id=core.next_id(),
            session=self.session_id,
            seed=seed,
            episode_id=episode_id,
            options=options,
        )
        result = core.step_result(self.connection.request(frame, timeout), self.types)
        self._finished = result.finished
        return result

    def step(self, action: Any, *, timeout: float | None = None) -> StepResult[ObsT]:
        """Apply an action: a dict, or an instance of the env's Action type."""
        core = self.connection.core
        frame = Step(id=core.next_id(), session=self.session_id, action=core.raw(action))
        result = core.step_result(self.connection.request(frame, timeout), self.types)
        self._finished = result.finished
        return result

    def state(self, *, timeout: float | None = None) -> StateT:
        core = self.connection.core
        frame = GetState(id=core.next_id(), session=self.session_id)
        return core.state(self.connection.request(frame, timeout), self.types)

    def describe(self) -> EnvInfo:
        return self.connection.describe(self.env)

    def close(self) -> None:
        """Close the session (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            core = self.connection.core
            core.check(self.connection.request(Close(id=core.next_id(), session=self.session_id)))
        except (ConnectionLost, TimeoutError):
            pass  # the server closes the session itself when the connection goes
        finally:
            if self._owns:
                self.connection.close()

    def __enter__(self) -> EnvClient[ObsT, StateT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<EnvClient {self.env} session={self.session_id} url={self.connection.url}>"


def connect(
    url: str,
    env: str | None = None,
    *,
    observation_type: Any = None,
    state_type: Any = None,
    codec: str = "json",
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float = 10.0,
) -> EnvClient[Any, Any]:
    """Connect to a server and open one session. Blocking.

    `url`: `ws://HOST:PORT` or `inproc://ENV`. `env`: which env when the server serves several.
    Given `observation_type` / `state_type` the client decodes into them; otherwise into dicts.
    `codec`: `json` or `msgpack`. `timeout`: default per-call timeout in seconds.
    """
    connection = Connection(url, codec=codec, timeout=timeout, connect_timeout=connect_timeout)
    try:
        client = connection.open(env, observation_type=observation_type, state_type=state_type)
    except BaseException:
        connection.close()
        raise
    client._owns = True
    return client


__all__: Sequence[str] = ["Connection", "EnvClient", "connect"]
