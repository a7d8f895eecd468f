# Generated from ecotone/transports/openenv/client/_async.py by scripts/unasync.py: do not edit.
"""Drive an OpenEnv server with ecotone's clients: `openenv+http://HOST:PORT` (or
`openenv+ws://`; over TLS, `openenv+https://` or `openenv+wss://`, trusting the system's
certificates or `$ECOTONE_CA_BUNDLE`, as `wss://` does).

The channel translates ecotone frames into OpenEnv's `/ws` messages and back
(`ecotone.compat.openenv.translator`), so the whole client API (typed results,
`InvalidActionError.field`, timeouts, several sessions, async under trio or asyncio) works
against the many environments published for OpenEnv. OpenEnv speaks one session per
WebSocket, so each `open` makes a new socket; `describe` reads `/metadata` and `/schema` over
HTTP.

OpenEnv's messages carry no request ids, but a socket's messages are answered in order: each
session keeps its requests in order (`asked`), and what comes next on its socket answers the
oldest. A call that times out leaves its request there, so its late answer, when it comes, is
read in its turn and dropped by id, as on every other transport (a session whose server is
stuck on a call keeps timing out until that call ends). A reader waits on every session with
a request out at once (`io.receive_any`), so a slow session holds up no other.
"""

from __future__ import annotations

import collections
import http.client
import json
import uuid
from typing import Any

from ecotone.client._sync import io
from ecotone.client._sync.websocket import WsChannel
from ecotone.client._core import parse_url
from ecotone.client.errors import ConnectionLost
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
    Open,
    Request,
    Response,
    Step,
    StepMany,
    StepManyResult,
)


class Batch:
    """A `step_many`'s answers as they come, one per item, in the items' order."""

    def __init__(self, frame: StepMany) -> None:
        self.frame = frame
        self.results: list[Any] = [None] * len(frame.steps)
        self.missing = len(frame.steps)

    def add(self, index: int, answer: Response) -> StepManyResult | None:
        """Item `index`'s answer; the whole answer once it was the last one missing."""
        self.results[index] = answer
        self.missing -= 1
        return None if self.missing else StepManyResult(id=self.frame.id, results=self.results)


class Session:
    """One OpenEnv session: its socket, and its requests still to be answered, oldest first
    (each with the batch it belongs to and its place there)."""

    def __init__(self, name: str, sock: WsChannel) -> None:
        self.name = name
        self.sock = sock
        self.asked: collections.deque[tuple[Request, Batch | None, int]] = collections.deque()

    @property
    def ready(self) -> bool:
        return self.sock.ready

    def fileno(self) -> int | None:
        return self.sock.fileno()

    def receive(self, deadline: float | None = None) -> list[bytes | str]:
        return self.sock.receive(deadline)


class OpenEnvChannel:
    """Ecotone frames to an OpenEnv server; answers come out of `receive` as they arrive.
    Frames answered without OpenEnv (hello, ping, errors, describe, close) are ready at once."""

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
        self.sessions: dict[str, Session] = {}
        self.ready: list[bytes | str] = []
        self._dropped: list[Session] = []  # forgotten; their sockets still to close
        self._sent = io.Wakeup()

    def _reply(self, response: Response) -> None:
        self.ready.append(self.t.codec.encode(response))

    def send(self, data: bytes) -> None:
        frame = self.t.decode(data)
        if isinstance(frame, Error):  # a frame this client could not have meant
            self._reply(frame)
            return
        local = self.t.local(frame)
        if local is not None:
            self._reply(local)
        elif isinstance(frame, Describe):
            info = io.run_blocking(
                _describe,
                self.host,
                self.port,
                self.base,
                self.connect_timeout,
                self.token,
                self.tls,
            )
            self._reply(Described(id=frame.id, info=info))
        elif isinstance(frame, Open):
            sock = WsChannel.open(
                _ws_url(self.host, self.port, self.base, self.tls),
                "json",
                self.connect_timeout,
                negotiate=False,
                token=self.token,
            )
            session = Session(uuid.uuid4().hex[:16], sock)
            self.sessions[session.name] = session
            self._ask(session, frame)  # a state probe: capacity errors show at open
        elif isinstance(frame, StepMany):
            self._step_many(frame)
        else:
            self._one(frame, getattr(frame, "session", ""))

    def _ask(
        self,
        session: Session,
        frame: Request,
        batch: Batch | None = None,
        index: int = 0,
    ) -> None:
        session.asked.append((frame, batch, index))
        try:
            session.sock.send(self.t.message(frame))
        except ConnectionLost as exc:  # the session's socket broke: not the other sessions'
            self._arrived(session, exc)
        self._sent.set()

    def _step_many(self, frame: StepMany) -> None:
        missing = [i.session for i in frame.steps if i.session not in self.sessions]
        if missing:
            message = f"no open session {missing[0]!r}"
            self._reply(self.t.error(frame, ErrorCode.UNKNOWN_SESSION, message))
            return
        batch = Batch(frame)
        for index, item in enumerate(frame.steps):
            step = Step(id=frame.id, session=item.session, action=item.action)
            self._ask(self.sessions[item.session], step, batch, index)

    def _one(self, frame: Request, name: str) -> None:
        session = self.sessions.get(name)
        if session is None:
            message = f"no open session {name!r} (closed, or its connection lost)"
            self._reply(self.t.error(frame, ErrorCode.UNKNOWN_SESSION, message))
        elif isinstance(frame, Close):  # OpenEnv answers a close by closing the socket
            try:
                session.sock.send(self.t.message(frame))
            except ConnectionLost:  # gone already: closed all the same
                pass
            self._lost(session, "the session closed before answering")
            self.sessions.pop(name, None)
            session.sock.close()
            self._reply(Closed(id=frame.id, session=name))
        else:
            self._ask(session, frame)

    def receive(self, deadline: float | None = None) -> list[bytes | str]:
        while not self.ready:
            waiting = [s for s in self.sessions.values() if s.asked]
            if not waiting:  # nothing asked: the blocking face raises TimeoutError
                self._sent.wait()
                continue
            io.receive_any(waiting, deadline, self._arrived, self._sent)
        while self._dropped:
            self._dropped.pop().sock.close()
        out, self.ready = self.ready, []
        return out

    def _arrived(self, session: Session, got: list[bytes | str] | ConnectionLost) -> None:
        """What one read of `session`'s socket brought: each message answers the oldest
        request still asked on it; a socket that broke answers them all as lost."""
        if isinstance(got, ConnectionLost):
            self._lost(session, f"session lost: {got}")
            self._drop(session)
            return
        for message in got[: len(session.asked)]:  # more: not answers (a close follows them)
            frame, batch, index = session.asked.popleft()
            answer = self.t.answer(frame, session.name, message)
            if isinstance(frame, Open) and isinstance(answer, Error):
                self._drop(session)
            self._answered(answer, batch, index)

    def _lost(self, session: Session, why: str) -> None:
        """Answer every request still asked on `session` with `unknown_session`."""
        while session.asked:
            frame, batch, index = session.asked.popleft()
            self._answered(self.t.error(frame, ErrorCode.UNKNOWN_SESSION, why), batch, index)

    def _answered(self, answer: Response, batch: Batch | None, index: int) -> None:
        whole = answer if batch is None else batch.add(index, answer)
        if whole is not None:
            self._reply(whole)

    def _drop(self, session: Session) -> None:
        """Forget `session`; its socket is closed by the next `receive` (or `close`)."""
        if self.sessions.pop(session.name, None) is not None:
            self._dropped.append(session)

    def close(self) -> None:
        with io.shielded():
            for session in [*self._dropped, *self.sessions.values()]:
                try:
                    session.sock.send(b'{"type":"close"}')
                except ConnectionLost:
                    pass
                session.sock.close()
        self._dropped.clear()
        self.sessions.clear()


def _ws_url(host: str, port: int, base: str, tls: bool) -> str:
    """The URL of an OpenEnv server's `/ws` (an IPv6 host in brackets)."""
    where = f"[{host}]" if ":" in host else host
    return f"{'wss' if tls else 'ws'}://{where}:{port}{base}/ws"


def _describe(
    host: str, port: int, base: str, timeout: float, token: str | None, tls: bool = False
) -> EnvInfo:
    """`/metadata` and `/schema` over plain blocking HTTP (the async face runs it in a worker
    thread); ConnectionLost if they cannot be read."""
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


def open_channel(
    url: str,
    codec: str,
    connect_timeout: float,
    token: str | None,
) -> OpenEnvChannel:
    """A channel for an openenv+ URL (it connects a socket per session, as they open)."""
    return OpenEnvChannel(url, codec, connect_timeout, token)
