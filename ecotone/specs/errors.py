"""Stable error codes.

A code is part of the protocol: once published it keeps its meaning. Every error reaches the
peer as an `Error` frame carrying one of these codes, a human message and structured details;
no error is ever signalled by dropping a connection.
"""

import enum


class ErrorCode(enum.StrEnum):
    """Why a request failed. The value is what goes on the wire."""

    INVALID_FRAME = "invalid_frame"
    """The bytes are not a valid JSON/MessagePack frame, or a field of the frame is wrong."""
    UNKNOWN_OP = "unknown_op"
    """The frame's `op` names no operation this protocol version knows."""
    TOO_LARGE = "too_large"
    """The frame is larger than the server's `max_frame_bytes`; it was discarded unread."""
    UNSUPPORTED_VERSION = "unsupported_version"
    """`hello` asked for a protocol version this server does not speak."""
    UNKNOWN_ENV = "unknown_env"
    """`open` named an environment this server does not serve."""
    UNKNOWN_SESSION = "unknown_session"
    """The session id is not open on this connection (never opened, closed, or reaped)."""
    CAPACITY = "capacity"
    """The server already holds `max_sessions` sessions; details say how many."""
    INVALID_ACTION = "invalid_action"
    """The action failed validation against the env's Action type; details name the field."""
    INVALID_ARGUMENT = "invalid_argument"
    """An argument other than the action is wrong (for instance reset options the env rejects)."""
    RESET_REQUIRED = "reset_required"
    """`step` before the session's first `reset`."""
    EPISODE_DONE = "episode_done"
    """`step` after the episode ended (done or truncated); `reset` starts the next one."""
    ENV_ERROR = "env_error"
    """The environment raised; details carry the exception type and message. The session stays
    open and may be reset."""
    TIMEOUT = "timeout"
    """The operation did not finish within its deadline."""
    INTERNAL = "internal"
    """A bug in ecotone itself. Please report it."""
