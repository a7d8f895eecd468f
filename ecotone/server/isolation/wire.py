"""What the server, the zygote and the env's worker process say to each other: MessagePack
(msgspec), framed.

Two channels, both unix socket pairs made for the purpose, never a network:

* **a worker's data socket** (a stream, one per session): the server sends a request, the
  worker answers it, one at a time. A frame is 4 bytes of length (little-endian) and that
  many bytes of MessagePack. A request is `[op, argument]` (the argument typed as the env
  takes it: an action, a State, reset's keywords); an answer is `[OK, value]` or
  `[RAISED, [type, message, kind, details]]` (`kind`: what the server raises in its place:
  `invalid_action`, `lookup` or `error`). The worker's first frame, before any request, is
  its constructor's outcome in the same form.
* **the zygote's control socket** (SOCK_SEQPACKET: a message is one send, whole or not at
  all, and a worker's socket rides on the message that names it, SCM_RIGHTS): the server
  asks `[START, recipe]` once, then `[SPAWN, id]` and `[KILL, pid]`; the zygote answers
  `[READY, error]`, `[SPAWNED, id, pid]` (with the fd) or `[SPAWN_FAILED, id, message]`,
  and tells `[EXITED, pid, status, signal]` of every worker it reaps. End of file is the end
  on either side: the zygote kills its workers and exits; the server knows its zygote died.
"""

from __future__ import annotations

import array
import socket
from typing import Any, Final

import msgspec

OK: Final = 0
RAISED: Final = 1

START: Final = "start"
SPAWN: Final = "spawn"
KILL: Final = "kill"
READY: Final = "ready"
SPAWNED: Final = "spawned"
SPAWN_FAILED: Final = "spawn_failed"
EXITED: Final = "exited"

HEADER: Final = 4
CONTROL_BYTES: Final = 1 << 20
"""The largest control message (a recipe: the env's factory and types, pickled)."""

ENCODER: Final = msgspec.msgpack.Encoder()
_REQUEST: Final = msgspec.msgpack.Decoder(tuple[str, msgspec.Raw])
_ANSWER: Final = msgspec.msgpack.Decoder(tuple[int, msgspec.Raw])
_CONTROL: Final = msgspec.msgpack.Decoder(list[Any])


class Recipe(msgspec.Struct, kw_only=True):
    """How the zygote makes the env: `factory` (the env's class or factory and its types,
    pickled: they are imported by reference), or, when they cannot be pickled, the env's
    `name` resolved by the installed plugins."""

    name: str
    path: list[str]
    """The server's `sys.path`, so that the zygote imports what the server imported."""
    factory: bytes | None = None
    """A pickled tuple: the factory, the action type, the State type, the task type."""
    asynchronous: bool = False
    """The env's methods are coroutines (run on trio in the worker)."""


def frame(message: Any) -> bytes:
    """`message` as one frame of a data socket."""
    body = ENCODER.encode(message)
    return len(body).to_bytes(HEADER, "little") + body


def request(op: str, argument: Any) -> bytes:
    """A request frame."""
    return frame((op, argument))


def read_request(body: bytes) -> tuple[str, msgspec.Raw]:
    """A request's op and its argument, still encoded (decoded as the op's type)."""
    return _REQUEST.decode(body)


def read_answer(body: bytes) -> tuple[int, msgspec.Raw]:
    """An answer's status (`OK`, `RAISED`) and its value, still encoded."""
    return _ANSWER.decode(body)


def decode(raw: msgspec.Raw | bytes, type: Any = Any) -> Any:
    """A value of a frame, as `type`."""
    return msgspec.msgpack.decode(raw, type=type)


def split(buffer: bytearray) -> bytes | None:
    """The first whole frame's body out of `buffer` (removed from it), or None."""
    if len(buffer) < HEADER:
        return None
    size = int.from_bytes(buffer[:HEADER], "little")
    end = HEADER + size
    if len(buffer) < end:
        return None
    body = bytes(buffer[HEADER:end])
    del buffer[:end]
    return body


def read_frame(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """The next frame's body from a blocking socket, or None at end of file."""
    while True:
        body = split(buffer)
        if body is not None:
            return body
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None
        buffer += chunk


def send_control(sock: socket.socket, message: Any, fd: int | None = None) -> None:
    """One control message, with a file descriptor riding on it."""
    data = ENCODER.encode(message)
    if fd is None:
        sock.send(data)
    else:
        fds = array.array("i", [fd])
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])


def receive_control(sock: socket.socket) -> tuple[list[Any], list[int]] | None:
    """The next control message and the descriptors on it, or None at end of file."""
    size = array.array("i").itemsize
    data, ancillary, _flags, _ = sock.recvmsg(CONTROL_BYTES, socket.CMSG_SPACE(4 * size))
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[: len(payload) - len(payload) % size])
            fds.extend(received)
    if not data:
        for fd in fds:
            socket.close(fd)
        return None
    return _CONTROL.decode(data), fds
