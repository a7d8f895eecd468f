# unasync: the source of ecotone/client/_sync/exchange.py
"""One channel's requests and their answers, matched by id: what a connection is made of.

The connection (`connection.py`) adds sessions and the env's queries on top. The rules are
the connection's (its module docstring): a fresh id per request, late answers dropped by id,
no background reader (whoever waits reads, and hands each answer to its owner).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any, Self

from ecotone.client._async import io
from ecotone.client._core import ClientCore, Matcher, Slot, credentials
from ecotone.client.errors import ConnectionLost
from ecotone.client.keeper import KEEPER, Held, alive
from ecotone.specs import Hello, Response

DEFAULT_TIMEOUT = 60.0
"""Seconds a call waits for its answer unless told otherwise."""


class AsyncExchange:
    """Requests and answers on one channel.

    `AsyncConnection` is one, with sessions on it; its docstring has the arguments.
    """

    def __init__(
        self,
        url: str,
        *,
        codec: str = "json",
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
        channel: io.Channel | None = None,
        token: str | None = None,
    ) -> None:
        url, token = credentials(url, token)
        self.url = url
        self.token = token
        """The token shown to the server (what the lease keeper shows it too)."""
        self.timeout = timeout
        self.keep_alive = True
        """Whether the process's lease keeper renews the leases of what this connection
        holds (`ecotone.client.keeper`); set it before opening sessions."""
        self._sessions: dict[str, Held] = {}
        """Sessions this connection holds under a lease: the lease's length, and the object
        that holds it (the session's client: once it is gone, the lease is not renewed)."""
        self._seat_keys: dict[str, Held] = {}
        """Keys of the seats this connection took, likewise."""
        self.core = ClientCore(codec)
        self.channel: io.Channel = (
            channel if channel is not None else io.channel_now(url, codec, connect_timeout, token)
        )
        self.decode = self.core.decode
        """How received frames are decoded (replaceable: a vector env installs one that decodes
        observations straight into their type, in the same pass)."""
        self._match = Matcher()
        self._read_lock = io.Lock()
        self._lost: ConnectionLost | None = None
        self._closed = False
        if channel is None and token is not None and getattr(self.channel, "needs_hello", False):
            io.call_now(lambda: self._hello(token, connect_timeout))

    @classmethod
    async def open_url(
        cls,
        url: str,
        *,
        codec: str = "json",
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = 10.0,
        token: str | None = None,
        keepalive: bool = True,
    ) -> Self:
        """Connect to `url`: ws://, http://, tcp://, unix://, stdio:, inproc://, openenv+...

        Args:
            url: The server's URL (see the class docstring).
            codec: `json` or `msgpack`.
            timeout: The default per-call timeout in seconds (None: none).
            connect_timeout: Seconds to connect and shake hands.
            token: The server's token (else `?token=` in the URL, else `$ECOTONE_TOKEN`).
            keepalive: Let the process's lease keeper renew what this connection holds
                while it is idle (`ecotone.client.keeper`); False: only its own requests
                and `keepalive()` do, and the server reclaims what sits idle for a lease.

        Returns:
            The connection, open.

        Raises:
            ValueError: A URL no installed transport handles, or a malformed one.
            ConnectionLost: Nothing answers at `url`, or the connection broke while opening.
            AccessDenied: The server refused the token (or wants one).
            EcotoneError: What answered is not a server of this transport, or did not
                complete its handshake within `connect_timeout`.
        """
        url, token = credentials(url, token)
        channel = await io.open_channel(url, codec, connect_timeout, token)
        connection = cls(url, codec=codec, timeout=timeout, channel=channel, token=token)
        connection.keep_alive = keepalive
        if token is not None and getattr(channel, "needs_hello", False):
            await connection._hello(token, connect_timeout)
        return connection

    async def _hello(self, token: str, timeout: float) -> None:
        """Show the token in `hello`, on channels without headers.

        Raises:
            AccessDenied: The token was refused; the connection is closed then.
        """
        try:
            self.core.check(await self.request(Hello(id=self.core.next_id(), token=token), timeout))
        except BaseException:
            if not self.closed:
                with io.shielded():
                    await self.aclose()
            raise

    # --- leases ------------------------------------------------------------------------------

    def hold(self, name: str, lease: float | None, by: object, seat: bool = False) -> None:
        """Hold session `name` (`seat`: the seat whose key `name` is) under a lease.

        The lease keeper renews it from now on, while `by` lives and unless `keep_alive` is
        off; a lease of None (the server does not lease it) holds nothing.

        Args:
            name: The session's id, or the seat's key.
            lease: The lease's length, as the server said (`opened`, `joined`).
            by: What holds it (the session's client): a session whose client was dropped
                without being closed is left to the server's lease.
            seat: `name` is a seat's key.
        """
        if lease is None or self.closed:
            return
        (self._seat_keys if seat else self._sessions)[name] = Held(lease, weakref.ref(by))
        if self.keep_alive:
            KEEPER.watch(self)

    def release(self, name: str) -> None:
        """Forget the session (or seat key) `name`: closed, or gone from the server.

        Args:
            name: The session's id, or the seat's key.
        """
        self._sessions.pop(name, None)
        self._seat_keys.pop(name, None)

    def leases(self) -> tuple[dict[str, float], dict[str, float]]:
        """What this connection holds under a lease, whose holders live.

        Returns:
            Its sessions and its seat keys, each with its lease's length in seconds.
        """
        return alive(self._sessions), alive(self._seat_keys)

    # --- requests ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self._closed:
            raise ConnectionLost("this connection is closed")

    async def _send(self, frame: Any) -> None:
        try:
            await self.channel.send(self.core.encode(frame))
        except ConnectionLost as exc:
            self._lost = exc
            raise

    async def _read_once(self, deadline: float | None, reader: Slot | None) -> None:
        """Read once from the channel; every answer in it goes to its owner.

        Raises:
            ConnectionLost: The connection broke (it stays lost).
        """
        try:
            messages = await self.channel.receive(deadline)
        except ConnectionLost as exc:
            self._lost = exc
            raise
        match, decode = self._match, self.decode
        for message in messages:
            match.deliver(decode(message), reader)

    async def request(self, frame: Any, timeout: float | None = None) -> Response:
        """Send one request frame and wait for its answer.

        Args:
            frame: A request frame (`ecotone.specs`), its `id` fresh.
            timeout: Seconds to wait for the answer (None: the connection's `timeout`).

        Returns:
            The answer, error frames included.

        Raises:
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: No answer within the timeout (its late answer will be dropped).
        """
        self._check()
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        rid = frame.id
        match = self._match
        slot = match.expect(rid)
        data = self.core.encode(frame)
        try:
            with io.bounded(deadline):
                try:
                    await self.channel.send(data)
                except ConnectionLost as exc:
                    self._lost = exc
                    raise
                while slot.response is None:
                    async with self._read_lock:
                        if slot.response is not None:
                            break
                        self._check()
                        await self._read_once(deadline, slot)
        except TimeoutError:
            match.abandon(rid)
            raise TimeoutError(
                f"no answer to {type(frame).__name__.lower()} within {timeout}s "
                "(its late answer will be ignored)"
            ) from None
        finally:
            match.forget(rid)
        return slot.response

    async def request_all(
        self,
        frames: Sequence[Any],
        timeout: float | None = None,
    ) -> list[Response]:
        """Send several request frames at once and wait for every answer.

        For requests the server answers together (a simultaneous round's moves of several
        seats, played on one connection): each waits for the others, so they cannot be sent
        one after another's answer.

        Args:
            frames: Request frames (`ecotone.specs`), their `id`s fresh.
            timeout: Seconds to wait for all the answers (None: the connection's `timeout`).

        Returns:
            The answers, in the order of `frames`, error frames included.

        Raises:
            ConnectionLost: The connection is closed, or broke.
            TimeoutError: Not every answer came within the timeout (late ones are dropped).
        """
        self._check()
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        match = self._match
        slots = [match.expect(frame.id) for frame in frames]
        try:
            with io.bounded(deadline):
                for frame in frames:
                    await self._send(frame)
                for slot in slots:
                    while slot.response is None:
                        async with self._read_lock:
                            if slot.response is not None:
                                break
                            self._check()
                            await self._read_once(deadline, slot)
        except TimeoutError:
            for frame, slot in zip(frames, slots, strict=True):
                if slot.response is None:
                    match.abandon(frame.id)
            raise TimeoutError(
                f"no answer to {len(frames)} requests within {timeout}s "
                "(their late answers will be ignored)"
            ) from None
        finally:
            for frame in frames:
                match.forget(frame.id)
        answers: list[Response] = []
        for slot in slots:
            assert slot.response is not None
            answers.append(slot.response)
        return answers

    # --- pipelining: send now, collect answers later -------------------------------------------

    async def send(self, frame: Any) -> None:
        """Send one request frame without waiting; its answer comes out of `poll`.

        Args:
            frame: A request frame (`ecotone.specs`), its `id` fresh.

        Raises:
            ConnectionLost: The connection is closed, or broke.
        """
        self._check()
        rid = frame.id
        self._match.detach(rid)
        try:
            await self._send(frame)
        except ConnectionLost:
            self._match.undetach(rid)
            raise

    async def poll(self, deadline: float | None = None) -> list[Response]:
        """Collect the answers to requests sent with `send`, as they arrive.

        Whatever is in already, else what the next reads bring. Cancelling it loses nothing.

        Args:
            deadline: When to give up, a `time.monotonic()` value (None: never).

        Returns:
            The answers, at least one; an error frame the server could not tie to a request
            has `id` None.

        Raises:
            TimeoutError: None arrived by `deadline`.
            ConnectionLost: The connection is closed, or broke.
        """
        match = self._match
        if not match.inbox:
            with io.bounded(deadline):
                while not match.inbox:
                    async with self._read_lock:
                        if match.inbox:
                            break
                        self._check()
                        await self._read_once(deadline, None)
        return match.take_inbox()

    async def poll_once(self, deadline: float | None = None) -> list[Response]:
        """Collect answers as `poll` does, reading at most once.

        For waiting on several connections at once, where one must not hold up the others.

        Args:
            deadline: When to give up the read, a `time.monotonic()` value (None: never).

        Returns:
            What is in already, else the answers one read brings, which may be none (a late
            answer dropped, a ping).

        Raises:
            TimeoutError: Nothing could be read by `deadline`.
            ConnectionLost: The connection is closed, or broke.
        """
        match = self._match
        if not match.inbox:
            with io.bounded(deadline):
                async with self._read_lock:
                    if not match.inbox:
                        self._check()
                        await self._read_once(deadline, None)
        return match.take_inbox()

    def abandon(self, rid: Any) -> None:
        """Stop waiting for a request sent with `send`: its late answer will be dropped.

        Args:
            rid: The request's id.
        """
        self._match.abandon(rid)

    @property
    def pending(self) -> int:
        """Requests sent with `send` whose answers have not arrived (nor been abandoned)."""
        return len(self._match.detached)

    @property
    def closed(self) -> bool:
        """Whether the connection is closed, or broke."""
        return self._closed or self._lost is not None

    def fileno(self) -> int | None:
        """Give the socket's file descriptor, for `select`.

        Returns:
            The descriptor, or None when the channel has none (HTTP, inproc).
        """
        channel = self.channel
        fileno = getattr(channel, "fileno", None)
        if callable(fileno):
            fd = fileno()
            return None if fd is None else int(fd)
        sock = getattr(channel, "sock", None) or getattr(channel, "_sock", None)
        return sock.fileno() if sock is not None else None

    async def aclose(self) -> None:
        """Close the connection (the server closes its sessions with it). Idempotent."""
        if not self._closed:
            self._closed = True
            KEEPER.forget(self)
            with io.shielded():
                await self.channel.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
