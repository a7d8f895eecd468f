"""The async client: `await ecotone.aconnect(url)` under trio or asyncio (anyio underneath).

Many tasks may share one connection (one session each, or several sessions each). There is no
background reader task: whichever waiting task holds the read lock reads the next messages and
hands each answer to the task that asked (matched by request id). So a connection needs no task
group, can be opened with a plain `await`, and a cancelled or timed-out call leaves nothing
behind: its late answer is recognised by id and dropped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable
from typing import Any, Generic, TypeVar

import anyio

from ecotone.client._core import ClientCore, EnvTypes
from ecotone.client.channels import AsyncChannel, open_async_channel
from ecotone.client.errors import ConnectionLost, ServerError
from ecotone.client.sync import DEFAULT_TIMEOUT
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


class _Slot:
    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: Response | None = None


class AsyncConnection:
    """One connection to a server, shared by any number of tasks and sessions."""

    def __init__(
        self, url: str, channel: AsyncChannel, core: ClientCore, timeout: float | None
    ) -> None:
        self.url = url
        self.channel = channel
        self.core = core
        self.timeout = timeout
        self._waiting: dict[Any, _Slot] = {}
        self._read_lock = anyio.Lock()
        self._lost: ConnectionLost | None = None
        self._closed = False
        self._detached: set[Any] = set()
        self._inbox: list[Response] = []
        self.decode: Callable[[bytes | str], Response] = self.core.decode
        """How received frames are decoded (replaceable: a vector env installs one that decodes
        observations straight into their type, in the same pass)."""

    @classmethod
    async def open_url(
        cls,
        url: str,
        *,
        codec: str = "json",
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
    ) -> AsyncConnection:
        channel = await open_async_channel(url, codec, connect_timeout)
        return cls(url, channel, ClientCore(codec), timeout)

    async def request(self, frame: Any, timeout: float | None = None) -> Response:
        """Send one request and wait for its answer (error frames included)."""
        if self._lost is not None:
            raise self._lost
        if self._closed:
            raise ConnectionLost("this connection is closed")
        timeout = self.timeout if timeout is None else timeout
        rid = frame.id
        slot = self._waiting[rid] = _Slot()
        try:
            with _deadline(timeout):
                await self.channel.send(self.core.encode(frame))
                while slot.response is None:
                    async with self._read_lock:
                        if slot.response is not None:
                            break
                        if self._lost is not None:
                            raise self._lost
                        await self._read_once(slot)
        except TimeoutError:
            self.core.abandoned.add(rid)
            raise TimeoutError(
                f"no answer to {type(frame).__name__.lower()} within {timeout}s "
                "(its late answer will be ignored)"
            ) from None
        finally:
            self._waiting.pop(rid, None)
        return slot.response

    async def _read_once(self, reader: _Slot | None) -> None:
        try:
            messages = await self.channel.receive()
        except ConnectionLost as exc:
            self._lost = exc
            raise
        core = self.core
        detached = self._detached
        for message in messages:
            response = self.decode(message)
            rid = response.id
            slot = self._waiting.get(rid)
            if slot is not None:
                slot.response = response
            elif rid in detached:
                detached.discard(rid)
                self._inbox.append(response)
            elif rid is None and isinstance(response, Error):
                if reader is not None and reader.response is None:
                    reader.response = response  # an error not tied to an id: the reader's
                else:
                    self._inbox.append(response)
            else:
                core.abandoned.discard(rid)

    # --- pipelining: send now, collect answers later -------------------------------------------

    async def send(self, frame: Any) -> None:
        """Send one request without waiting; its answer comes out of `poll`."""
        if self._lost is not None:
            raise self._lost
        if self._closed:
            raise ConnectionLost("this connection is closed")
        rid = frame.id
        self._detached.add(rid)
        try:
            await self.channel.send(self.core.encode(frame))
        except ConnectionLost as exc:
            self._detached.discard(rid)
            self._lost = exc
            raise

    async def poll(self) -> list[Response]:
        """Answers to requests sent with `send`, as they arrive: whatever is already in, else
        at least one read (ConnectionLost if the connection broke). Cancel it to stop waiting
        (nothing is lost). An error frame the server could not tie to a request has id None."""
        while not self._inbox:
            async with self._read_lock:
                if self._inbox:
                    break
                if self._lost is not None:
                    raise self._lost
                await self._read_once(None)
        out, self._inbox = self._inbox, []
        return out

    def abandon(self, rid: Any) -> None:
        """Stop waiting for a request sent with `send`: its late answer will be dropped."""
        if rid in self._detached:
            self._detached.discard(rid)
            self.core.abandoned.add(rid)
        else:
            self._inbox = [r for r in self._inbox if r.id != rid]

    @property
    def pending(self) -> int:
        """Requests sent with `send` whose answers have not arrived (nor been abandoned)."""
        return len(self._detached)

    @property
    def closed(self) -> bool:
        return self._closed or self._lost is not None

    async def open(
        self,
        env: str | None = None,
        *,
        observation_type: Any = None,
        state_type: Any = None,
        timeout: float | None = None,
    ) -> AsyncEnvClient[Any, Any]:
        """Open a session (its own env instance) on this connection."""
        response = self.core.check(
            await self.request(Open(id=self.core.next_id(), env=env), timeout)
        )
        assert isinstance(response, Opened)
        return AsyncEnvClient(
            self, response.session, response.env, EnvTypes(observation_type, state_type)
        )

    async def describe(self, env: str | None = None) -> EnvInfo:
        response = self.core.check(await self.request(Describe(id=self.core.next_id(), env=env)))
        assert isinstance(response, Described)
        return response.info

    async def step_many(
        self,
        steps: Iterable[tuple[AsyncEnvClient[Any, Any], Any]],
        timeout: float | None = None,
    ) -> list[StepResult[Any] | ServerError]:
        """Step several sessions of this connection in one round trip (results in order)."""
        steps = list(steps)
        core = self.core
        frame = StepMany(
            id=core.next_id(),
            steps=[StepItem(session=c.session_id, action=core.raw(a)) for c, a in steps],
        )
        response = core.check(await self.request(frame, timeout))
        assert isinstance(response, StepManyResult)
        out: list[StepResult[Any] | ServerError] = []
        for (client, _), item in zip(steps, response.results, strict=True):
            if isinstance(item, Error):
                out.append(ServerError.from_frame(item))
            else:
                out.append(core.observation(item.observation, client.types))
        return out

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.channel.aclose()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.contextmanager
def _deadline(timeout: float | None) -> Generator[None, None, None]:
    if timeout is None:
        yield
    else:
        with anyio.fail_after(timeout):
            yield


class AsyncEnvClient(Generic[ObsT, StateT]):
    """One session, async: `await reset()`, `await step(action)`, `await state()`,
    `await close()`. An async context manager that closes the session."""

    def __init__(
        self,
        connection: AsyncConnection,
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

    async def reset(
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
        return core.step_result(await self.connection.request(frame, timeout), self.types)

    async def step(self, action: Any, *, timeout: float | None = None) -> StepResult[ObsT]:
        core = self.connection.core
        frame = Step(id=core.next_id(), session=self.session_id, action=core.raw(action))
        return core.step_result(await self.connection.request(frame, timeout), self.types)

    async def state(self, *, timeout: float | None = None) -> StateT:
        core = self.connection.core
        frame = GetState(id=core.next_id(), session=self.session_id)
        return core.state(await self.connection.request(frame, timeout), self.types)

    async def describe(self) -> EnvInfo:
        return await self.connection.describe(self.env)

    async def close(self) -> None:
        """Close the session (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            core = self.connection.core
            with anyio.CancelScope(shield=True):
                core.check(
                    await self.connection.request(
                        Close(id=core.next_id(), session=self.session_id), timeout=10.0
                    )
                )
        except (ConnectionLost, TimeoutError):
            pass
        finally:
            if self._owns:
                with anyio.CancelScope(shield=True):
                    await self.connection.aclose()

    async def __aenter__(self) -> AsyncEnvClient[ObsT, StateT]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncEnvClient {self.env} session={self.session_id} url={self.connection.url}>"


class _Connecting:
    """What `aconnect` returns: await it, or use it as `async with`."""

    def __init__(self, url: str, env: str | None, kwargs: dict[str, Any]) -> None:
        self._url = url
        self._env = env
        self._kwargs = kwargs
        self._client: AsyncEnvClient[Any, Any] | None = None

    async def _connect(self) -> AsyncEnvClient[Any, Any]:
        kw = self._kwargs
        connection = await AsyncConnection.open_url(
            self._url,
            codec=kw["codec"],
            timeout=kw["timeout"],
            connect_timeout=kw["connect_timeout"],
        )
        try:
            client = await connection.open(
                self._env, observation_type=kw["observation_type"], state_type=kw["state_type"]
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await connection.aclose()
            raise
        client._owns = True
        return client

    def __await__(self) -> Generator[Any, None, AsyncEnvClient[Any, Any]]:
        return self._connect().__await__()

    async def __aenter__(self) -> AsyncEnvClient[Any, Any]:
        self._client = await self._connect()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()


def aconnect(
    url: str,
    env: str | None = None,
    *,
    observation_type: Any = None,
    state_type: Any = None,
    codec: str = "json",
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float = 10.0,
) -> _Connecting:
    """Connect to a server and open one session, asynchronously (trio or asyncio).

    `async with ecotone.aconnect(url) as env: ...` or `env = await ecotone.aconnect(url)`.
    Arguments as for `ecotone.connect`.
    """
    return _Connecting(
        url,
        env,
        dict(
            observation_type=observation_type,
            state_type=state_type,
            codec=codec,
            timeout=timeout,
            connect_timeout=connect_timeout,
        ),
    )
