"""The sans-IO heart of `VectorEnv` and `AsyncVectorEnv`: sub-envs, frames, autoreset, errors.

`VectorCore` decides what to send (a `step_many` per connection for a batched step, a `step`
per sub-env for `send`, `reset` / `open` / `close` frames) and what every answer means for the
sub-env it concerns, under the chosen autoreset mode and error policy. It owns no socket: the
blocking and the async vector envs are two small loops that move the frames it queues
(`take_outbox`) and hand back the answers (`on_response`), a dropped connection
(`on_link_lost`) or a passed deadline (`expire`).

A batched `step` is the hot path, so it is planned and answered per connection rather than per
sub-env: the items of a `step_many` are encoded in one pass, and an answer whose items are all
ordinary observations is taken in bulk (lists of observations and flags, no per-sub-env
`Outcome`). A sub-env gets its own `Outcome` only when something needs one: it is reset
instead of stepped, it failed, its episode ended under `same_step`, its request was lost or
timed out, or a recorder is on. The result of the call is the bulk rows, with those outcomes
laid over them.
"""

from __future__ import annotations

import collections
import struct
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Optional, Union

import msgspec
import numpy as np

from ecotone.client._core import EnvTypes
from ecotone.client.errors import ConnectionLost, EcotoneError, ServerError
from ecotone.client.results import StepResult
from ecotone.recording import ClientRecorder
from ecotone.specs import (
    Close,
    Closed,
    Described,
    Error,
    ErrorCode,
    Hello,
    Open,
    Opened,
    Pong,
    RequestId,
    Reset,
    ResetArgs,
    Response,
    StateFrame,
    Step,
    StepColumnsResult,
    StepManyResult,
    ToolResult,
    Tools,
    Welcome,
)
from ecotone.specs.frames import Frame, ObservationFrame

AutoresetMode = Literal["next_step", "same_step", "disabled"]
ErrorPolicy = Literal["raise", "info"]
AUTORESET_MODES: tuple[str, ...] = ("next_step", "same_step", "disabled")
ERROR_POLICIES: tuple[str, ...] = ("raise", "info")

_GYMNASIUM_MODES = {"NextStep": "next_step", "SameStep": "same_step", "Disabled": "disabled"}
"""`gymnasium.vector.AutoresetMode` values (the enum is accepted too), to ours."""

CONNECTION_LOST = "connection_lost"
TIMEOUT = "timeout"
CANCELLED = "cancelled"
BAD_OBSERVATION = "bad_observation"
"""A sub-env's failure code when the server's observation does not fit `observation_type`."""


# --- errors ------------------------------------------------------------------------------------


class SubEnvError(EcotoneError):
    """One or more sub-envs failed (with `errors="raise"`).

    `env_index` is the first failed sub-env and `cause` its exception (a `ServerError`,
    `ConnectionLost` or `TimeoutError`); `errors` maps every failed sub-env to its exception.
    `result` is what the call would have returned with `errors="info"` (the other sub-envs'
    results are in it: they did step), or None.
    """

    def __init__(self, errors: dict[int, BaseException], result: Any = None) -> None:
        self.errors = dict(sorted(errors.items()))
        self.env_index = next(iter(self.errors))
        self.cause = self.errors[self.env_index]
        self.result = result
        others = [str(i) for i in self.errors if i != self.env_index]
        more = (
            f" (and sub-env{'s' if len(others) > 1 else ''} {', '.join(others)})" if others else ""
        )
        super().__init__(f"sub-env {self.env_index} failed: {self.cause}{more if others else ''}")


class ObservationMismatch(EcotoneError, ValueError):
    """The server answered a sub-env with an observation that does not fit the vector env's
    `observation_type` (the message says where). Its episode is lost, as a failed step's is,
    and is reset as the autoreset mode says (`next_step`: by the next step; `same_step`:
    within the call; `disabled`: by the caller)."""


class EpisodeLost(SubEnvError):
    """A sub-env's episode is over without a final observation: its connection dropped, its
    step passed the deadline, its env raised, or its observation did not fit. Its observation
    is stale; it needs a reset (`restart` when its session is gone)."""


# --- state -------------------------------------------------------------------------------------


class Failure:
    """What went wrong for one sub-env in one call."""

    __slots__ = ("code", "ends_episode", "error", "session_lost")

    def __init__(
        self, code: str, error: BaseException, *, ends_episode: bool, session_lost: bool
    ) -> None:
        self.code = code
        self.error = error
        self.ends_episode = ends_episode
        self.session_lost = session_lost

    @classmethod
    def from_server(cls, error: ServerError) -> Failure:
        code = error.code
        return cls(
            code,
            error,
            ends_episode=code != ErrorCode.INVALID_ACTION,
            session_lost=code == ErrorCode.UNKNOWN_SESSION,
        )

    @classmethod
    def lost(cls, error: BaseException) -> Failure:
        return cls(CONNECTION_LOST, error, ends_episode=True, session_lost=True)

    @classmethod
    def timed_out(cls, error: TimeoutError) -> Failure:
        """No answer within the step's deadline: the episode is lost, the session stays."""
        return cls(TIMEOUT, error, ends_episode=True, session_lost=False)

    @classmethod
    def cancelled(cls, error: TimeoutError) -> Failure:
        """The caller gave up waiting (cancelled, interrupted): what the env did is unknown,
        so the episode is lost; the session stays."""
        return cls(CANCELLED, error, ends_episode=True, session_lost=False)

    def info(self) -> dict[str, Any]:
        """How a sub-env's infos report it: `error`, `error_code`, `episode_lost`."""
        return {
            "error": f"[{self.code}] {self.error}",
            "error_code": str(self.code),
            "episode_lost": self.ends_episode,
        }

    @classmethod
    def mismatch(cls, error: Exception) -> Failure:
        """A sub-env's observation did not decode into the observation type."""
        return cls(
            BAD_OBSERVATION,
            ObservationMismatch(f"the observation does not fit observation_type: {error}"),
            ends_episode=True,
            session_lost=False,
        )


def pipelines(url: str) -> bool:
    """Whether a connection to `url` carries several requests at once (HTTP and OpenEnv's
    profile carry one at a time)."""
    return not url.startswith(("http:", "https:", "openenv+"))


class Link:
    """One server URL: the connection its sub-envs share, and the requests in flight on it."""

    __slots__ = (
        "columns",
        "conn",
        "down",
        "folds_resets",
        "index",
        "inflight",
        "outbox",
        "pipelines",
        "unanswered",
        "url",
    )

    def __init__(self, index: int, url: str) -> None:
        self.index = index
        self.url = url
        self.conn: Any = None
        self.pipelines = pipelines(url)
        """HTTP carries one request at a time: frames wait in the outbox for the answer."""
        self.outbox: collections.deque[Any] = collections.deque()
        self.inflight: dict[Any, Request] = {}
        self.unanswered = 0
        self.down: ConnectionLost | None = None  # why the link is down, when it is
        self.folds_resets = False
        """Its server takes resets inside `step_many` (its `welcome` lists the feature)."""
        self.columns = False
        """Its server takes `step_columns` (its `welcome` lists the feature): a batched
        step goes as one, not as a `step_many`."""

    @property
    def alive(self) -> bool:
        return self.conn is not None and not self.conn.closed


class Sub:
    """One sub-env: its session, its last observation and what it needs next."""

    __slots__ = (
        "busy",
        "conn",
        "index",
        "link",
        "lost",
        "needs_reset",
        "obs",
        "outcome",
        "sent",
        "session",
    )

    def __init__(self, index: int, link: Link) -> None:
        self.index = index
        self.link = link
        self.conn: Any = None  # the connection its session lives on
        self.session: str | None = None
        self.obs: Any = None
        self.needs_reset = True
        self.lost: Failure | None = None  # its session is gone: only `restart` helps
        self.busy: Request | None = None
        self.outcome: Outcome | None = None
        self.sent: Call | None = None
        """The batched send it is part of, until that send's results are all in (`ready`)."""


class Outcome:
    """What happened to one sub-env in one call (a step, a reset, a restart)."""

    __slots__ = (
        "action",
        "before",
        "call",
        "failure",
        "index",
        "kind",
        "options",
        "reset",
        "seed",
        "step",
    )

    def __init__(self, index: int, kind: str, call: Call | None, before: Any) -> None:
        self.index = index
        self.kind = kind  # "step", "reset", "restart", "open"
        self.call = call
        self.before = before  # the sub-env's observation before the call
        self.action: Any = None
        self.seed: int | None = None
        self.options: dict[str, Any] | None = None
        self.step: StepResult[Any] | None = None
        self.reset: StepResult[Any] | None = None
        self.failure: Failure | None = None


class Request:
    """A frame sent (or queued) on a link, and the sub-envs waiting for its answer.

    A batched step's `step_many` also keeps its `call` and the sub-envs' `actions` (in the
    order of `subs`): its sub-envs have no `Outcome` until one is needed (`materialize`)."""

    __slots__ = (
        "actions",
        "call",
        "deadline",
        "frame",
        "kind",
        "link",
        "resets",
        "started",
        "subs",
    )

    def __init__(
        self, kind: str, frame: Any, link: Link, subs: list[Sub], deadline: float | None
    ) -> None:
        self.kind = kind  # "step_many", "step", "reset", "open", "close"
        self.frame = frame
        self.link = link
        self.subs = subs
        self.deadline = deadline
        self.started = time.perf_counter()
        self.call: Call | None = None
        self.actions: list[Any] | None = None  # set while the sub-envs have no outcome
        self.resets: list[int] | None = None
        """A `step_many`'s items that are resets (autoresets folded into it), by position."""


class Rows(NamedTuple):
    """A `step_many` answered in bulk: per item (in the order of `subs`) the observation and
    the reward (float64, None as 0.0) and flags it carries. `metadata` is each observation's
    metadata, or None when none has any."""

    subs: list[Sub]
    observations: list[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    metadata: list[Any] | None


class Call:
    """A blocking call (`step`, `reset`, `restart`, opening): done when every sub-env it
    touches has its outcome (or, for a batched step, its place in `rows`)."""

    __slots__ = ("open", "order", "outcomes", "rows")

    def __init__(self, order: list[int] | None = None) -> None:
        self.outcomes: dict[int, Outcome] = {}
        self.rows: list[Rows] = []  # step_many answers taken in bulk; `outcomes` win over them
        self.open = 0  # sub-envs still waiting
        self.order = order
        """A batched send's (one link's sub-envs, in the order sent): when complete it goes to
        `VectorCore.ready` whole. None: a blocking call."""

    @property
    def complete(self) -> bool:
        return self.open == 0


class StepBatch(NamedTuple):
    """The results `recv` returns: the sub-envs that finished, in the order they finished.
    `infos` is batched as in Gymnasium (`infos[key][j]`, mask `infos["_" + key]`), over the
    positions of this batch."""

    env_ids: np.ndarray
    observations: list[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]


# --- helpers -----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """numpy scalars and arrays (also inside dicts and lists) as plain Python values."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _plain_hook(value: Any) -> Any:
    """`enc_hook` for actions: numpy scalars and arrays as plain values (what `_plain` makes of
    them), anything else msgspec cannot encode is a TypeError as without the hook."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"Encoding objects of type {type(value).__qualname__} is unsupported")


class WireStep(msgspec.Struct, gc=False):
    """A `step_many` item as the vector env sends it: the action as a plain value, so every
    item of a frame encodes in one pass. Encodes to the bytes of `StepItem`, whose action is
    the same value pre-encoded (`msgspec.Raw`). Built positionally (cheaper than keywords)
    and untracked by the garbage collector (it lives for one encode, in no cycle)."""

    session: str
    action: Any


_RESET: Any = object()
"""Stands for a folded autoreset among a step's actions while a batch is planned."""


class WireReset(msgspec.Struct, gc=False):
    """A `step_many` item that resets its session (`StepItem` with `reset`)."""

    session: str
    reset: ResetArgs


class WireStepMany(Frame, tag="step_many"):
    """`StepMany` with its items already encoded (a JSON or MessagePack array of `WireStep`):
    the connection's codec splices them in, so the frame's bytes are `StepMany`'s."""

    id: RequestId
    steps: msgspec.Raw


class WireColumns(Frame, tag="step_columns"):
    """`StepColumns` with its actions already encoded (an array, null at the resets)."""

    id: RequestId
    sessions: list[str]
    actions: msgspec.Raw
    resets: list[int] = []
    reset: ResetArgs | None = None


def _rewards(rewards: list[Any]) -> np.ndarray:
    """Rewards as a float64 array, a missing (None) reward as 0.0 (`reward or 0.0`)."""
    # Packing floats into the array's buffer costs a third of `np.array(list)`; a None (or
    # anything `struct` will not take as a float) takes numpy's way, as it always did.
    array = np.empty(len(rewards), dtype=np.float64)
    try:
        struct.pack_into(f"{len(rewards)}d", array.data, 0, *rewards)
    except (struct.error, TypeError):
        return np.array([r or 0.0 for r in rewards], dtype=np.float64)
    return array


def _bools(flags: list[Any]) -> np.ndarray:
    """Flags as a bool array (truthiness, as `np.array(flags, dtype=bool)` of bools)."""
    array = np.empty(len(flags), dtype=np.bool_)
    struct.pack_into(f"{len(flags)}?", array.data, 0, *flags)
    return array


def _metadata(result: StepResult[Any]) -> dict[str, Any]:
    obs = result.observation
    meta = obs.get("metadata") if isinstance(obs, dict) else getattr(obs, "metadata", None)
    return dict(meta) if meta else {}


def add_info(infos: dict[str, Any], info: dict[str, Any], i: int, n: int) -> dict[str, Any]:
    """Gymnasium's `VectorEnv._add_info`: `info` of sub-env `i` into the batched `infos`."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get("final_obs")
            if array is None:
                array = np.full(n, fill_value=None, dtype=object)
            array[i] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, i, n)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or issubclass(type(value), np.number):
                    array = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, fill_value=None, dtype=object)
            array[i] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[i] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


class TypedAnswers(NamedTuple):
    """What `typed_decoder` makes: the decoder, and its typed batch answers' types."""

    decode: Callable[[bytes | str], Response]
    many: type
    """Its `step_many_result`: an answer of that type holds typed observations only."""
    item: type
    """An item of `many` (its one field: `observation`)."""
    columns: type
    """Its `step_columns_result`: observations typed (None where an item failed)."""


def typed_decoder(codec: Any, observation: Any) -> TypedAnswers:
    """A frame decoder that decodes observations straight into `observation` (a type), in the
    same pass as the frame around them: one parse per answer instead of one per frame plus one
    per observation. Frames it cannot type (an observation that does not fit) fall back to the
    generic decoder, whose raw observations `VectorCore.result` decodes (and so reports).

    Returns the decoder and the types of its typed batch answers."""
    module = msgspec.json if codec.name == "json" else msgspec.msgpack
    obs_frame = msgspec.defstruct(
        "VectorObservationFrame",
        [("session", str), ("observation", observation)],
        bases=(Frame,),
        tag="observation",
        kw_only=True,
    )
    # A step_many item is read for its observation only: its `id` and `session` (the request's
    # and the sub-env's, known already) are skipped rather than built. Neither struct can be
    # part of a reference cycle, so the garbage collector need not track them (one allocation
    # fewer per item for it to walk).
    item = msgspec.defstruct(
        "VectorStepManyItem",
        [("observation", observation)],
        tag_field="op",
        tag="observation",
        kw_only=True,
        gc=False,
    )
    many = msgspec.defstruct(
        "VectorStepManyResult",
        [("results", list[item | Error])],  # type: ignore[valid-type]
        bases=(Frame,),
        tag="step_many_result",
        kw_only=True,
        gc=False,
    )
    columns = msgspec.defstruct(
        "VectorStepColumnsResult",
        [
            ("observations", list[Optional[observation]]),  # noqa: UP045
            ("errors", dict[int, Error], {}),
        ],
        bases=(Frame,),
        tag="step_columns_result",
        kw_only=True,
        gc=False,
    )  # its `tasks` (resets naming one) are skipped: a vector env's resets do not read them
    frames: Any = Union[  # noqa: UP007 - built at run time
        (Welcome, Described, Opened, obs_frame, StateFrame, Closed, many, columns, Tools,
         ToolResult, Pong, Error)
    ]  # fmt: skip
    typed = module.Decoder(frames).decode
    generic = codec.decode_response

    def decode(data: bytes | str) -> Response:
        try:
            return typed(data)
        except msgspec.ValidationError:
            return generic(data)

    return TypedAnswers(decode, many, item, columns)


def split_actions(actions: Any, n: int) -> list[Any]:
    """N per-env actions from a sequence (or an array, along its first axis), or from a dict
    of per-field arrays (`{"delta": np.array([...])}` -> one dict per sub-env). numpy arrays
    become plain values here, in one `tolist` each (what the wire carries anyway), rather
    than one numpy scalar per sub-env for the encoder to convert item by item."""
    if isinstance(actions, dict):
        keys = list(actions)
        if not keys:
            return [{} for _ in range(n)]
        columns = [_column(actions[k], k, n) for k in keys]
        if len(keys) == 1:
            key = keys[0]
            return [{key: value} for value in columns[0]]
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    out = actions.tolist() if isinstance(actions, np.ndarray) and actions.ndim else list(actions)
    if len(out) != n:
        raise ValueError(f"{len(out)} actions given for {n} sub-envs")
    return out


def _column(values: Any, field: str, n: int) -> list[Any]:
    """The first `n` values of one field of a dict of per-field arrays, as a list."""
    if isinstance(values, Mapping):  # its keys are not values; nested dicts are not split
        raise ValueError(
            f"action field {field!r} is a mapping, not one value per sub-env: "
            "give a list of actions, one per sub-env"
        )
    try:
        column = values.tolist() if isinstance(values, np.ndarray) else list(values)
    except TypeError:
        column = None
    if not isinstance(column, list):  # a scalar (a 0-d array's `tolist` is one too)
        raise ValueError(f"action field {field!r} is not one value per sub-env: {values!r}")
    if len(column) < n:
        raise ValueError(f"action field {field!r} has {len(column)} values for {n} sub-envs")
    return column[:n] if len(column) > n else column


def seeds_for(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Gymnasium's convention: an int gives sub-env i `seed + i`; a list gives each its own."""
    if seed is None:
        return [None] * n
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(n)]
    seeds = [None if s is None else int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds given for {n} sub-envs")
    return seeds


# --- the core ----------------------------------------------------------------------------------


class VectorCore:
    """Sub-envs spread over links; every decision of the vector envs, none of their I/O."""

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int,
        *,
        env: str | None,
        types: EnvTypes,
        autoreset_mode: str,
        errors: str,
        reset_options: dict[str, Any] | None,
        step_timeout: float | None,
        record_to: Any = None,
        record_format: str = "jsonl",
    ) -> None:
        autoreset_mode = _GYMNASIUM_MODES.get(
            getattr(autoreset_mode, "value", autoreset_mode), autoreset_mode
        )
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ValueError("no server URL given")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, not {num_envs}")
        if autoreset_mode not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset_mode {autoreset_mode!r} is not one of {', '.join(AUTORESET_MODES)}"
            )
        if errors not in ERROR_POLICIES:
            raise ValueError(f"errors {errors!r} is not one of {', '.join(ERROR_POLICIES)}")
        self.env = env
        self.types = types
        self.autoreset_mode = autoreset_mode
        self.errors = errors
        self.reset_options = dict(reset_options or {})
        self.step_timeout = step_timeout
        by_url: dict[str, Link] = {}
        for url in url_list:
            if url not in by_url:
                by_url[url] = Link(len(by_url), url)
        self.links = list(by_url.values())
        self.subs = [Sub(i, by_url[url_list[i % len(url_list)]]) for i in range(num_envs)]
        self.num_envs = num_envs
        self._observation_target: Any = types.observation or dict[str, Any]
        fields = getattr(types.observation, "__struct_fields__", ())
        self._struct_flags = {"reward", "done", "truncated"} <= set(fields)
        """The observation type is a Struct with the flags (an ecotone.Observation): read them
        directly."""
        self._dict_obs = (
            typing.get_origin(self._observation_target) or self._observation_target
        ) is dict
        """Observations decode into dicts: read the flags with `get`."""
        self._codec: Any = None
        self._decode_frame: Callable[[bytes | str], Response] | None = None
        self._typed: TypedAnswers | None = None  # the typed decoder and its answers' types
        self._encode_action: Callable[[Any], bytes] | None = None
        """Encodes actions (one, or a step_many's list of `WireStep`), numpy values as plain."""
        self.ready: collections.deque[Outcome | Call] = collections.deque()
        """Results of `send`-started work, in the order they completed, for `recv`: a sub-env's
        outcome, or a batched send's complete call."""
        self.ready_count = 0
        """Sub-envs in `ready`."""
        self.sending: list[Call] = []
        """Batched sends not complete yet."""
        self.recorder: ClientRecorder | None = None
        if record_to is not None:
            self.recorder = ClientRecorder(
                record_to,
                env or "env",
                format=record_format,  # type: ignore[arg-type]
            )

    # --- planning ------------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        return None if self.step_timeout is None else time.monotonic() + self.step_timeout

    def _queue(self, kind: str, frame: Any, link: Link, subs: list[Sub]) -> Request:
        request = Request(kind, frame, link, subs, self._deadline())
        link.inflight[frame.id] = request
        link.outbox.append(frame)
        for sub in subs:
            sub.busy = request
        return request

    def _begin(self, sub: Sub, kind: str, call: Call | None) -> Outcome:
        if sub.busy is not None:
            raise ValueError(
                f"sub-env {sub.index} has a request in flight: recv() its result first"
            )
        outcome = Outcome(sub.index, kind, call, sub.obs)
        sub.outcome = outcome
        if call is not None:
            call.outcomes[sub.index] = outcome
            call.open += 1
        return outcome

    def _queue_reset(
        self, sub: Sub, seed: int | None, options: dict[str, Any] | None = None
    ) -> None:
        link = sub.link
        assert sub.session is not None and sub.outcome is not None
        sub.outcome.seed = seed
        frame = Reset(
            id=link.conn.core.next_id(),
            session=sub.session,
            seed=seed,
            options=self.reset_options if options is None else options,
        )
        self._queue("reset", frame, link, [sub])

    def _session_gone(self, sub: Sub) -> Failure | None:
        if sub.lost is not None:
            return sub.lost
        if sub.session is None or sub.conn is None or sub.conn is not sub.link.conn:
            return Failure.lost(ConnectionLost(f"sub-env {sub.index} has no open session"))
        if sub.conn.closed:
            return Failure.lost(ConnectionLost(f"the connection to {sub.link.url} is closed"))
        return None

    def plan_open(self, subs: Iterable[Sub], call: Call, kind: str = "open") -> None:
        """Open a session for each sub-env (closing its old one, if any, on a live link)."""
        for sub in subs:
            self._begin(sub, kind, call)
            link = sub.link
            if not link.alive:
                down = link.down or ConnectionLost(f"not connected to {link.url}")
                self._fail(sub, Failure.lost(down))
                continue
            if sub.session is not None and sub.conn is link.conn and sub.lost is None:
                close = Close(id=link.conn.core.next_id(), session=sub.session)
                link.inflight[close.id] = Request("close", close, link, [], None)
                link.outbox.append(close)
            sub.session = None
            self._queue("open", Open(id=link.conn.core.next_id(), env=self.env), link, [sub])

    def plan_restart(
        self, subs: Iterable[Sub], seeds: list[int | None], options: dict[str, Any], call: Call
    ) -> None:
        subs = list(subs)
        self.check_idle(subs)
        self.plan_open(subs, call, kind="restart")
        for sub, seed in zip(subs, seeds, strict=True):
            outcome = call.outcomes[sub.index]
            outcome.seed = seed
            outcome.options = options

    def plan_reset(
        self,
        subs: Iterable[Sub],
        seeds: list[int | None],
        options: dict[str, Any],
        call: Call,
    ) -> None:
        for sub, seed in zip(subs, seeds, strict=True):
            self._begin(sub, "reset", call)
            gone = self._session_gone(sub)
            if gone is not None:
                self._fail(sub, gone)
                continue
            self._queue_reset(sub, seed, options)

    def check_idle(self, subs: Iterable[Sub]) -> None:
        for sub in subs:
            if sub.busy is not None or sub.sent is not None:
                raise ValueError(
                    f"sub-env {sub.index} has a request in flight: recv() its result first"
                )

    def waiting_link(self, call: Call) -> Link:
        """A link to read from for `call`: one with its requests in flight, else any busy."""
        busy = [link for link in self.links if link.unanswered > 0]
        for link in busy:
            for request in link.inflight.values():
                if request.call is call:
                    return link
                for sub in request.subs:
                    if sub.outcome is not None and sub.outcome.call is call:
                        return link
        if not busy:  # pragma: no cover - a call always has something in flight
            raise RuntimeError("nothing in flight for this call")
        return busy[0]

    def check_steppable(self, subs: Iterable[Sub]) -> None:
        """Refuse, before any I/O, what is a bug in the caller rather than a failure."""
        for sub in subs:
            if sub.busy is not None or sub.sent is not None:
                raise ValueError(
                    f"sub-env {sub.index} has a request in flight: recv() its result first"
                )
            if self.autoreset_mode == "disabled" and sub.needs_reset and sub.lost is None:
                raise ValueError(
                    f"sub-env {sub.index}'s episode is over (autoreset_mode='disabled'): reset "
                    "it first, e.g. reset(options={'reset_mask': terminated | truncated})"
                )

    def plan_step(
        self,
        actions: Sequence[Any],
        subs: Sequence[Sub],
        call: Call | None,
        *,
        batched: bool = False,
    ) -> None:
        """Queue one step (or autoreset) per sub-env: with a `call`, a `step_many` frame per
        link; without (`send`), a `step` frame per sub-env so each answers on its own, or
        (`batched`) a `step_many` per link whose sub-envs answer together.

        An action that cannot be encoded raises TypeError before anything of a batched step
        is queued."""
        if len(actions) != len(subs):
            raise ValueError(f"{len(actions)} actions given for {len(subs)} sub-envs")
        if call is None and batched:
            self._plan_sent_batch(actions, subs)
            return
        if call is None:
            for sub, action in zip(subs, actions, strict=True):
                outcome = self._begin(sub, "step", None)
                outcome.action = action
                if self._step_later(sub, outcome):
                    continue
                link = sub.link
                assert sub.session is not None  # `_step_later` said it can be stepped
                raw = msgspec.Raw(self._action_bytes(action))
                step = Step(id=link.conn.core.next_id(), session=sub.session, action=raw)
                self._queue("step", step, link, [sub])
            return
        self._plan_batch(actions, subs, call)

    def _action_bytes(self, action: Any) -> bytes:
        encode = self._encode_action
        assert encode is not None  # attach() came first: there is no session before it
        return encode(action)

    def _ready_to_step(self, sub: Sub, alive: list[bool]) -> bool:
        """The sub-env's session is open on its link's live connection and its episode runs:
        it can go into a step_many as it is."""
        link = sub.link
        return not (
            sub.needs_reset
            or sub.lost is not None
            or sub.session is None
            or sub.conn is not link.conn
            or not alive[link.index]
        )

    def _foldable(self, sub: Sub, alive: list[bool]) -> bool:
        """The sub-env needs a reset, and it can ride in its link's `step_many`: its session
        is open on the live connection of a server that takes resets there."""
        link = sub.link
        return (
            sub.needs_reset
            and link.folds_resets
            and sub.lost is None
            and sub.session is not None
            and sub.conn is link.conn
            and alive[link.index]
        )

    def _step_later(self, sub: Sub, outcome: Outcome) -> bool:
        """For a sub-env that cannot be stepped as it is: fail it (its session is gone) or
        queue its reset instead (next_step autoreset, or an episode that was lost). Returns
        False when it can be stepped after all."""
        link = sub.link
        if (
            sub.session is None
            or sub.lost is not None
            or sub.conn is not link.conn
            or not link.alive
        ):
            gone = self._session_gone(sub)
            if gone is not None:
                self._fail(sub, gone)
                return True
        if sub.needs_reset:  # next_step autoreset (or a failed episode): reset, not step
            outcome.action = None
            self._queue_reset(sub, None)
            return True
        return False

    def _group(
        self, actions: Sequence[Any], subs: Sequence[Sub], alive: list[bool]
    ) -> tuple[dict[int, tuple[list[Sub], list[Any]]], list[tuple[Sub, Any]], list[Sub]]:
        """The sub-envs that go into a `step_many`, per link (with `_RESET` for those whose
        autoreset rides in it); the others with their actions (a reset frame instead, or a
        failure); and those whose autoreset rides along."""
        groups: dict[int, tuple[list[Sub], list[Any]]] = {}
        later: list[tuple[Sub, Any]] = []
        folded: list[Sub] = []
        for sub, action in zip(subs, actions, strict=True):
            if not self._ready_to_step(sub, alive):
                if not self._foldable(sub, alive):
                    later.append((sub, action))
                    continue
                folded.append(sub)
                action = _RESET
            group = groups.get(sub.link.index)
            if group is None:
                group = groups[sub.link.index] = ([], [])
            group[0].append(sub)
            group[1].append(action)
        return groups, later, folded

    def _encode(
        self, groups: dict[int, tuple[list[Sub], list[Any]]], folded: bool
    ) -> list[tuple[int, list[Sub], list[Any], list[int] | None, WireColumns | WireStepMany]]:
        """Each group's frame, its items encoded (an action that cannot be encoded raises
        here, before anything is queued; the frame's id is set when it is queued): (link
        index, sub-envs, actions with None for the resets, the resets' positions or None,
        the frame). A `step_columns` where the link's server takes it, else a `step_many`.
        `folded`: some items may be resets."""
        args = ResetArgs(options=self.reset_options) if folded else None
        encoded = []
        links = self.links
        for index, (group_subs, group_actions) in groups.items():
            resets = (
                [j for j, action in enumerate(group_actions) if action is _RESET]
                if folded
                else None
            )
            if resets:
                group_actions = [None if a is _RESET else a for a in group_actions]
            frame: WireColumns | WireStepMany
            if links[index].columns:
                frame = WireColumns(
                    id=0,
                    sessions=[sub.session for sub in group_subs],  # type: ignore[misc]
                    actions=msgspec.Raw(self._action_bytes(group_actions)),
                    resets=resets or [],
                    reset=args if resets else None,
                )
            else:
                at_reset = set(resets) if resets else None
                steps = [
                    WireStep(sub.session, action)  # type: ignore[arg-type]
                    if at_reset is None or j not in at_reset
                    else WireReset(sub.session, args)  # type: ignore[arg-type]
                    for j, (sub, action) in enumerate(zip(group_subs, group_actions, strict=True))
                ]
                frame = WireStepMany(id=0, steps=msgspec.Raw(self._action_bytes(steps)))
            encoded.append((index, group_subs, group_actions, resets or None, frame))
        return encoded

    def _plan_batch(self, actions: Sequence[Any], subs: Sequence[Sub], call: Call) -> None:
        """`plan_step` with a call: the sub-envs ready to step go into one `step_many` per
        link, without outcomes (`Request.actions` keeps their actions); the others get theirs
        now (a reset instead, or a failure)."""
        links = self.links
        alive = [link.alive for link in links]
        later: list[tuple[Sub, Any]] = []
        folded: list[Sub] = []
        groups: dict[int, tuple[list[Sub], list[Any]]]
        conn = links[0].conn
        unready = (
            [  # `_ready_to_step` inline: this runs for every sub-env of every step
                s
                for s in subs
                if s.needs_reset or s.lost is not None or s.session is None or s.conn is not conn
            ]
            if len(links) == 1 and alive[0]
            else None
        )
        if unready is not None and not unready:
            groups = {0: (list(subs), list(actions))}  # the common case: one step_many of all
        elif (
            unready is not None
            and links[0].folds_resets
            and not [
                s for s in unready if s.lost is not None or s.session is None or s.conn is not conn
            ]
        ):  # the next most common: some episodes ended, their resets ride along
            folded = unready
            group_actions = [
                _RESET if sub.needs_reset else action
                for sub, action in zip(subs, actions, strict=True)
            ]
            groups = {0: (list(subs), group_actions)}
        else:
            groups, later, folded = self._group(actions, subs, alive)
        encoded = self._encode(groups, bool(folded))
        call.open += len(subs)  # each sub-env's outcome (or bulk row) completes it once
        for sub in folded:  # a reset instead of a step, as `_step_later` would queue it
            outcome = Outcome(sub.index, "step", call, sub.obs)
            sub.outcome = outcome
            call.outcomes[sub.index] = outcome
        for sub, action in later:
            outcome = Outcome(sub.index, "step", call, sub.obs)
            outcome.action = action
            sub.outcome = outcome
            call.outcomes[sub.index] = outcome
            handled = self._step_later(sub, outcome)
            assert handled, f"sub-env {sub.index} is neither ready to step nor to reset"
        for index, group_subs, group_actions, resets, frame in encoded:
            link = links[index]
            frame.id = link.conn.core.next_id()
            request = self._queue("step_many", frame, link, group_subs)
            request.call = call
            request.resets = resets
            request.actions = group_actions

    def _plan_sent_batch(self, actions: Sequence[Any], subs: Sequence[Sub]) -> None:
        """`send(batched=True)`: a `step_many` per link of the sub-envs ready to step (and of
        those whose autoreset can ride in it), each with a call of its own (`Call.order`),
        answered in bulk like a blocking step's; the call reaches `ready` whole once all of
        its sub-envs have their results."""
        groups, later, folded = self._group(actions, subs, [link.alive for link in self.links])
        encoded = self._encode(groups, bool(folded))
        for sub, action in later:
            outcome = self._begin(sub, "step", None)
            outcome.action = action
            handled = self._step_later(sub, outcome)
            assert handled, f"sub-env {sub.index} is neither ready to step nor to reset"
        for index, group_subs, group_actions, resets, frame in encoded:
            call = Call([sub.index for sub in group_subs])
            call.open = len(group_subs)
            self.sending.append(call)
            for j in resets or ():  # a reset instead of a step: its outcome from the start
                sub = group_subs[j]
                outcome = Outcome(sub.index, "step", call, sub.obs)
                sub.outcome = outcome
                call.outcomes[sub.index] = outcome
            for sub in group_subs:
                sub.sent = call
            link = self.links[index]
            frame.id = link.conn.core.next_id()
            request = self._queue("step_many", frame, link, group_subs)
            request.call = call
            request.resets = resets
            request.actions = group_actions

    def _adopt(self, sub: Sub, action: Any, call: Call | None) -> Outcome:
        """The outcome of a sub-env stepped in a bulk `step_many`, made when it needs one."""
        outcome = Outcome(sub.index, "step", call, sub.obs)
        outcome.action = action
        sub.outcome = outcome
        if call is not None:
            call.outcomes[sub.index] = outcome
        return outcome

    def materialize(self, request: Request) -> None:
        """Give the sub-envs of a bulk `step_many` still waiting for it their outcomes (before
        they fail, or take the per-sub-env path for its answer)."""
        actions = request.actions
        if actions is None:
            return
        request.actions = None
        for sub, action in zip(request.subs, actions, strict=True):
            if sub.busy is request and sub.outcome is None:
                self._adopt(sub, action, request.call)

    def take_outbox(self, link: Link) -> list[Any]:
        """Frames to send on `link` now (HTTP links: one at a time)."""
        outbox = link.outbox
        if not outbox:
            return []
        if link.pipelines:
            frames = list(outbox)
            outbox.clear()
        elif link.unanswered == 0:
            frames = [outbox.popleft()]
        else:
            return []
        link.unanswered += len(frames)
        return frames

    # --- answers -------------------------------------------------------------------------------

    def result(self, obs: Any) -> StepResult[Any]:
        """An observation (decoded by `typed_decoder`) as a StepResult."""
        if self._struct_flags and type(obs) is self._observation_target:
            return StepResult(
                observation=obs, reward=obs.reward, done=obs.done, truncated=obs.truncated
            )
        if isinstance(obs, msgspec.Raw):  # the typed decoder fell back to the generic one
            obs = self._codec.decode_as(obs, self._observation_target)
        if type(obs) is dict:
            return StepResult(
                observation=obs,
                reward=obs.get("reward"),
                done=bool(obs.get("done", False)),
                truncated=bool(obs.get("truncated", False)),
            )
        return StepResult(
            observation=obs,
            reward=getattr(obs, "reward", None),
            done=bool(getattr(obs, "done", False)),
            truncated=bool(getattr(obs, "truncated", False)),
        )

    def on_response(self, link: Link, response: Response) -> None:
        rid = response.id
        if rid is None:  # an error the server could not tie to a request: the oldest
            rid = next(iter(link.inflight), None)
            if rid is None:
                return
        request = link.inflight.pop(rid, None)
        if request is None:
            return
        link.unanswered -= 1
        kind = request.kind
        if kind == "step_many":
            self._on_step_many(request, response)
        elif kind in ("close", "hello"):
            if type(response) is Welcome:
                link.folds_resets = "step_many.reset" in response.features
                link.columns = "step_columns" in response.features
        elif isinstance(response, Error):
            failure = Failure.from_server(ServerError.from_frame(response))
            self._fail(request.subs[0], failure, after_step=kind == "step")
        elif kind == "step":
            try:
                result = self.result(response.observation)  # type: ignore[union-attr]
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                sub = request.subs[0]
                self._fail(sub, Failure.mismatch(exc), after_step=True)
                return
            self._stepped(request.subs[0], result, request.started)
        elif kind == "reset":
            self._reset_done(request.subs[0], response.observation)  # type: ignore[union-attr]
        elif kind == "open":
            assert isinstance(response, Opened)
            self._opened(request.subs[0], response)

    def _on_step_many(self, request: Request, response: Response) -> None:
        kind = type(response)
        typed = self._typed
        if (kind is StepColumnsResult or (typed is not None and kind is typed.columns)) and (
            kind is StepColumnsResult
            or response.errors  # type: ignore[union-attr]
            or request.resets is not None
            or request.actions is None
        ):
            response = self._by_items(response)
        if request.resets is not None:
            response = self._take_resets(request, response)
            if not request.subs:  # resets only: each has completed its outcome
                return
        if request.actions is not None and self._take_in_bulk(request, response):
            return
        if typed is not None and type(response) is typed.columns:
            response = self._by_items(response)  # not taken in bulk: item by item
        self.materialize(request)
        if isinstance(response, Error):
            failure = Failure.from_server(ServerError.from_frame(response))
            for sub in request.subs:
                self._fail(sub, failure, after_step=True)
            return
        result_of = self.result
        plain_path = self.recorder is None
        results = response.results  # type: ignore[union-attr]
        for sub, item in zip(request.subs, results, strict=True):
            if isinstance(item, Error):
                failure = Failure.from_server(ServerError.from_frame(item))
                self._fail(sub, failure, after_step=True)
                continue
            try:
                result = result_of(item.observation)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                self._fail(sub, Failure.mismatch(exc), after_step=True)
                continue
            outcome = sub.outcome
            if plain_path and not (result.done or result.truncated) and outcome is not None:
                # the hot path: an ordinary step, nothing to record, nothing to reset
                outcome.step = result
                sub.obs = result.observation
                sub.busy = None
                sub.outcome = None
                call = outcome.call
                if call is None:
                    self.ready.append(outcome)
                    self.ready_count += 1
                else:
                    call.open -= 1
                    if call.open == 0 and call.order is not None:
                        self._sent_complete(call)
            else:
                self._stepped(sub, result, request.started)

    def _by_items(self, response: Any) -> Response:
        """A `step_columns_result` as the `step_many_result` of the same items (typed where
        it is), for the paths that take an answer item by item."""
        errors = response.errors
        typed = self._typed
        if type(response) is StepColumnsResult or typed is None:
            return StepManyResult(
                id=response.id,
                results=[
                    errors.get(j) or ObservationFrame(session="", observation=obs)
                    for j, obs in enumerate(response.observations)
                ],
            )
        item = typed.item
        return typed.many(
            id=response.id,
            results=[
                errors.get(j) or item(observation=obs)
                for j, obs in enumerate(response.observations)
            ],
        )

    def _take_resets(self, request: Request, response: Response) -> Response:
        """Answer the reset items of a `step_many` (folded autoresets) and take them out of
        the request and its answer, which then go on as a step_many of steps only."""
        positions = request.resets
        assert positions is not None
        request.resets = None
        subs = request.subs
        resets = set(positions)
        keep = [j for j in range(len(subs)) if j not in resets]
        if isinstance(response, Error):
            failure = Failure.from_server(ServerError.from_frame(response))
            for j in positions:
                self._fail(subs[j], failure)
        else:
            results: list[Any] = response.results  # type: ignore[union-attr]
            if len(results) != len(subs):
                error = ServerError(
                    ErrorCode.INTERNAL,
                    f"step_many answered {len(results)} items for {len(subs)}",
                )
                for j in positions:
                    self._fail(subs[j], Failure.from_server(error))
            else:
                for j in positions:
                    item = results[j]
                    if isinstance(item, Error):
                        self._fail(subs[j], Failure.from_server(ServerError.from_frame(item)))
                    else:
                        self._reset_done(subs[j], item.observation)
                response.results = [results[j] for j in keep]  # type: ignore[union-attr]
        request.subs = [subs[j] for j in keep]
        if request.actions is not None:
            request.actions = [request.actions[j] for j in keep]
        return response

    def _flags(
        self, observations: list[Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any], bool] | None:
        """(rewards, terminated, truncated, metadata, whether any episode ended) of typed
        observations, as `result` would read them one by one, or None when their type has no
        flags to read in bulk."""
        if self._struct_flags:
            rewards = [o.reward for o in observations]
            terminated = [o.done for o in observations]
            truncated = [o.truncated for o in observations]
            metadata = [o.metadata for o in observations]
        elif self._dict_obs:
            rewards = [o.get("reward") for o in observations]
            terminated = [o.get("done", False) for o in observations]
            truncated = [o.get("truncated", False) for o in observations]
            metadata = [o.get("metadata") for o in observations]
        else:
            return None
        ends = any(terminated) or any(truncated)  # on the lists: cheaper than numpy's any
        if not ends:  # the usual step: no flag to pack
            n = len(observations)
            return (
                _rewards(rewards),
                np.zeros(n, dtype=np.bool_),
                np.zeros(n, dtype=np.bool_),
                metadata,
                False,
            )
        return _rewards(rewards), _bools(terminated), _bools(truncated), metadata, True

    def _take_in_bulk(self, request: Request, response: Response) -> bool:
        """Take a bulk `step_many`'s answer as `Rows` of the call, if it is the usual one:
        typed observations only, no recorder. Sub-envs whose episode ended are marked for
        reset; under `same_step` they get outcomes and are reset within the call. Returns
        False, having changed nothing, when the answer needs the per-sub-env path."""
        typed = self._typed
        if self.recorder is not None or typed is None:
            return False
        subs = request.subs
        kind = type(response)
        if kind is typed.columns:  # no errors among them (else it came here by items)
            observations: list[Any] = response.observations  # type: ignore[union-attr]
        elif kind is typed.many:
            results: list[Any] = response.results  # type: ignore[union-attr]
            try:
                observations = [item.observation for item in results]
            except AttributeError:  # an error frame among the items
                return False
        else:
            return False
        if len(observations) != len(subs):
            return False  # a broken answer: the per-sub-env path reports it
        flags = self._flags(observations)
        if flags is None:
            return False
        rewards, terminated, truncated, metadata, ends = flags
        call, actions = request.call, request.actions
        assert call is not None and actions is not None
        ended: list[int] = []
        if ends:
            ended = np.flatnonzero(terminated | truncated).tolist()
            if self.autoreset_mode == "same_step":
                for j in ended:  # before their observation changes: it is the outcome's `before`
                    self._adopt(subs[j], actions[j], call)
            else:
                for j in ended:
                    subs[j].needs_reset = True
                ended = []
        for sub, obs in zip(subs, observations, strict=True):
            sub.obs = obs
            sub.busy = None
        meta = metadata if any(metadata) else None
        call.rows.append(Rows(subs, observations, rewards, terminated, truncated, meta))
        call.open -= len(subs) - len(ended)
        if call.open == 0 and call.order is not None:
            self._sent_complete(call)
        for j in ended:  # same_step: these finish once their reset is answered
            self._stepped(subs[j], self.result(observations[j]), request.started)
        return True

    def _stepped(self, sub: Sub, result: StepResult[Any], started: float) -> None:
        outcome = sub.outcome
        assert outcome is not None
        outcome.step = result
        sub.obs = result.observation
        sub.busy = None
        if self.recorder is not None:
            self.recorder.stepped(
                sub.index,
                _plain(outcome.action),
                result.observation,
                result.reward,
                result.done,
                result.truncated,
                time.perf_counter() - started,
            )
        if result.done or result.truncated:
            sub.needs_reset = True
            if self.autoreset_mode == "same_step":
                self._queue_reset(sub, None)
                return
        self._complete(sub)

    def _reset_done(self, sub: Sub, raw: Any) -> None:
        outcome = sub.outcome
        assert outcome is not None
        try:
            result = self.result(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self._fail(sub, Failure.mismatch(exc))
            return
        outcome.reset = result
        sub.obs = result.observation
        sub.needs_reset = False
        sub.busy = None
        if self.recorder is not None:
            self.recorder.started(sub.index, sub.session, outcome.seed, result.observation)
        self._complete(sub)

    def _opened(self, sub: Sub, response: Opened) -> None:
        outcome = sub.outcome
        assert outcome is not None
        sub.session = response.session
        sub.conn = sub.link.conn
        if self.recorder is not None and self.env is None:
            self.recorder.env = response.env  # the server's default env: now we know its name
        sub.lost = None
        sub.needs_reset = True
        sub.busy = None
        if outcome.kind == "restart":
            self._queue_reset(sub, outcome.seed, outcome.options)
            return
        self._complete(sub)

    def _fail(self, sub: Sub, failure: Failure, *, after_step: bool = False) -> None:
        """`after_step`: the failed request was the sub-env's step (not a reset)."""
        outcome = sub.outcome
        assert outcome is not None
        if outcome.failure is None:
            outcome.failure = failure
        sub.busy = None
        if failure.session_lost:
            sub.lost = failure
        if failure.ends_episode:
            sub.needs_reset = True
            if self.recorder is not None:
                self.recorder.ended(sub.index, "lost", f"[{failure.code}] {failure.error}")
            if (
                after_step
                and self.autoreset_mode == "same_step"
                and not failure.session_lost
                and sub.link.alive
            ):
                self._queue_reset(sub, None)  # a lost episode ends like a truncated one
                return
        self._complete(sub)

    def _complete(self, sub: Sub) -> None:
        outcome = sub.outcome
        assert outcome is not None
        sub.outcome = None
        call = outcome.call
        if call is None:
            self.ready.append(outcome)
            self.ready_count += 1
        else:
            call.open -= 1
            if call.open == 0 and call.order is not None:
                self._sent_complete(call)

    def _sent_complete(self, call: Call) -> None:
        """A batched send has all its results: to `ready`, whole."""
        assert call.order is not None
        self.sending.remove(call)
        for index in call.order:
            self.subs[index].sent = None
        self.ready.append(call)
        self.ready_count += len(call.order)

    def on_link_lost(self, link: Link, exc: BaseException) -> None:
        """The link's connection dropped: every request on it fails, every session on it is
        gone."""
        lost = exc if isinstance(exc, ConnectionLost) else ConnectionLost(str(exc))
        link.down = lost
        failure = Failure.lost(lost)
        requests = list(link.inflight.values())
        link.inflight.clear()
        link.outbox.clear()
        link.unanswered = 0
        dead = link.conn
        for sub in self.subs:
            if sub.link is link and sub.conn is dead and sub.lost is None:
                sub.lost = failure
        for request in requests:
            self.materialize(request)
            for sub in request.subs:
                if sub.busy is request:
                    self._fail(sub, failure)

    def expire(
        self, link: Link, now: float, call: Call | None = None, *, cancelled: bool = False
    ) -> list[Any]:
        """Fail the requests on `link` past their deadline (and all of `call`'s, if given);
        return the ids to abandon on the connection. `cancelled`: the caller of `call` was
        cancelled (only its requests go; their sub-envs' episodes are lost)."""

        def due(request: Request) -> bool:
            if call is not None and (
                request.call is call
                or any(s.outcome is not None and s.outcome.call is call for s in request.subs)
            ):
                return True
            return not cancelled and request.deadline is not None and request.deadline <= now

        expired = [(rid, r) for rid, r in link.inflight.items() if due(r)]
        abandoned: list[Any] = []
        for rid, request in expired:
            del link.inflight[rid]
            try:
                link.outbox.remove(request.frame)
            except ValueError:
                abandoned.append(rid)  # sent: its late answer must be dropped
                link.unanswered -= 1
            self.materialize(request)
            for sub in request.subs:
                if sub.busy is not request:
                    continue
                if cancelled:
                    what = f"the call was cancelled before its {request.kind} was answered"
                else:
                    what = f"no answer to {request.kind} within {self.step_timeout}s"
                error = TimeoutError(f"sub-env {sub.index}: {what}")
                self._fail(sub, Failure.cancelled(error) if cancelled else Failure.timed_out(error))
        return abandoned

    def cancel(self, call: Call) -> list[tuple[Link, Any]]:
        """`call`'s caller gave up (cancelled, interrupted): its sub-envs' outcomes are
        unknown, so their episodes are lost. Returns (link, id) pairs to abandon."""
        now = time.monotonic()
        return [
            (link, rid)
            for link in self.links
            for rid in self.expire(link, now, call, cancelled=True)
        ]

    def next_deadline(self) -> float | None:
        deadlines = [
            r.deadline for link in self.links for r in link.inflight.values() if r.deadline
        ]
        return min(deadlines) if deadlines else None

    def attach(self, link: Link, conn: Any) -> None:
        """A (new) connection for `link`; sessions on its old one are gone."""
        codec = conn.core.codec
        if self._codec is None:
            self._codec = codec
            self._typed = typed_decoder(codec, self._observation_target)
            self._decode_frame = self._typed.decode
            module = msgspec.json if codec.name == "json" else msgspec.msgpack
            self._encode_action = module.Encoder(enc_hook=_plain_hook).encode
        conn.decode = self._decode_frame
        old = link.conn
        if old is not None and (link.inflight or link.outbox):
            # A connection that died unnoticed: what was asked on it fails, as if noticed.
            self.on_link_lost(link, ConnectionLost(f"reconnected to {link.url}"))
        link.conn = conn
        link.down = None
        link.inflight.clear()
        link.outbox.clear()
        link.unanswered = 0
        link.folds_resets = link.columns = False
        # Learn what the server can do (answered before any session is open to step).
        self._queue("hello", Hello(id=conn.core.next_id()), link, [])
        if old is not None:
            for sub in self.subs:
                if sub.link is link and sub.conn is old and sub.lost is None:
                    sub.lost = Failure.lost(ConnectionLost(f"reconnected to {link.url}"))

    # --- results -------------------------------------------------------------------------------

    def _info(self, outcome: Outcome) -> dict[str, Any]:
        info: dict[str, Any]
        step, reset, failure = outcome.step, outcome.reset, outcome.failure
        if step is not None:
            info = _metadata(step)
            if reset is not None:  # same_step: the episode ended and the next one began
                info = {"final_obs": step.observation, "final_info": info, **_metadata(reset)}
        elif reset is not None:
            info = _metadata(reset)
            if failure is not None and outcome.kind == "step" and outcome.action is not None:
                # same_step after a lost episode: the last good observation is its final one
                info = {"final_obs": outcome.before, "final_info": {}, **info}
        else:
            info = {}
        if failure is not None:
            info.update(failure.info())
        return info

    def _row(self, outcome: Outcome) -> tuple[Any, float, bool, bool]:
        """(observation, reward, terminated, truncated) of one sub-env's outcome."""
        step, reset, failure = outcome.step, outcome.reset, outcome.failure
        if step is not None:
            obs = reset.observation if reset is not None else step.observation
            return obs, float(step.reward or 0.0), step.done, step.truncated
        lost = failure is not None and failure.ends_episode and outcome.kind == "step"
        if outcome.kind == "step" and outcome.action is None and failure is not None:
            lost = True  # an autoreset that failed: still no episode
        if reset is not None:
            return reset.observation, 0.0, False, lost
        return outcome.before, 0.0, False, lost

    def step_result(
        self, outcomes: Sequence[Outcome], n: int
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        observations: list[Any] = []
        rewards: list[float] = []
        terminated: list[bool] = []
        truncated: list[bool] = []
        infos: dict[str, Any] = {}
        for j, outcome in enumerate(outcomes):
            step = outcome.step
            if step is not None and outcome.reset is None and outcome.failure is None:
                # the hot path: an ordinary step
                obs = step.observation
                observations.append(obs)
                rewards.append(step.reward or 0.0)
                terminated.append(step.done)
                truncated.append(step.truncated)
                meta = obs.get("metadata") if type(obs) is dict else getattr(obs, "metadata", None)
                if meta:
                    add_info(infos, dict(meta), j, n)
                continue
            obs, reward, term, trunc = self._row(outcome)
            observations.append(obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
            info = self._info(outcome)
            if info:
                add_info(infos, info, j, n)
        return (
            observations,
            np.array(rewards, dtype=np.float64),
            np.array(terminated, dtype=np.bool_),
            np.array(truncated, dtype=np.bool_),
            infos,
        )

    def step_all_result(
        self, call: Call
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The result of a batched step of every sub-env (`plan_step(actions, self.subs,
        call)`), the error policy applied: the bulk rows, with the outcomes laid over them
        (an outcome's row is `_row` and its info `_info`, as in `step_result`)."""
        n = self.num_envs
        outcomes = call.outcomes
        rows = call.rows
        if len(rows) == 1 and not outcomes and rows[0].subs == self.subs:
            # the hot path: one step_many of every sub-env, in order, all ordinary steps
            row = rows[0]
            infos: dict[str, Any] = {}
            if row.metadata is not None:
                for j, meta in enumerate(row.metadata):
                    if meta:
                        add_info(infos, dict(meta), j, n)
            return row.observations, row.rewards, row.terminated, row.truncated, infos
        observations: list[Any] = [None] * n
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        truncated = np.zeros(n, dtype=np.bool_)
        info_of: dict[int, dict[str, Any]] = {}
        for row in rows:
            where = [sub.index for sub in row.subs]
            for i, obs in zip(where, row.observations, strict=True):
                observations[i] = obs
            rewards[where] = row.rewards
            terminated[where] = row.terminated
            truncated[where] = row.truncated
            if row.metadata is not None:
                for i, meta in zip(where, row.metadata, strict=True):
                    if meta:
                        info_of[i] = dict(meta)
        for i, outcome in outcomes.items():
            obs, reward, term, trunc = self._row(outcome)
            observations[i] = obs
            rewards[i] = reward
            terminated[i] = term
            truncated[i] = trunc
            info = self._info(outcome)
            if info:
                info_of[i] = info
            else:
                info_of.pop(i, None)
        infos = {}
        for i in sorted(info_of):  # in sub-env order: the first value of a key sets its dtype
            add_info(infos, info_of[i], i, n)
        result = (observations, rewards, terminated, truncated, infos)
        return self.check(outcomes.values(), result)

    def _call_rows(self, call: Call, position: dict[int, int], out: list[Any]) -> None:
        """Lay `call`'s rows and outcomes into `out` = [observations, rewards, terminated,
        truncated, infos by position] at the positions of their sub-envs."""
        observations, rewards, terminated, truncated, info_of = out
        for row in call.rows:
            where = [position[sub.index] for sub in row.subs]
            for j, obs in zip(where, row.observations, strict=True):
                observations[j] = obs
            rewards[where] = row.rewards
            terminated[where] = row.terminated
            truncated[where] = row.truncated
            if row.metadata is not None:
                for j, meta in zip(where, row.metadata, strict=True):
                    if meta:
                        info_of[j] = dict(meta)
        for i, outcome in call.outcomes.items():
            j = position[i]
            observations[j], rewards[j], terminated[j], truncated[j] = self._row(outcome)
            info = self._info(outcome)
            if info:
                info_of[j] = info
            else:
                info_of.pop(j, None)

    def sent_result(self, call: Call) -> StepBatch:
        """The `recv` result of a complete batched send, in the order its sub-envs were sent."""
        order = call.order
        assert order is not None
        rows = call.rows
        env_ids = np.asarray(order, dtype=np.int64)
        if len(rows) == 1 and not call.outcomes and [s.index for s in rows[0].subs] == order:
            row = rows[0]  # the hot path: all ordinary steps
            infos: dict[str, Any] = {}
            if row.metadata is not None:
                for j, meta in enumerate(row.metadata):
                    if meta:
                        add_info(infos, dict(meta), j, len(order))
            return StepBatch(
                env_ids, row.observations, row.rewards, row.terminated, row.truncated, infos
            )
        return self.mixed_result([call])

    def mixed_result(self, parts: Sequence[Outcome | Call]) -> StepBatch:
        """The `recv` result of ready outcomes and batched sends' calls, in their order."""
        order = [
            i
            for part in parts
            for i in (part.order or () if isinstance(part, Call) else [part.index])
        ]
        n = len(order)
        position = {i: j for j, i in enumerate(order)}
        out: list[Any] = [
            [None] * n,
            np.zeros(n, dtype=np.float64),
            np.zeros(n, dtype=np.bool_),
            np.zeros(n, dtype=np.bool_),
            {},
        ]
        for part in parts:
            if isinstance(part, Call):
                self._call_rows(part, position, out)
                continue
            single = Call()
            single.outcomes[part.index] = part
            self._call_rows(single, position, out)
        observations, rewards, terminated, truncated, info_of = out
        infos: dict[str, Any] = {}
        for j in sorted(info_of):
            add_info(infos, info_of[j], j, n)
        env_ids = np.asarray(order, dtype=np.int64)
        return StepBatch(env_ids, observations, rewards, terminated, truncated, infos)

    def reset_result(self, call: Call, n: int) -> tuple[list[Any], dict[str, Any]]:
        observations = [sub.obs for sub in self.subs[:n]]
        infos: dict[str, Any] = {}
        for index, outcome in call.outcomes.items():
            if outcome.reset is not None:
                observations[index] = outcome.reset.observation
            info = self._info(outcome)
            if info:
                add_info(infos, info, index, n)
        return observations, infos

    def failures(self, outcomes: Iterable[Outcome]) -> dict[int, Failure]:
        return {o.index: o.failure for o in outcomes if o.failure is not None}

    def check(self, outcomes: Iterable[Outcome], result: Any) -> Any:
        """Apply the error policy: with `raise`, any failure raises (the result attached)."""
        if self.errors == "raise":
            raise_failures(self.failures(outcomes), result)
        return result

    def close_recording(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


def raise_failures(failures: dict[int, Failure], result: Any) -> None:
    """`errors="raise"`: raise what `failures` (by sub-env) say, `result` attached: an
    EpisodeLost if any of them ended an episode, else a SubEnvError. Nothing when none."""
    if failures:
        kind = EpisodeLost if any(f.ends_episode for f in failures.values()) else SubEnvError
        error = kind({i: f.error for i, f in failures.items()}, result)
        raise error from error.cause


def select_subs(core: VectorCore, env_ids: Any) -> list[Sub]:
    if env_ids is None:
        return list(core.subs)
    ids = [int(i) for i in np.asarray(env_ids).reshape(-1)]
    for i in ids:
        if not 0 <= i < core.num_envs:
            raise IndexError(f"sub-env index {i} out of range (num_envs={core.num_envs})")
    if len(set(ids)) != len(ids):
        raise ValueError(f"a sub-env index appears twice in {ids}")
    return [core.subs[i] for i in ids]


def reset_plan(
    core: VectorCore, seed: Any, options: dict[str, Any] | None
) -> tuple[list[Sub], list[int | None], dict[str, Any]]:
    """Which sub-envs a `reset(seed, options)` resets (`options["reset_mask"]`: only those),
    their seeds, and the reset options."""
    options = dict(options or {})
    seeds = seeds_for(seed, core.num_envs)
    mask = options.pop("reset_mask", None)
    merged = {**core.reset_options, **options}
    if mask is None:
        return list(core.subs), seeds, merged
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (core.num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({core.num_envs},)`, got {mask.shape}"
        )
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError("`options['reset_mask']` must contain at least one True value")
    chosen = [i for i in range(core.num_envs) if mask[i]]
    return [core.subs[i] for i in chosen], [seeds[i] for i in chosen], merged


def wanted(core: VectorCore, min_ready: int | None) -> int:
    """How many results `recv(min_ready)` waits for (default: every sub-env in flight)."""
    in_flight = sum(1 for sub in core.subs if sub.busy is not None and sub.sent is None)
    sending = sum(len(call.order or ()) for call in core.sending)
    available = core.ready_count + sending + in_flight
    if available == 0:
        raise ValueError("recv: no sub-env has a step in flight (send first)")
    want = available if min_ready is None else min_ready
    if not 1 <= want <= available:
        raise ValueError(f"recv(min_ready={want}) but {available} sub-env(s) can answer")
    return want


def take_ready(core: VectorCore, max_ready: int | None) -> StepBatch:
    """The results `recv` returns: the ready ones, oldest first, at most `max_ready` (a
    batched send's call split if it must be)."""
    ready = core.ready
    limit = core.ready_count if max_ready is None else min(max_ready, core.ready_count)
    if ready and type(ready[0]) is Call and len(ready[0].order or ()) == limit:
        call = ready.popleft()  # the usual case of an EnvPool loop: one server's batch
        core.ready_count -= limit
        assert isinstance(call, Call) and call.order is not None
        return core.check(call.outcomes.values(), core.sent_result(call))
    parts: list[Outcome | Call] = []
    taken = 0
    while taken < limit:
        entry = ready[0]
        if type(entry) is Call:
            assert entry.order is not None
            if taken + len(entry.order) > limit:
                entry, ready[0] = split_call(entry, limit - taken)
            else:
                ready.popleft()
            assert entry.order is not None
            taken += len(entry.order)
        else:
            ready.popleft()
            taken += 1
        parts.append(entry)
    core.ready_count -= taken
    singles = [part for part in parts if isinstance(part, Outcome)]
    if len(singles) == len(parts):  # per-sub-env sends only
        return core.check(singles, batch_of(core, singles))
    outcomes = [
        o for part in parts for o in (part.outcomes.values() if isinstance(part, Call) else [part])
    ]
    return core.check(outcomes, core.mixed_result(parts))


def split_call(call: Call, k: int) -> tuple[Call, Call]:
    """A complete batched send's call as two: its first `k` sub-envs (in send order), and the
    rest."""
    assert call.order is not None
    first, rest = Call(call.order[:k]), Call(call.order[k:])
    chosen = set(first.order or ())
    for row in call.rows:
        mask = np.fromiter((sub.index in chosen for sub in row.subs), dtype=np.bool_)
        for part, keep in ((first, mask), (rest, ~mask)):
            if keep.any():
                picks = np.flatnonzero(keep).tolist()
                part.rows.append(
                    Rows(
                        [row.subs[j] for j in picks],
                        [row.observations[j] for j in picks],
                        row.rewards[keep],
                        row.terminated[keep],
                        row.truncated[keep],
                        None if row.metadata is None else [row.metadata[j] for j in picks],
                    )
                )
    for index, outcome in call.outcomes.items():
        (first if index in chosen else rest).outcomes[index] = outcome
    return first, rest


def batch_of(core: VectorCore, outcomes: list[Outcome]) -> StepBatch:
    n = len(outcomes)
    observations, rewards, terminated, truncated, infos = core.step_result(outcomes, n)
    env_ids = np.fromiter((o.index for o in outcomes), dtype=np.int64, count=n)
    return StepBatch(env_ids, observations, rewards, terminated, truncated, infos)


def stack(observations: Sequence[Any], field: str, dtype: Any = None) -> np.ndarray:
    """One field of every observation as a numpy array (`stack(obs, "count")`): dicts and
    typed observations alike."""
    if observations and isinstance(observations[0], dict):
        return np.asarray([o[field] for o in observations], dtype=dtype)
    return np.asarray([getattr(o, field) for o in observations], dtype=dtype)


__all__ = [
    "AUTORESET_MODES",
    "ERROR_POLICIES",
    "EpisodeLost",
    "ObservationMismatch",
    "StepBatch",
    "SubEnvError",
    "VectorCore",
    "add_info",
    "seeds_for",
    "stack",
]
