"""The blocking client: `ecotone.connect(url)`.

Calls go straight through a blocking socket (no event loop, no background thread), which is
what makes one-session stepping fast. Every call has a timeout; a call that times out raises
`TimeoutError`, and its late answer is recognised by id and dropped, so the next call gets its
own answer, never a stale one.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from ecotone.client._core import ClientCore, EnvTypes
from ecotone.client.channels import SyncChannel, open_sync_channel
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.kernel.contract import StepResult
from ecotone.specs import (
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
    """One connection to a server; it may carry many sessions (`open`)."""

    def __init__(
        self,
        url: str,
        *,
        codec: str = "json",
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.core = ClientCore(codec)
        self.channel: SyncChannel = open_sync_channel(url, codec, connect_timeout)
        self._inbox: collections.deque[bytes | str] = collections.deque()
        self._closed = False

    def request(self, frame: Any, timeout: float | None = None) -> Response:
        """Send one request frame and return its answer (error frames included)."""
        if self._closed:
            raise ConnectionLost("this connection is closed")
        timeout = self.timeout if timeout is None else timeout
        core = self.core
        self.channel.send(core.encode(frame))
        deadline = None if timeout is None else time.monotonic() + timeout
        rid = frame.id
        inbox = self._inbox
        while True:
            while inbox:
                response = core.decode(inbox.popleft())
                if response.id == rid:
                    return response
                if response.id is None and isinstance(response, Error):
                    return response  # an error the server could not tie to an id: ours
                core.abandoned.discard(response.id)
            try:
                inbox.extend(self.channel.receive(deadline))
            except TimeoutError:
                core.abandoned.add(rid)
                raise TimeoutError(
                    f"no answer to {type(frame).__name__.lower()} within {timeout}s "
                    f"(its late answer will be ignored)"
                ) from None
            except ConnectionLost:
                self._closed = True
                raise

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
