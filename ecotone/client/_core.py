"""The sans-IO heart of every client: ids, frames, typed decoding, request matching.

Both faces of the client (blocking and async, one generated from the other) are thin loops
around these: `ClientCore` makes request frames with fresh ids and turns response frames into
results; `Matcher` hands each received answer to whoever waits for it, by request id:

* a request waiting for its answer (`expect`) gets it in its `Slot`;
* a request sent without waiting (`detach`: pipelining) has its answer queued in `inbox`;
* an answer nobody waits for any more (`abandon`: its request timed out or was cancelled) is
  dropped, so a late answer is never mistaken for a later request's;
* an error frame the server could not tie to a request (id null) goes to the reader that
  received it if that reader still waits, else to `inbox`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any, Final, TypedDict
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from ecotone.client.errors import ServerError
from ecotone.client.results import StepResult, Task, Tasks
from ecotone.specs import (
    Codec,
    Error,
    ObservationFrame,
    Response,
    StateFrame,
    TaskAnswer,
    TaskPage,
    TaskRef,
    codec_for,
)


@attrs.frozen(slots=True)
class Endpoint:
    """A parsed server URL."""

    scheme: str
    host: str
    port: int
    path: str


TOKEN_ENV: Final = "ECOTONE_TOKEN"
"""The environment variable a client reads its server's token from when given none."""


class ConnectOptions(TypedDict, total=False):
    """The keyword options of `ecotone.connect` and `ecotone.aconnect`, each optional."""

    observation_type: Any
    """Decode observations into this type (a msgspec Struct, a dataclass...); dicts if None."""
    state_type: Any
    """Decode states into this type; dicts if None."""
    codec: str
    """`json` (the default) or `msgpack`."""
    timeout: float | None
    """The default per-call timeout in seconds (`DEFAULT_TIMEOUT`, 60; None: none)."""
    connect_timeout: float
    """Seconds to connect and shake hands (10)."""
    token: str | None
    """For a server that requires one (else `?token=` in the URL, else `$ECOTONE_TOKEN`)."""
    keepalive: bool
    """Let the process's lease keeper renew the session's lease while it sits idle (True,
    the default); False: the server reclaims it once idle for its lease
    (`ecotone.client.keeper`)."""
    resume: bool
    """`connect` only: resume the session on a server restarted on the same checkpoint
    directory when the connection breaks (docs/snapshots.md)."""
    checkpoint_every: int | None
    """With `resume`: ask for a checkpoint every this many steps (None: only at shutdown)."""
    resume_timeout: float
    """With `resume`: seconds to keep trying to reconnect (60)."""


SESSION_OPTIONS: Final = frozenset({"observation_type", "state_type"})
"""Those of `ConnectOptions` that are the session's (`open`); the rest are the connection's."""


def split_options(
    options: Mapping[str, Any], name: str = "connect"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`options` (`ConnectOptions`) as the connection's (`open_url`) and the session's
    (`open`); each takes its own defaults for those not given. TypeError names one that is
    not an option, as Python does for a function `name` without it."""
    for key in options:
        if key not in ConnectOptions.__optional_keys__:
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
    connecting = {k: v for k, v in options.items() if k not in SESSION_OPTIONS}
    opening = {k: v for k, v in options.items() if k in SESSION_OPTIONS}
    return connecting, opening


def credentials(url: str, token: str | None = None) -> tuple[str, str | None]:
    """`url` without its `?token=` and the token to show the server: the one given, else
    the URL's, else `$ECOTONE_TOKEN` (None: none). The token leaves the URL so that it is
    sent in a header (or `hello`) and never shows in a repr or a log line."""
    found: str | None = None
    if "token=" in url and "?" in url:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        rest = [(k, v) for k, v in query if k != "token"]
        if len(rest) != len(query):
            found = next(v for k, v in reversed(query) if k == "token") or None
            url = urlunsplit(parts._replace(query=urlencode(rest)))
    return url, token or found or os.environ.get(TOKEN_ENV) or None


def parse_url(url: str) -> Endpoint:
    parts = urlsplit(url)
    if parts.scheme not in (
        "ws",
        "wss",
        "http",
        "https",
        "openenv+ws",
        "openenv+http",
        "openenv+wss",
        "openenv+https",
    ):
        raise ValueError(
            f"unsupported URL {url!r}: expected ws://HOST:PORT (or inproc://ENV for an "
            "in-process engine)"
        )
    if not parts.hostname:
        raise ValueError(f"URL {url!r} has no host")
    secure = parts.scheme in ("wss", "https", "openenv+wss", "openenv+https")
    port = parts.port or (443 if secure else 80)
    return Endpoint(parts.scheme, parts.hostname, port, parts.path or "/")


class Slot:
    """Where a waiting request's answer lands."""

    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: Response | None = None


class Matcher:
    """Which answer goes where, for one connection (see the module docstring)."""

    __slots__ = ("abandoned", "detached", "inbox", "waiting")

    def __init__(self) -> None:
        self.waiting: dict[Any, Slot] = {}
        self.detached: set[Any] = set()
        self.inbox: list[Response] = []
        self.abandoned: set[Any] = set()

    def expect(self, rid: Any) -> Slot:
        slot = self.waiting[rid] = Slot()
        return slot

    def forget(self, rid: Any) -> None:
        """The waiting request is done (answered, timed out or cancelled)."""
        self.waiting.pop(rid, None)

    def detach(self, rid: Any) -> None:
        self.detached.add(rid)

    def undetach(self, rid: Any) -> None:
        """A detached request was never sent after all."""
        self.detached.discard(rid)

    def abandon(self, rid: Any) -> None:
        """Stop waiting for `rid`: its answer, when it comes, is dropped (if it came already
        and waits in the inbox, it is removed)."""
        if rid in self.detached:
            self.detached.discard(rid)
            self.abandoned.add(rid)
        elif rid in self.waiting:
            self.abandoned.add(rid)
        else:
            self.inbox = [r for r in self.inbox if r.id != rid]

    def deliver(self, response: Response, reader: Slot | None) -> None:
        """Route one received answer; `reader` is the slot of the request whose caller read it
        (None when reading for detached requests)."""
        rid = response.id
        slot = self.waiting.get(rid)
        if slot is not None:
            held = slot.response
            if held is not None and held.id is None:  # an id-less error, not this one's
                self.inbox.append(held)
            slot.response = response
        elif rid in self.detached:
            self.detached.discard(rid)
            self.inbox.append(response)
        elif rid is None and isinstance(response, Error):
            if reader is not None and reader.response is None:
                reader.response = response  # an error not tied to an id: the reader's
            else:
                self.inbox.append(response)
        else:
            self.abandoned.discard(rid)

    def take_inbox(self) -> list[Response]:
        out, self.inbox = self.inbox, []
        return out


@attrs.define(slots=True)
class EnvTypes:
    """The env types a client decodes into; None means plain data."""

    observation: Any = None
    state: Any = None


class ClientCore:
    """Frames, ids and decoding for one client connection."""

    def __init__(self, codec: str = "json") -> None:
        self.codec: Codec = codec_for(codec)
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def encode(self, frame: Any) -> bytes:
        return self.codec.encode(frame)

    def decode(self, data: bytes | str) -> Response:
        return self.codec.decode_response(data)  # type: ignore[arg-type]

    def raw(self, value: Any) -> Any:
        return self.codec.raw(value)

    def check(self, response: Response) -> Response:
        if isinstance(response, Error):
            raise ServerError.from_frame(response)
        return response

    def step_result(self, response: Response, types: EnvTypes) -> StepResult[Any]:
        response = self.check(response)
        if not isinstance(response, ObservationFrame):
            raise ServerError("internal", f"expected an observation, got {type(response)}")
        return self.observation(response.observation, types, response.task)

    def observation(
        self, raw: Any, types: EnvTypes, task: TaskRef | None = None
    ) -> StepResult[Any]:
        if types.observation is not None:
            obs = self.codec.decode_as(raw, types.observation)
            return StepResult(
                observation=obs,
                reward=getattr(obs, "reward", None),
                done=bool(getattr(obs, "done", False)),
                truncated=bool(getattr(obs, "truncated", False)),
                task=task,
            )
        data = self.codec.decode_as(raw, dict[str, Any])
        return StepResult(
            observation=data,
            reward=data.get("reward"),
            done=bool(data.get("done", False)),
            truncated=bool(data.get("truncated", False)),
            task=task,
        )

    def tasks(self, response: Response) -> Tasks:
        response = self.check(response)
        if not isinstance(response, TaskPage):
            raise ServerError("internal", f"expected tasks, got {type(response)}")
        return Tasks(
            splits=response.splits,
            split=response.split,
            offset=response.offset,
            total=response.total,
            tasks=[self.codec.decode_as(raw, Any) for raw in response.tasks],
            ids=response.ids,
        )

    def task(self, response: Response) -> Task:
        response = self.check(response)
        if not isinstance(response, TaskAnswer):
            raise ServerError("internal", f"expected a task, got {type(response)}")
        return Task(ref=response.ref, task=self.codec.decode_as(response.task, Any))

    def state(self, response: Response, types: EnvTypes) -> Any:
        response = self.check(response)
        if not isinstance(response, StateFrame):
            raise ServerError("internal", f"expected a state, got {type(response)}")
        if types.state is not None:
            return self.codec.decode_as(response.state, types.state)
        return self.codec.decode_as(response.state, dict[str, Any])
