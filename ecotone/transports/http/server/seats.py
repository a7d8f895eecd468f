"""A multi-agent session's seats over HTTP, where the seat key is the capability.

Routes (`SeatRoutes.install`; the frames are the engine's, docs/multi-agent.md):

* `GET /v1/sessions/{id}/seats`: the session's seat keys and spectator key (`seat_keys`),
  for its owner only, as every `/v1/sessions/{id}/...` route.
* `POST /v1/seats/{key}/join`: take the key's seat (or watch, with the spectator key):
  `joined`. Every route below joins on the key's first use, so this one is optional.
* `GET /v1/seats/{key}`: the seat's own view (`seat_view`; the spectator key's: the public
  view), with an `ETag`. `?wait=1` waits until it is the seat's turn or the episode ends
  (the spectator's: until the next move), for at most `timeout` seconds (`?timeout=`,
  default `WAIT_SECONDS`, at most `MAX_WAIT_SECONDS`); when the bound passes first, the
  answer is the view as it is then, whose `turn` says it is still another's. With
  `If-None-Match` naming the ETag of the view the client has, a view that differs is
  answered at once: a client that follows the game misses no move made between its
  requests.
* `POST /v1/seats/{key}/play` with `{"action": ...}`: the seat's move, answered with its
  view; out of turn is `not_your_turn` (409), a spectator's move `forbidden` (403).
* `GET /v1/seats/{key}/render`: the env's picture for that seat (`rendered`; the spectator
  key's: the public picture).
* `POST /v1/seats/{key}/leave`: let the seat go (a page sends it as a beacon when it closes).
* `POST /v1/seats/{key}/keepalive`: renew the seat's lease and its session's (the engine's
  `keepalive`, naming both): `{"seat", "lease", "held"}`. A seat's page sends it every third
  of the lease while it is open, so a person thinking longer than the lease keeps the seat.
* `GET /v1/seats/{key}/trajectory`: the episode so far as the key's seat saw it, as JSON
  Lines in `ecotone.recording`'s format (`trajectories.py`): its own moves and its own
  views, never another seat's (the spectator key's: the public views).

Rules:

* **Each key's requests act as one holder of their own**: an engine `Owner` made on the
  key's first use and joined with it, never the session's owner, whoever sends them; no two
  keys share a holder. So a seat's key reads its own view only and the spectator key the
  public one; what the engine refuses a holder (another seat's view: `forbidden`; the
  session's state, reset or close: `unknown_session`) is refused here.
* **Answers leave the session's id out**, the `session` field and any mention in a
  message: over HTTP the id is the owner's handle (on a server without tokens, every
  request naming it acts as the owner), so a player must never learn it.
* **A key joined over HTTP holds its seat until `leave` or the session's end**: meanwhile
  a connection joining with the same key is `seat_taken`. The seat is leased as a
  connection's: each request of the key renews the lease, as does `keepalive`; a key silent
  past the lease loses the seat (its next request takes it back, when nobody else did).
  After `leave` the seat is held for the key as for a connection that dropped (for the rest
  of its lease, then the env's `seat_lost`), and the key's next use takes it back.
* Errors are the engine's frames with the statuses of the other routes (`unknown_seat_key`
  404, `seat_taken` and `not_your_turn` 409, `forbidden` 403, `invalid_action` 422).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from typing import Any

import attrs
import msgspec
import trio

from ecotone.kernel import Owner
from ecotone.server.http11.refusals import error_response
from ecotone.server.http11.router import Router
from ecotone.server.runner import Runner
from ecotone.specs import (
    Error,
    ErrorCode,
    Join,
    Joined,
    JsonCodec,
    Keepalive,
    Kept,
    Observe,
    Play,
    Render,
    Response,
    Seats,
    SeatView,
)
from ecotone.specs.errors import HTTP_STATUS
from ecotone.specs.http import HttpRequest, HttpResponse, json_response
from ecotone.transports.http.server.trajectories import trajectory_lines
from ecotone.transports.websocket.server.plain import frame_response

WAIT_SECONDS = 25.0
"""How long `GET /v1/seats/{key}?wait=1` waits by default for the seat's turn (below the
idle timeouts of common proxies)."""
MAX_WAIT_SECONDS = 60.0
"""The longest wait a request may ask for (`?timeout=`)."""
HIDDEN = b"(hidden)"
"""What a message's mention of the session's id becomes in a seat's answer."""


@attrs.define(slots=True, eq=False)
class Holder:
    """The requests of one seat key: who they act as, in which session and seat."""

    owner: Owner
    session: str
    joined: Joined
    """The `joined` answer of the key's first use (what `join` answers again)."""


def _wait_seconds(request: HttpRequest) -> float | HttpResponse | None:
    """How long a view request waits: None when it does not (`wait` absent, 0 or false);
    a 422 frame for a `wait` or `timeout` that is not understood."""
    wait = request.query.get("wait", "0").lower()
    if wait in ("", "0", "false", "no"):
        return None
    if wait not in ("1", "true", "yes"):
        return error_response(
            ErrorCode.INVALID_ARGUMENT, "`wait` must be 1 or 0 (true or false)", field="wait"
        )
    given = request.query.get("timeout")
    if given is None:
        return WAIT_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # nan fails too
        return error_response(
            ErrorCode.INVALID_ARGUMENT,
            f"`timeout` must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}",
            field="timeout",
        )
    return seconds


BodyReader = Callable[[HttpRequest, bool], "dict[str, Any] | HttpResponse"]
"""Reads a request's JSON object body (required or not), or refuses it (`HttpServer`'s)."""


class SeatRoutes:
    """The seat routes of one HTTP server (see the module's rules). `owner_for` gives the
    owner a request acts as on the session routes (the owner's keys); `read_body` reads a
    JSON body as the server's other routes do."""

    def __init__(
        self, runner: Runner, owner_for: Callable[[HttpRequest], Owner], read_body: BodyReader
    ) -> None:
        self.runner = runner
        self.engine = runner.engine
        self.owner_for = owner_for
        self.read_body = read_body
        self.json = JsonCodec()
        self._holders: dict[str, Holder] = {}
        """Seat key -> its holder, while its session is open and the key has not left."""
        self._joining = trio.Lock()
        """Held while a key is looked up and joined: a key's first two requests at once
        make one holder, not a holder and a `seat_taken`."""
        self._ids = itertools.count(1)

    def install(self, router: Router) -> None:
        router.add(r"/v1/sessions/(?P<sid>[^/]+)/seats", GET=self.keys)
        router.add(r"/v1/seats/(?P<key>[^/]+)", GET=self.view)
        router.add(r"/v1/seats/(?P<key>[^/]+)/join", POST=self.join)
        router.add(r"/v1/seats/(?P<key>[^/]+)/play", POST=self.play)
        router.add(r"/v1/seats/(?P<key>[^/]+)/render", GET=self.render)
        router.add(r"/v1/seats/(?P<key>[^/]+)/leave", POST=self.leave)
        router.add(r"/v1/seats/(?P<key>[^/]+)/keepalive", POST=self.keepalive)
        router.add(r"/v1/seats/(?P<key>[^/]+)/trajectory", GET=self.trajectory)

    # --- holders ------------------------------------------------------------------------------

    def _live(self, holder: Holder) -> bool:
        return self.engine.seated_session(holder.session, holder.owner) is not None

    def _forget(self, key: str) -> None:
        holder = self._holders.pop(key, None)
        if holder is not None:  # its seat is held for the key, as a dropped connection's
            self.runner.disconnect(holder.owner, "left")

    async def _holder(self, key: str, request: HttpRequest) -> Holder | HttpResponse:
        """The key's holder, joined on its first use (again once its session is gone: then
        `unknown_seat_key`), or the refusal of the join as an answer."""
        async with self._joining:
            found = self._holders.get(key)
            if found is not None and self._live(found):
                return found
            for stale in [k for k, h in self._holders.items() if not self._live(h)]:
                self._forget(stale)
            owner = self.engine.owner(authenticated=True, principal=request.principal)
            answer = await self._ask(owner, Join(id=next(self._ids), key=key))
            if not isinstance(answer, Joined):
                self.runner.disconnect(owner, "refused")
                return self._answer(answer)
            holder = self._holders[key] = Holder(owner, answer.session, answer)
            return holder

    async def _ask(self, owner: Owner, frame: Any) -> Response:
        return await self.runner.ask(owner, self.json, frame)

    def _answer(self, frame: Response) -> HttpResponse:
        """A frame as a seat's answer: without the session's id (the module's rules), and with
        a view's `seat`, `turn` and `lost` even when null or empty."""
        status = HTTP_STATUS.get(frame.code, 400) if isinstance(frame, Error) else 200
        data = msgspec.json.decode(self.json.encode(frame))
        session = data.pop("session", None)
        if isinstance(frame, SeatView | Joined):  # spelt out, where a frame omits defaults
            data.setdefault("seat", None)
        if isinstance(frame, SeatView):
            data.setdefault("turn", None)
            data.setdefault("lost", [])
        rid = data.pop("id", None)
        same = msgspec.json.encode(data)  # what a view is, whichever request it answers
        data["id"] = rid
        body = msgspec.json.encode(data)
        if session:
            same = same.replace(str(session).encode(), HIDDEN)
            body = body.replace(str(session).encode(), HIDDEN)
        headers = [("cache-control", "no-store")]
        if isinstance(frame, SeatView):
            headers.append(("etag", f'"{hashlib.blake2b(same, digest_size=12).hexdigest()}"'))
        return HttpResponse(status, body, headers=headers)

    # --- routes -------------------------------------------------------------------------------

    async def keys(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """The owner's `seats`: the keys, as any frame of the session's routes."""
        frame = Seats(id=next(self._ids), session=params["sid"])
        return frame_response(self.json, await self._ask(self.owner_for(request), frame))

    async def join(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        holder = await self._holder(params["key"], request)
        if isinstance(holder, HttpResponse):
            return holder
        return self._answer(holder.joined)

    async def view(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        seconds = _wait_seconds(request)
        if isinstance(seconds, HttpResponse):
            return seconds
        holder = await self._holder(params["key"], request)
        if isinstance(holder, HttpResponse):
            return holder
        if seconds is not None:
            return await self._wait(holder, seconds, request.headers.get("if-none-match"))
        now = Observe(id=next(self._ids), session=holder.session)
        return self._answer(await self._ask(holder.owner, now))

    async def _wait(self, holder: Holder, seconds: float, seen: str | None) -> HttpResponse:
        """A waiting view (the engine's `observe` with `wait`), within `seconds`. With `seen`
        (an ETag of a view the client has), a view that differs from it is answered at once:
        the look and the wait are sent together, so no move between two requests of a
        client is missed."""
        look = Observe(id=next(self._ids), session=holder.session)
        wait = Observe(id=next(self._ids), session=holder.session, wait=True)
        arrived = trio.Event()

        async def wake(peer: Any) -> None:
            arrived.set()

        peer = self.engine.peer(self.json, holder.owner, sink=wake, frames=True)
        try:
            for frame in (look, wait) if seen else (wait,):
                calls = peer.submit(frame)
                if calls:
                    self.runner.start(calls)
            await self.runner.flush()
            first: HttpResponse | None = None
            if seen:
                while not peer.outbox:
                    await arrived.wait()
                    arrived = trio.Event()
                first = self._answer(peer.take()[0])  # taken: the next answer wakes us
                if ("etag", seen) not in first.headers:  # changed, or an error
                    return first
            with trio.move_on_after(seconds):
                while not peer.outbox:
                    await arrived.wait()
                    arrived = trio.Event()
                return self._answer(peer.outbox[0])
        finally:
            peer.close()
        if first is not None:
            return first
        now = Observe(id=next(self._ids), session=holder.session)
        return self._answer(await self._ask(holder.owner, now))

    async def play(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = self.read_body(request, True)
        if isinstance(body, HttpResponse):
            return body
        if set(body) != {"action"}:
            return error_response(
                ErrorCode.INVALID_FRAME, 'the body must be {"action": ...}', field="action"
            )
        holder = await self._holder(params["key"], request)
        if isinstance(holder, HttpResponse):
            return holder
        action = msgspec.Raw(msgspec.json.encode(body["action"]))
        frame = Play(id=next(self._ids), session=holder.session, action=action)
        return self._answer(await self._ask(holder.owner, frame))

    async def render(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        holder = await self._holder(params["key"], request)
        if isinstance(holder, HttpResponse):
            return holder
        frame = Render(id=next(self._ids), session=holder.session)
        return self._answer(await self._ask(holder.owner, frame))

    async def keepalive(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """Renew the seat's lease and its session's, taking the seat back first if its lease
        ran out meanwhile (as any request of the key does): `{"seat", "lease", "held"}`
        (`held`: the seat's lease was renewed; a spectator's is always false)."""
        key = params["key"]
        holder = await self._holder(key, request)
        if isinstance(holder, HttpResponse):
            return holder
        seat = holder.joined.seat
        frame = Keepalive(
            id=next(self._ids), sessions=[holder.session], seats=[] if seat is None else [key]
        )
        answer = await self._ask(holder.owner, frame)
        if not isinstance(answer, Kept):
            return self._answer(answer)
        held = seat is not None and not answer.unknown
        body = {"seat": seat, "lease": answer.lease, "held": held}
        return json_response(200, body, [("cache-control", "no-store")])

    async def trajectory(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """The episode so far as the key's seat saw it (`trajectories.py`), as a download."""
        holder = await self._holder(params["key"], request)
        if isinstance(holder, HttpResponse):
            return holder
        found = self.engine.seat_trajectory(holder.session, holder.owner)
        if isinstance(found, Error):
            return self._answer(found)
        seat, events = found
        env = holder.joined.env
        try:
            body = trajectory_lines(env, seat, events)
        except (TypeError, msgspec.EncodeError) as exc:
            return error_response(
                ErrorCode.ENV_ERROR, f"environment {env!r}: a view cannot be encoded: {exc}"
            )
        body = body.replace(holder.session.encode(), HIDDEN)
        name = "".join(
            c if c.isalnum() or c in "-_." else "_" for c in f"{env}-{seat or 'spectator'}"
        )
        headers = [
            ("cache-control", "no-store"),
            ("content-disposition", f'attachment; filename="{name}.jsonl"'),
        ]
        return HttpResponse(200, body, "application/x-ndjson", headers)

    async def leave(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        """Let the seat go (held for the key as a dropped connection's); `left` says whether
        these routes held it."""
        async with self._joining:
            held = params["key"] in self._holders
            self._forget(params["key"])
        return json_response(200, {"left": held})
