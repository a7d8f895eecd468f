"""Stable error codes.

A code is part of the protocol: once published it keeps its meaning. Every error reaches the
peer as an `Error` frame carrying one of these codes, a human message and structured details;
no error is ever signalled by dropping a connection.
"""

import enum


class ErrorCode(enum.StrEnum):
    """Why a request failed: the stable code of an `error` frame.

    The value is what goes on the wire; once published, a code keeps its meaning
    (`ERROR_DESCRIPTIONS` says what each means, docs/protocol.md lists them). A client raises
    the error as a `ServerError` whose `code` is the value: `InvalidActionError` for
    `invalid_action`, `CapacityError` for `capacity`, `EnvError` for `env_error`,
    `AccessDenied` for `unauthorized` and `forbidden`.

    Example:
        A str enum, so a member compares equal to its value (a `ServerError`'s `code`):

        >>> ecotone.ErrorCode.UNKNOWN_SESSION == "unknown_session"
        True
        >>> ecotone.ErrorCode("episode_done")
        <ErrorCode.EPISODE_DONE: 'episode_done'>
    """

    INVALID_FRAME = "invalid_frame"
    UNKNOWN_OP = "unknown_op"
    TOO_LARGE = "too_large"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_ENV = "unknown_env"
    UNKNOWN_SESSION = "unknown_session"
    CAPACITY = "capacity"
    INVALID_ACTION = "invalid_action"
    INVALID_ARGUMENT = "invalid_argument"
    RESET_REQUIRED = "reset_required"
    EPISODE_DONE = "episode_done"
    UNSUPPORTED = "unsupported"
    ENV_ERROR = "env_error"
    TIMEOUT = "timeout"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    UNKNOWN_SNAPSHOT = "unknown_snapshot"
    SNAPSHOT_MISMATCH = "snapshot_mismatch"
    SHUTTING_DOWN = "shutting_down"
    NOT_YOUR_TURN = "not_your_turn"
    SEAT_TAKEN = "seat_taken"
    UNKNOWN_SEAT_KEY = "unknown_seat_key"
    INTERNAL = "internal"


ERROR_DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.INVALID_FRAME: (
        "The bytes are not a valid JSON/MessagePack frame, or a field of the frame is wrong."
    ),
    ErrorCode.UNKNOWN_OP: ("The frame's `op` names no operation this protocol version knows."),
    ErrorCode.TOO_LARGE: (
        "The frame is larger than the server's `max_frame_bytes`; it was discarded unread."
    ),
    ErrorCode.UNSUPPORTED_VERSION: (
        "`hello` asked for a protocol version this server does not speak."
    ),
    ErrorCode.UNKNOWN_ENV: ("`open` named an environment this server does not serve."),
    ErrorCode.UNKNOWN_SESSION: (
        "The session id is not open on this connection (never opened, closed, or reaped)."
    ),
    ErrorCode.CAPACITY: ("The server already holds `max_sessions` sessions; details say how many."),
    ErrorCode.INVALID_ACTION: (
        "The action failed validation against the env's Action type, or the env refused it "
        "(`ecotone.InvalidAction`, e.g. an illegal move); details name the field. The step "
        "did not happen."
    ),
    ErrorCode.INVALID_ARGUMENT: (
        "An argument other than the action is wrong (for instance reset options the env rejects)."
    ),
    ErrorCode.RESET_REQUIRED: ("`step` before the session's first `reset`."),
    ErrorCode.EPISODE_DONE: (
        "`step` after the episode ended (done or truncated); `reset` starts the next one."
    ),
    ErrorCode.UNSUPPORTED: (
        "The env does not offer this operation (for instance `list_tools` on an env with no tools)."
    ),
    ErrorCode.ENV_ERROR: (
        "The environment raised; details carry the exception type and message. "
        "The session stays open and may be reset. On a server that runs each session's env in "
        "a process of its own, `reason: env_lost` says that process died (with `signal` or "
        "`exit_status`): a reset starts a fresh one, or a restore of the session's checkpoint."
    ),
    ErrorCode.TIMEOUT: (
        "The env call did not end within its deadline (the server's `call_timeout`, the env's, "
        "or the request's shorter one). The session's env is set aside: `reset` gets a fresh "
        "env instance, or `close` the session."
    ),
    ErrorCode.UNAUTHORIZED: (
        "The server requires a token and the request carried none, or a wrong one "
        "(`Authorization: Bearer`, `?token=`, or `hello`'s `token` on tcp/unix)."
    ),
    ErrorCode.FORBIDDEN: (
        "The request came from a web page of another origin, or named a host this server "
        "does not answer for (`[access]` origins and hosts)."
    ),
    ErrorCode.UNKNOWN_SNAPSHOT: (
        "The snapshot id names no snapshot this token (or, on a server without tokens, this "
        "connection) holds: never made, dropped, or made by another."
    ),
    ErrorCode.SNAPSHOT_MISMATCH: (
        "The snapshot cannot go into this session: another env, another version of it, a "
        "state of another shape, another format, or bytes this server's key did not seal "
        "(details say which). The session is left as it was."
    ),
    ErrorCode.SHUTTING_DOWN: (
        "The server is stopping (SIGTERM). While it drains it opens no session and starts no "
        "episode (`open`, `reset`, `restore`, `fork`), and running episodes go on for its "
        "`drain_timeout`; then it checkpoints the sessions left (on a server with a checkpoint "
        "directory) and refuses every request of a session but `close`. The message says "
        "whether the session was checkpointed: a client connected with `resume=True` resumes "
        "it on another server; otherwise open a new session elsewhere. Also sent without an "
        "id to each connection holding sessions just before the server closes it."
    ),
    ErrorCode.NOT_YOUR_TURN: (
        "A `play` of a seat whose turn it is not; details name the seat whose turn it is "
        "(`turn`, null when the episode is over). Nothing changed."
    ),
    ErrorCode.SEAT_TAKEN: (
        "`join` named a seat another live connection holds (a seat is held by one "
        "connection at a time); details name the seat."
    ),
    ErrorCode.UNKNOWN_SEAT_KEY: (
        "`join` presented a key no open multi-agent session gave out (never given, or its "
        "session closed)."
    ),
    ErrorCode.INTERNAL: ("A bug in ecotone itself. Please report it."),
}
"""What each code means; published in docs/protocol.md."""


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_FRAME: 400,
    ErrorCode.UNKNOWN_OP: 400,
    ErrorCode.UNSUPPORTED_VERSION: 400,
    ErrorCode.UNKNOWN_SESSION: 404,
    ErrorCode.UNKNOWN_ENV: 404,
    ErrorCode.RESET_REQUIRED: 409,
    ErrorCode.EPISODE_DONE: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.INVALID_ACTION: 422,
    ErrorCode.INVALID_ARGUMENT: 422,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.CAPACITY: 503,
    ErrorCode.ENV_ERROR: 500,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.UNKNOWN_SNAPSHOT: 404,
    ErrorCode.SNAPSHOT_MISMATCH: 409,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.NOT_YOUR_TURN: 409,
    ErrorCode.SEAT_TAKEN: 409,
    ErrorCode.UNKNOWN_SEAT_KEY: 404,
    ErrorCode.INTERNAL: 500,
}
"""The HTTP status that carries each error frame over the HTTP transport."""
