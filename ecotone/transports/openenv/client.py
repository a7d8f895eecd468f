"""Drive an OpenEnv server with ecotone's clients: `openenv+http://HOST:PORT` (or
`openenv+ws://`; over TLS, `openenv+https://` or `openenv+wss://`, trusting the system's
certificates or `$ECOTONE_CA_BUNDLE`, as `wss://` does).

The channel translates ecotone frames into OpenEnv's `/ws` messages and back
(`ecotone.compat.openenv.translator`), so the whole client API (typed results,
`InvalidActionError.field`, timeouts, several sessions, async under trio or asyncio) works
against the many environments published for OpenEnv. OpenEnv speaks one session per
WebSocket, so each `open` makes a new socket; `describe` reads `/metadata` and `/schema` over
HTTP.

OpenEnv's messages carry no request ids: if a call on a session times out, that session's
socket is dropped (its late answer would otherwise be taken for the next one's), and the
session is gone, which the next call reports as `unknown_session`.
"""

from __future__ import annotations

import collections
import http.client
import json
import uuid
from typing import Any

import anyio
import anyio.to_thread

from ecotone.client._async.websocket import AsyncWsChannel as WsAsyncChannel
from ecotone.client._core import parse_url
from ecotone.client._sync.websocket import WsChannel as WsSyncChannel
from ecotone.client.errors import ConnectionLost, EcotoneError
from ecotone.client.tls import client_context
from ecotone.compat.openenv.translator import Translator
from ecotone.specs import (
    Close,
    Closed,
    Describe,
    Described,
    EnvInfo,
    Error,
    ErrorCode,
    ObservationFrame,
    Open,
    Request,
    Response,
    Step,
    StepMany,
    StepManyResult,
)


def _ws_url(host: str, port: int, base: str, tls: bool) -> str:
    """The URL of an OpenEnv server's `/ws` (an IPv6 host in brackets)."""
    where = f"[{host}]" if ":" in host else host
    return f"{'wss' if tls else 'ws'}://{where}:{port}{base}/ws"


def _describe(
    host: str, port: int, base: str, timeout: float, token: str | None, tls: bool = False
) -> EnvInfo:
    conn: http.client.HTTPConnection
    if tls:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=client_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        docs: dict[str, Any] = {}
        for path in ("metadata", "schema"):
            conn.request("GET", f"{base}/{path}", headers=headers)
            response = conn.getresponse()
            body = response.read()
            docs[path] = json.loads(body) if response.status == 200 else {}
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ConnectionLost(f"cannot read /metadata and /schema: {exc}") from exc
    finally:
        conn.close()
    meta, schema = docs["metadata"], docs["schema"]
    return EnvInfo(
        name=str(meta.get("name", "openenv")),
        description=str(meta.get("description") or ""),
        version=str(meta.get("version") or ""),
        action_schema=schema.get("action", {}),
        observation_schema=schema.get("observation", {}),
        state_schema=schema.get("state", {}),
    )


class OpenEnvSyncChannel:
    """Blocking; one WebSocket per session, read only while a call waits (no thread)."""

    def __init__(
        self, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> None:
        ep = parse_url(url)
        self.token = token
        self.tls = ep.scheme in ("openenv+https", "openenv+wss")
        self.host, self.port = ep.host, ep.port
        self.base = ep.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.t = Translator(codec)
        self.sockets: dict[str, WsSyncChannel] = {}
        self.pending: collections.deque[tuple[Request, list[str]]] = collections.deque()
        self.ready: list[bytes | str] = []

    def _reply(self, response: Response) -> None:
        self.ready.append(self.t.codec.encode(response))

    def send(self, data: bytes) -> None:
        t = self.t
        frame = t.decode(data)
        if isinstance(frame, Error):
            self._reply(frame)
            return
        local = t.local(frame)
        if local is not None:
            self._reply(local)
            return
        if isinstance(frame, Describe):
            info = _describe(
                self.host, self.port, self.base, self.connect_timeout, self.token, self.tls
            )
            self._reply(Described(id=frame.id, info=info))
            return
        if isinstance(frame, Open):
            session = uuid.uuid4().hex[:16]
            opened = WsSyncChannel.open(
                _ws_url(self.host, self.port, self.base, self.tls),
                "json",
                self.connect_timeout,
                negotiate=False,
                token=self.token,
            )
            self.sockets[session] = opened
            opened.send(t.message(frame))  # a state probe: capacity errors surface at open
            self.pending.append((frame, [session]))
            return
        if isinstance(frame, StepMany):
            sessions = [item.session for item in frame.steps]
            missing = [s for s in sessions if s not in self.sockets]
            if missing:
                self._reply(
                    t.error(frame, ErrorCode.UNKNOWN_SESSION, f"no open session {missing[0]!r}")
                )
                return
            for item in frame.steps:
                step = Step(id=frame.id, session=item.session, action=item.action)
                self.sockets[item.session].send(t.message(step))
            self.pending.append((frame, sessions))
            return
        session = getattr(frame, "session", "")
        sock = self.sockets.get(session)
        if sock is None:
            self._reply(
                t.error(
                    frame,
                    ErrorCode.UNKNOWN_SESSION,
                    f"no open session {session!r} (closed, or dropped after a timeout)",
                )
            )
            return
        sock.send(t.message(frame))
        if isinstance(frame, Close):  # OpenEnv answers a close by closing
            self.sockets.pop(session).close()
            self._reply(Closed(id=frame.id, session=session))
            return
        self.pending.append((frame, [session]))

    def _read_one(self, session: str, deadline: float | None) -> bytes | str:
        sock = self.sockets[session]
        try:
            while True:
                messages = sock.receive(deadline)
                if messages:
                    return messages[0]
        except TimeoutError:
            self.sockets.pop(session).close()  # no ids in OpenEnv: this socket is unusable
            raise
        except (ConnectionLost, EcotoneError):
            self.sockets.pop(session, None)
            raise

    def receive(self, deadline: float | None) -> list[bytes | str]:
        t = self.t
        while self.pending and not self.ready:
            frame, sessions = self.pending[0]
            try:
                if isinstance(frame, StepMany):
                    results: list[ObservationFrame | Error] = []
                    for item in frame.steps:
                        step = Step(id=frame.id, session=item.session, action=item.action)
                        answer = t.answer(
                            step, item.session, self._read_one(item.session, deadline)
                        )
                        assert isinstance(answer, ObservationFrame | Error)
                        results.append(answer)
                    self._reply(StepManyResult(id=frame.id, results=results))
                else:
                    answer = t.answer(frame, sessions[0], self._read_one(sessions[0], deadline))
                    if isinstance(frame, Open) and isinstance(answer, Error):
                        self.sockets.pop(sessions[0]).close()
                    self._reply(answer)
            except ConnectionLost as exc:
                self._reply(t.error(frame, ErrorCode.UNKNOWN_SESSION, f"session lost: {exc}"))
            finally:
                self.pending.popleft()
        if not self.ready:
            raise TimeoutError
        out, self.ready = self.ready, []
        return out

    def close(self) -> None:
        for sock in self.sockets.values():
            try:
                sock.send(b'{"type":"close"}')
            except ConnectionLost:
                pass
            sock.close()
        self.sockets.clear()


class OpenEnvAsyncChannel:
    """Async (trio or asyncio): each call makes its round trip on its session's socket."""

    def __init__(
        self, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> None:
        ep = parse_url(url)
        self.token = token
        self.tls = ep.scheme in ("openenv+https", "openenv+wss")
        self.host, self.port = ep.host, ep.port
        self.base = ep.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.t = Translator(codec)
        self.sockets: dict[str, WsAsyncChannel] = {}
        self.locks: dict[str, anyio.Lock] = {}
        self._out: list[bytes | str] = []
        self._arrived = anyio.Event()

    @classmethod
    async def open(
        cls, url: str, codec: str, connect_timeout: float, token: str | None = None
    ) -> OpenEnvAsyncChannel:
        return cls(url, codec, connect_timeout, token)

    async def _roundtrip(self, frame: Request, session: str) -> Response:
        sock = self.sockets.get(session)
        if sock is None:
            return self.t.error(
                frame,
                ErrorCode.UNKNOWN_SESSION,
                f"no open session {session!r} (closed, or dropped after a timeout)",
            )
        async with self.locks[session]:
            try:
                await sock.send(self.t.message(frame))
                if isinstance(frame, Close):
                    self.sockets.pop(session, None)
                    await sock.aclose()
                    return Closed(id=frame.id, session=session)
                while True:
                    messages = await sock.receive()
                    if messages:
                        return self.t.answer(frame, session, messages[0])
            except ConnectionLost as exc:
                self.sockets.pop(session, None)
                return self.t.error(frame, ErrorCode.UNKNOWN_SESSION, f"session lost: {exc}")
            except BaseException:
                # Cancelled or timed out mid-call: OpenEnv has no request ids, so this
                # socket's next message could be this call's late answer. Drop it.
                self.sockets.pop(session, None)
                with anyio.CancelScope(shield=True):
                    await sock.aclose()
                raise

    async def _handle(self, frame: Request) -> Response:
        local = self.t.local(frame)
        if local is not None:
            return local
        if isinstance(frame, Describe):
            info = await anyio.to_thread.run_sync(
                _describe,
                self.host,
                self.port,
                self.base,
                self.connect_timeout,
                self.token,
                self.tls,
            )
            return Described(id=frame.id, info=info)
        if isinstance(frame, Open):
            session = uuid.uuid4().hex[:16]
            sock = await WsAsyncChannel.open(
                _ws_url(self.host, self.port, self.base, self.tls),
                "json",
                self.connect_timeout,
                negotiate=False,
                token=self.token,
            )
            self.sockets[session] = sock
            self.locks[session] = anyio.Lock()
            answer = await self._roundtrip(frame, session)
            if isinstance(answer, Error):
                self.sockets.pop(session, None)
                await sock.aclose()
            return answer
        if isinstance(frame, StepMany):
            results: list[Any] = [None] * len(frame.steps)

            async def one(index: int, session: str, action: Any) -> None:
                step = Step(id=frame.id, session=session, action=action)
                results[index] = await self._roundtrip(step, session)

            async with anyio.create_task_group() as tg:
                for index, item in enumerate(frame.steps):
                    tg.start_soon(one, index, item.session, item.action)
            return StepManyResult(id=frame.id, results=results)
        return await self._roundtrip(frame, getattr(frame, "session", ""))

    async def send(self, data: bytes) -> None:
        frame = self.t.decode(data)
        answer = frame if isinstance(frame, Error) else await self._handle(frame)
        self._out.append(self.t.codec.encode(answer))
        self._arrived.set()

    async def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while not self._out:
            await self._arrived.wait()
            self._arrived = anyio.Event()
        out, self._out = self._out, []
        return out

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for sock in list(self.sockets.values()):
                try:
                    await sock.send(b'{"type":"close"}')
                except ConnectionLost:
                    pass
                await sock.aclose()
        self.sockets.clear()


class OpenEnvChannels:
    """Opens channels to OpenEnv servers (openenv+ws://, openenv+http:// and their TLS forms)."""

    def open(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> OpenEnvSyncChannel:
        return OpenEnvSyncChannel(url, codec, connect_timeout, token)

    async def aopen(
        self, url: str, codec: str, connect_timeout: float, token: str | None
    ) -> OpenEnvAsyncChannel:
        return await OpenEnvAsyncChannel.open(url, codec, connect_timeout, token)
