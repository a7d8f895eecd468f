"""Every frame of the ecotone wire protocol, as msgspec tagged unions.

Rules the protocol keeps:

* Every request carries an `id` chosen by the client (an int or a string). The server answers
  each request exactly once, with a response carrying the same `id`. Clients match responses by
  id, so a timed-out request can never be mistaken for the answer to a later one.
* Pipelining is legal: a client may send many requests before reading. Within one session the
  server answers in the order the requests arrived; across sessions, answers may interleave.
* Several sessions may be open on one connection; each request that touches a session names it.
* Failures are `error` frames, never dropped connections. A bad frame never ends or alters a
  session.
* Env-specific payloads (actions, observations, states) travel as nested values encoded with the
  connection's codec; the kernel decodes them against the env's declared types.
"""

from typing import Any, ClassVar, get_args

import msgspec

from ecotone.specs.errors import ErrorCode
from ecotone.specs.records import EnvInfo, TaskRef, ToolInfo

PROTOCOL_VERSION = 1
"""The version `hello` negotiates. Bumped only for incompatible changes."""

FEATURES: tuple[str, ...] = ("step_many.reset", "step_columns", "snapshots")
"""The features this package's servers list in `welcome` (and its clients use when listed)."""

SUBPROTOCOLS: dict[str, str] = {
    "ecotone.v1.json": "json",
    "ecotone.v1.msgpack": "msgpack",
}
"""WebSocket subprotocol name -> codec name. JSON text frames are the default."""

RequestId = int | str
"""A client-chosen request id, echoed back in the response."""


class Frame(msgspec.Struct, tag_field="op", kw_only=True, omit_defaults=True, gc=False):
    """Base of every frame: `op` (the tag) says which frame it is.

    Frames are acyclic wire data, so the cyclic garbage collector does not track them
    (`gc=False`, inherited).
    """

    id: RequestId | None = None


class RequestFrame(Frame, forbid_unknown_fields=True):
    """Base of client -> server frames. Unknown fields are rejected as `invalid_frame`."""

    id: RequestId
    session_bound: ClassVar[bool] = False


class EnvCallFrame(RequestFrame, kw_only=True):
    """Base of requests that call the env: they may ask for a shorter deadline."""

    call_timeout: float | None = None
    """Seconds the env call may take, at most; the server's (or the env's) deadline when
    omitted, and never longer than it. Past it the request is answered `timeout`."""


# --- requests (client -> server) -------------------------------------------------------------


class Hello(RequestFrame, tag="hello"):
    """Optional first request: check the protocol version and learn what the server serves.

    On tcp and unix, where there are no headers, it carries the token of a server that
    requires one: until it does, every other request is answered `unauthorized`.
    """

    version: int = PROTOCOL_VERSION
    token: str | None = None


class Describe(RequestFrame, tag="describe"):
    """Ask for an environment's name, description and JSON Schemas (default env if omitted)."""

    env: str | None = None


class Open(RequestFrame, tag="open"):
    """Open a new session with its own env instance.

    Answered by `opened` or `error` (`capacity`, `unknown_env`, `env_error` if the env's
    constructor raised).
    """

    env: str | None = None
    """Which env; the server's default env when omitted."""


class Reset(EnvCallFrame, tag="reset"):
    """Start a new episode in a session. Answered by `observation`."""

    session: str
    seed: int | None = None
    episode_id: str | None = None
    options: dict[str, Any] = {}
    """Passed to the env's `reset()` as keyword arguments. For an env that publishes tasks,
    `task` (an id, or a record), `split` and `index` choose the episode's task: the kernel
    reads them and passes the env `task=` the chosen record."""
    session_bound: ClassVar[bool] = True


class Step(EnvCallFrame, tag="step"):
    """Apply one action.

    Answered by `observation`, or `error` with `invalid_action` (details name the field),
    `reset_required`, `episode_done` or `env_error`.
    """

    session: str
    action: msgspec.Raw
    session_bound: ClassVar[bool] = True


class GetState(EnvCallFrame, tag="state"):
    """Ask for the session's current State. Answered by `state`."""

    session: str
    session_bound: ClassVar[bool] = True


class Close(RequestFrame, tag="close"):
    """Close a session and release its env.

    Answered by `closed`. Closing an unknown session is an `unknown_session` error; closing
    twice is therefore visible, never silent.
    """

    session: str
    session_bound: ClassVar[bool] = True


class ResetArgs(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False
):
    """A `reset` inside `step_many`: the fields of the `reset` request but its session."""

    seed: int | None = None
    episode_id: str | None = None
    options: dict[str, Any] = {}


class StepItem(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False
):
    """One session's action inside `step_many`, or its reset.

    Exactly one of `action` and `reset` (servers whose `welcome` lists the `step_many.reset`
    feature take resets).
    """

    session: str
    action: msgspec.Raw = msgspec.Raw(b"")
    reset: ResetArgs | None = None


class StepMany(EnvCallFrame, tag="step_many"):
    """Step many sessions in one round trip.

    Each item is ordered with the other requests of its session; the items run concurrently
    across sessions. Answered by one `step_many_result` whose items are in the same order as the
    request's. An item may reset its session instead of stepping it (`reset`, where the server's
    `welcome` lists `step_many.reset`): it is answered as that `reset` would be, so a vector
    env's autoresets ride in its steps.
    """

    steps: list[StepItem]


class StepColumns(EnvCallFrame, tag="step_columns"):
    """`step_many` by columns, for servers whose `welcome` lists `step_columns`.

    The sessions in one array, their actions in another, and no per-item objects on either side.
    Position `j` steps `sessions[j]` with `actions[j]`, or resets it instead where `j` is in
    `resets` (its action is then ignored, null by convention), with `reset`'s arguments. Ordered
    and run exactly as the `step_many` of the same items; answered by one `step_columns_result`.
    """

    sessions: list[str]
    actions: msgspec.Raw
    """An array as long as `sessions`."""
    resets: list[int] = []
    """Positions that reset their session instead of stepping it, each at most once."""
    reset: ResetArgs | None = None
    """The arguments of those resets (none: a plain reset)."""


class ListTools(EnvCallFrame, tag="list_tools"):
    """Ask which tools the session's env exposes (MCP-style).

    Answered by `tools`, or `unsupported` when the env exposes none.
    """

    session: str
    session_bound: ClassVar[bool] = True


class CallTool(EnvCallFrame, tag="call_tool"):
    """Call one of the env's tools.

    Answered by `tool_result`; an unknown tool name or bad arguments give `invalid_argument`,
    a tool that raises gives `env_error`.
    """

    session: str
    name: str
    arguments: dict[str, Any] = {}
    session_bound: ClassVar[bool] = True


class Render(EnvCallFrame, tag="render"):
    """Ask for the env's custom view of the session.

    Its `render()`'s: text, markdown, HTML, SVG or PNG (`rendered`; `unsupported`: it has
    none). A seat's holder (who may send it) gets its seat's picture, others the public one.
    """

    session: str
    session_bound: ClassVar[bool] = True


class Share(RequestFrame, tag="share"):
    """Let another connection act in this session.

    Answered by `shared` with a key. Whoever presents the key (the MCP face: an
    `X-Ecotone-Share` header) may step the session, read its state and call its tools, in order
    with the owner's requests; resetting, closing and sharing stay with the owner (`forbidden`
    otherwise), and the session still closes when its owner goes. So an orchestrator keeps
    reset and reward while an agent acts. The same key is answered every time; it dies with the
    session.
    """

    session: str
    session_bound: ClassVar[bool] = True


class SharedSteps(RequestFrame, tag="shared_steps"):
    """Ask what the guests' steps in a shared session observed (its owner only).

    Rewards and ends included, from step number `since` on (steps are numbered from 0, in the
    order they ran). Answered by `shared_steps_result`. The server keeps the last 1,024.
    """

    session: str
    since: int = 0
    session_bound: ClassVar[bool] = True


class ListTasks(RequestFrame, tag="list_tasks"):
    """Ask for the splits of an env's tasks and a page of one split.

    The first split when `split` is omitted: at most `limit` tasks (1000 at most) from
    `offset`. Answered by `tasks`; an env that publishes no tasks answers with no splits.
    """

    env: str | None = None
    split: str | None = None
    offset: int = 0
    limit: int = 100


class GetTask(RequestFrame, tag="get_task"):
    """Ask for one task: by `task` (its id), or by `split` and `index`.

    Answered by `task`, or `invalid_argument` naming what is unknown.
    """

    env: str | None = None
    task: str | None = None
    split: str | None = None
    index: int | None = None


class Snapshot(EnvCallFrame, tag="snapshot"):
    """Save the session's episode where it is, on the server.

    Answered by `snapshotted` with the snapshot's id and size. The snapshot holds the env's
    whole state (its random generators included), the episode's id, step count, task, last
    observation and the rubric's running state. It is kept in a bounded store
    (`[limits] max_snapshots`, `max_snapshot_bytes`, `max_snapshot_store_bytes`), owned by the
    token that made it, or by the connection on a server without tokens (and dropped with
    it). An env that cannot be saved answers `unsupported` with the reason; a session with no
    episode yet, `reset_required`.
    """

    session: str
    durable: bool = False
    """Write it to the server's checkpoint directory under the session's resume key instead
    of keeping it in the store (a server without `--checkpoint-dir` answers `unsupported`)."""
    session_bound: ClassVar[bool] = True


class Restore(EnvCallFrame, tag="restore"):
    """Put a saved episode back into a session.

    The episode is a snapshot of this server by id, an exported one (`blob`, from this
    server or another with the same snapshot key), or the last checkpoint of a resume key
    (`checkpoint`); exactly one of the three. Answered by `restored` with the episode's
    id, step count, task and observation. A blob of another env, of another version of it,
    of a state of another shape or not sealed by this server's key is refused with
    `snapshot_mismatch` naming what differs, and the session is left as it was.
    """

    session: str
    snapshot: str | None = None
    blob: bytes | None = None
    checkpoint: str | None = None
    """A resume key (`opened`'s `resume`): the last checkpoint written under it. The session
    then keeps checkpointing under that key."""
    session_bound: ClassVar[bool] = True


class Fork(EnvCallFrame, tag="fork"):
    """Make `n` new sessions, each holding a copy of this session's episode where it is.

    Answered by `forked` with their ids. Each copy goes on on its own, with a new episode id
    that names the one it came from (`forked_from`). The new sessions count against the
    same capacity limits as opened ones; if they do not all fit, none is made (`capacity`).
    """

    session: str
    n: int = 1
    session_bound: ClassVar[bool] = True


class ExportSnapshot(RequestFrame, tag="export_snapshot"):
    """Ask for a snapshot as bytes another server can restore (`restore` with `blob`).

    Answered by `snapshot_export`. The bytes are sealed (authenticated encryption with the
    server's snapshot key): whoever holds them can neither read nor alter them, and only a
    server with the same key restores them.
    """

    snapshot: str


class DropSnapshot(RequestFrame, tag="drop_snapshot"):
    """Forget a snapshot, freeing its room in the store. Answered by `snapshot_dropped`."""

    snapshot: str


class Seats(RequestFrame, tag="seats"):
    """Ask for a multi-agent session's seat keys (its owner only). Answered by `seat_keys`.

    Whoever presents a seat's key (`join`) plays that seat; the spectator key reads the public
    view. The same keys every time; they die with the session.
    """

    session: str
    session_bound: ClassVar[bool] = True


class Join(RequestFrame, tag="join"):
    """Take the seat a key names (or watch, with the spectator key). Answered by `joined`.

    A key no open session has is `unknown_seat_key`; a seat another live connection holds is
    `seat_taken`. A seat whose connection dropped is held for it: the same key takes it back.
    """

    key: str


class Play(EnvCallFrame, tag="play"):
    """A move of one seat in a multi-agent session. Answered by `seat_view`: the seat's view.

    `seat` may be omitted: the connection's seat (its owner: whose turn it is). Out of turn is
    `not_your_turn` naming whose turn it is, and nothing changes; a seat this connection does
    not hold is `forbidden`. A simultaneous env's move is answered once its round is played.
    """

    session: str
    action: msgspec.Raw
    seat: str | None = None
    session_bound: ClassVar[bool] = True


class Observe(RequestFrame, tag="observe"):
    """Read a seat's view (a seat holder: its own; the owner: any), or the public view.

    `seat` null: the connection's seat, or the public view for a spectator or the owner. With
    `wait`, a seat's answer waits until it is the seat's turn or the episode ends, and the
    public view's until the next move; a waiting `observe` holds no other request back.
    Answered by `seat_view`.
    """

    session: str
    seat: str | None = None
    wait: bool = False
    session_bound: ClassVar[bool] = True


class Keepalive(RequestFrame, tag="keepalive"):
    """Renew the leases of sessions and seats; nothing else changes. Answered by `kept`.

    Every session is held by a lease (`opened`'s `lease` seconds): each request about it
    renews it, and one that nothing renews for that long, idle, is reclaimed (closed); a seat
    a connection took with `join` likewise (released). A client idle longer sends this. It
    may come on any connection to the server (the clients send it on one of their own): it
    renews each session named that this connection may act in, or that a connection showing
    the same token opened (on a server without tokens, any: an id is the capability to
    renew, never to act), with the seats this connection holds there; and each seat whose
    key is in `seats`, while it is held.
    """

    sessions: list[str] = []
    seats: list[str] = []
    """Seat keys (`seat_keys`), for the seats their holders took with `join`."""


class Ping(RequestFrame, tag="ping"):
    """Application-level liveness check. Answered by `pong`.

    The `pong` also says whether the server has room for a new session (`ready`). A ping
    needs no token.
    """


Request = (
    Hello
    | Describe
    | Open
    | Reset
    | Step
    | GetState
    | Close
    | StepMany
    | StepColumns
    | ListTools
    | CallTool
    | Render
    | Share
    | SharedSteps
    | ListTasks
    | GetTask
    | Snapshot
    | Restore
    | Fork
    | ExportSnapshot
    | DropSnapshot
    | Seats
    | Join
    | Play
    | Observe
    | Keepalive
    | Ping
)
"""Every client -> server frame."""

REQUEST_OPS: frozenset[str] = frozenset(t.__struct_config__.tag for t in get_args(Request))
"""The `op` of every request frame."""


# --- responses (server -> client) ------------------------------------------------------------


class Welcome(Frame, tag="welcome"):
    """Answer to `hello`."""

    version: int
    server: str
    envs: list[str]
    features: list[str] = []
    """What this server does beyond version 1's frames: `step_many.reset` (a `step_many`
    item may be a reset, see `StepItem`), `step_columns` (it takes `step_columns`, `step_many`
    by columns, see `StepColumns`), `snapshots` (it takes `snapshot`, `restore`, `fork`,
    `export_snapshot` and `drop_snapshot`)."""


class Described(Frame, tag="described"):
    """Answer to `describe`."""

    info: EnvInfo


class Opened(Frame, tag="opened"):
    """Answer to `open`: the new session's id (chosen by the server).

    On a server that keeps checkpoints (`serve --checkpoint-dir`), `resume` is the session's
    resume key: a `restore` with it as `checkpoint`, on this server or one started later on
    the same directory, resumes the session's last checkpoint. Keep it secret: it is the
    capability to resume the episode.
    """

    session: str
    env: str
    resume: str | None = None
    lease: float | None = None
    """Seconds the session's lease lasts: idle and renewed by no request or `keepalive` for
    that long, it is reclaimed (null: never)."""


class ObservationFrame(Frame, tag="observation"):
    """Answer to `reset` and `step`: the env's Observation.

    It carries `reward`, `done`, `truncated` and `metadata` besides the env's own fields. A
    reset of an env that publishes tasks names the `task` the episode runs.
    """

    session: str
    observation: msgspec.Raw
    task: TaskRef | None = None


class StateFrame(Frame, tag="state"):
    """Answer to `state`: the env's State (`episode_id`, `step_count` and the env's fields)."""

    session: str
    state: msgspec.Raw


class Closed(Frame, tag="closed"):
    """Answer to `close`."""

    session: str


class Error(Frame, tag="error"):
    """A request failed.

    `id` is the failed request's id when it could be read, else null. `session` names the session
    concerned, if any. `details` is structured: for validation errors, `path` is the JSON path of
    the bad field and `field` its dotted name; for `env_error`, `type` and `message` of the
    exception, or `reason: env_lost` when the env's process died (`signal`, `exit_status`).
    """

    id: RequestId | None  # always present: null when the failed request's id is unknown
    code: ErrorCode
    message: str
    session: str | None = None
    details: dict[str, Any] = {}


class StepManyResult(Frame, tag="step_many_result"):
    """Answer to `step_many`: an answer per item, in request order.

    Each is the `observation` or `error` frame a single `step` would have produced (with the
    `step_many` request's id).
    """

    results: list[ObservationFrame | Error]


class StepColumnsResult(Frame, tag="step_columns_result"):
    """Answer to `step_columns`: what the `step_many_result` of the same items would hold.

    By columns: `observations[j]` is position `j`'s observation, null where it failed; `errors`
    has the `error` frame of each position that failed, `tasks` the task of each reset that
    names one (both by position, omitted when empty). In JSON, whose object keys are strings,
    the keys of `errors` and `tasks` are the positions as decimal strings (`{"2": {...}}`);
    in MessagePack they are integers.
    """

    observations: list[msgspec.Raw]
    errors: dict[int, Error] = {}
    tasks: dict[int, TaskRef] = {}


class Tools(Frame, tag="tools"):
    """Answer to `list_tools`."""

    session: str
    tools: list[ToolInfo]


class ToolResult(Frame, tag="tool_result"):
    """Answer to `call_tool`: whatever the tool returned."""

    session: str
    result: msgspec.Raw


class Rendered(Frame, tag="rendered"):
    """Answer to `render`: the env's custom view (`kind`: text, markdown, html, svg, image).

    `content` is the text (an SVG document's), or for `image` the PNG's bytes in base64.
    """

    session: str
    kind: str
    content: str


class Shared(Frame, tag="shared"):
    """Answer to `share`: the key that lets another connection act in the session."""

    session: str
    key: str


class SharedStepsResult(Frame, tag="shared_steps_result"):
    """Answer to `shared_steps`: the observations of the guests' steps.

    Those numbered `since` to `next - 1` (fewer when some are no longer kept: `dropped` says how
    many were skipped). Ask again with `since = next` for the ones after.
    """

    session: str
    observations: list[msgspec.Raw]
    next: int
    dropped: int = 0


class TaskPage(Frame, tag="tasks"):
    """Answer to `list_tasks`: every split's size, and a page of one split.

    `tasks` of `split` from `offset` (`total` in the split): each record without the fields
    the env hides, its id at the same position in `ids`.
    """

    env: str
    splits: dict[str, int]
    split: str | None = None
    offset: int = 0
    total: int = 0
    tasks: list[msgspec.Raw] = []
    ids: list[str] = []


class TaskAnswer(Frame, tag="task"):
    """Answer to `get_task`: the task record, with its id, split and index."""

    env: str
    ref: TaskRef
    task: msgspec.Raw


class Snapshotted(Frame, tag="snapshotted"):
    """Answer to `snapshot`: the snapshot's id, its size in bytes, and the episode it holds.

    A durable one was written to the checkpoint directory (`durable`, no id).
    """

    session: str
    snapshot: str = ""
    size: int = 0
    durable: bool = False
    episode_id: str | None = None
    step_count: int = 0


class Restored(Frame, tag="restored"):
    """Answer to `restore`: the episode the session now runs, where it stands.

    `observation` is the last one the episode gave (as its `step` or `reset` answered it);
    when its flags ended the episode, steps are `episode_done` until a reset.
    """

    session: str
    episode_id: str | None = None
    step_count: int = 0
    observation: msgspec.Raw = msgspec.Raw(b"null")
    task: TaskRef | None = None
    forked_from: str | None = None


class Forked(Frame, tag="forked"):
    """Answer to `fork`: the new sessions, and each one's new episode id.

    They all stand where the session stood: `observation` is its last one.
    """

    session: str
    sessions: list[str]
    episode_ids: list[str]
    forked_from: str | None = None
    """The episode they came from."""
    step_count: int = 0
    observation: msgspec.Raw = msgspec.Raw(b"null")
    task: TaskRef | None = None
    resume_keys: list[str] = []
    """Each new session's resume key, on a server that keeps checkpoints."""


class SnapshotExport(Frame, tag="snapshot_export"):
    """Answer to `export_snapshot`: the sealed bytes (base64 in JSON)."""

    snapshot: str
    blob: bytes


class SnapshotDropped(Frame, tag="snapshot_dropped"):
    """Answer to `drop_snapshot`."""

    snapshot: str


class SeatKeys(Frame, tag="seat_keys"):
    """Answer to `seats`: each seat's key, and the spectator key. Keep them secret."""

    session: str
    keys: dict[str, str]
    spectate: str


class Joined(Frame, tag="joined"):
    """Answer to `join`: the session, and the seat taken (null: a spectator)."""

    session: str
    env: str
    seat: str | None = None
    seats: list[str] = []
    lease: float | None = None
    """Seconds the seat's lease lasts (`opened`'s `lease`; a spectator holds none)."""


class SeatView(Frame, tag="seat_view"):
    """Answer to `play` and `observe`: one seat's view (null `seat`: the public view).

    `turn`: whose turn it is (null: nobody's, or the seats move at once); `acting`: the seats
    the episode waits for (whose turn it is, or those yet to move in the round); `lost`: the
    seats released after their connection dropped, when that ended the episode.
    """

    session: str
    observation: msgspec.Raw
    seat: str | None = None
    turn: str | None = None
    lost: list[str] = []
    acting: list[str] = []


class Pong(Frame, tag="pong"):
    """Answer to `ping`."""

    ready: bool | None = None
    """Whether the server has room for a new session and is not draining (what `GET /ready`
    says on the HTTP ports): false while it holds `max_sessions` or is stopping. Null from a
    server that does not say."""


class Kept(Frame, tag="kept"):
    """Answer to `keepalive`: what it renewed nothing for, and how long a lease lasts."""

    unknown: list[str] = []
    """The session ids and seat keys named that renewed nothing: closed (reclaimed, or by
    their owner), never opened, not this connection's to renew, or a seat no longer held."""
    lease: float | None = None
    """Seconds a lease lasts on this server (null: nothing is reclaimed)."""


Response = (
    Welcome
    | Described
    | Opened
    | ObservationFrame
    | StateFrame
    | Closed
    | StepManyResult
    | StepColumnsResult
    | Tools
    | ToolResult
    | Rendered
    | Shared
    | SharedStepsResult
    | TaskPage
    | TaskAnswer
    | Snapshotted
    | Restored
    | Forked
    | SnapshotExport
    | SnapshotDropped
    | SeatKeys
    | Joined
    | SeatView
    | Kept
    | Pong
    | Error
)
"""Every server -> client frame."""
