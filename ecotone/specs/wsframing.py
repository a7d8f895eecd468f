"""WebSocket data framing (RFC 6455, no extensions), sans-IO, for the hot path.

The opening handshake is wsproto's (or h11's) job; once a connection is open, this module
reads and writes its frames. It exists because wsproto's general machinery (events, a frame
generator, per-byte state) costs more per message than a whole env step (the figures are in
docs/architecture.md, "WebSocket without a WebSocket library on the data path").

Rules kept: client frames must be masked and server frames must not be; control frames are at
most 125 bytes and never fragmented; a 64-bit length has its top bit clear (§5.2); a message
larger than `max_message` is skipped as it arrives (nothing buffered) and reported once as
`TooLarge` (with its payload's size), every fragment after the first counting `FRAGMENT_COST`
bytes besides its payload (so a flood of empty fragments is too large too) and at most
`max_fragments` of them; reserved bits set, an
unknown opcode, a continuation without a start or a new message inside a fragmented one are
protocol errors (the connection then closes with 1002); a text message that is not UTF-8
fails it with 1007 (§8.1). `close_reply` checks a received close frame and says what to
answer (§5.5.1, §7.4): its code echoed, an empty close for an empty one, 1002 for a code no
endpoint may send, 1007 for a reason that is not UTF-8.
"""

from __future__ import annotations

import functools
import os
import struct
import sys
from typing import Any, Final

import attrs

TEXT: Final = 0x1
BINARY: Final = 0x2
CONTINUATION: Final = 0x0
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA

_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")


NUMPY_FROM: Final = 512
"""Payloads of at least this many bytes are (un)masked with numpy when the process has
imported it already (a vector env, a Gymnasium env): 5x faster at 8 KB; else with the key
spread over 32-bit lanes by one multiply (20% faster than repeating the key, which is
cheaper below this size). This module never imports numpy (`import ecotone` must not)."""


CACHED_WORDS: Final = 4096
"""`_lanes` of payloads up to 16 KiB are kept (one per length, 256 lengths at most: a few MiB
at worst); larger ones are made each time, which costs little beside masking them."""


def _lanes(words: int) -> int:
    """The integer whose `words` little-endian 32-bit lanes each hold 1: times a mask key, the
    key repeated over `words` lanes (no lane carries into the next)."""
    if words <= CACHED_WORDS:
        return _cached_lanes(words)
    return ((1 << (32 * words)) - 1) // 0xFFFFFFFF


@functools.lru_cache(maxsize=256)
def _cached_lanes(words: int) -> int:
    return ((1 << (32 * words)) - 1) // 0xFFFFFFFF


def _numpy() -> Any:
    """numpy, if this process has imported it already and the import is complete (another
    thread may be importing it: a half-made module has no `empty` yet), else None."""
    np = sys.modules.get("numpy")
    if np is None or getattr(getattr(np, "__spec__", None), "_initializing", False):
        return None
    return np


def _unmask(payload: bytes | bytearray | memoryview, key: bytes) -> bytes:
    """`payload` XOR the 4-byte `key` repeated (masking and unmasking are the same, §5.3)."""
    n = len(payload)
    if n == 0:
        return b""
    if n < NUMPY_FROM:  # a small frame: the key repeated, one XOR (the cheapest here)
        repeated = (key * (n // 4 + 1))[:n]
        masked = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
        return masked.to_bytes(n, "little")
    np = _numpy()
    if np is not None:
        try:
            return _unmask_numpy(np, payload, key)
        except AttributeError:  # a numpy this process is still setting up: the other way
            pass
    words = (n + 3) // 4
    masked = int.from_bytes(payload, "little") ^ (int.from_bytes(key, "little") * _lanes(words))
    return masked.to_bytes(4 * words, "little")[:n]


def _unmask_numpy(np: Any, payload: bytes | bytearray | memoryview, key: bytes) -> bytes:
    n = len(payload)
    words = n // 4
    out = np.empty(n, dtype=np.uint8)
    data = np.frombuffer(payload, dtype=np.uint8)
    np.bitwise_xor(
        data[: words * 4].view(np.uint32),
        np.frombuffer(key, dtype=np.uint32)[0],
        out=out[: words * 4].view(np.uint32),
    )
    tail = n - words * 4
    if tail:
        out[words * 4 :] = data[words * 4 :] ^ np.frombuffer(key[:tail], dtype=np.uint8)
    result: bytes = out.tobytes()
    return result


def encode(opcode: int, payload: bytes, *, mask: bool) -> bytes:
    """One final frame. Clients pass `mask=True` (a fresh random key per frame)."""
    n = len(payload)
    first = 0x80 | opcode
    bit = 0x80 if mask else 0
    if n < 126:
        head = bytes((first, bit | n))
    elif n < 65536:
        head = bytes((first, bit | 126)) + _U16.pack(n)
    else:
        head = bytes((first, bit | 127)) + _U64.pack(n)
    if mask:
        key = os.urandom(4)
        return head + key + _unmask(payload, key)
    return head + payload


def close_payload(code: int, reason: str = "") -> bytes:
    return _U16.pack(code) + reason.encode()[:120]


@attrs.frozen(slots=True)
class Message:
    text: bool
    data: bytes


@attrs.frozen(slots=True)
class TooLarge:
    size: int


@attrs.frozen(slots=True)
class Control:
    opcode: int
    payload: bytes

    @property
    def close_code(self) -> int:
        return _U16.unpack_from(self.payload)[0] if len(self.payload) >= 2 else 1005


class ProtocolError(Exception):
    """The peer broke RFC 6455; close the connection with `code` (1002, or 1007 for text
    that is not UTF-8)."""

    def __init__(self, message: str, code: int = 1002) -> None:
        super().__init__(message)
        self.code = code


FRAGMENT_COST: Final = 64
"""Bytes a fragment counts against `max_message` besides its payload (what holding it costs)."""

_SENDABLE_CODES = frozenset(
    {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}
)


def close_reply(payload: bytes) -> bytes:
    """The payload of the close frame that answers a received one: its code echoed (never
    1005, 1006 or 1015, which no endpoint may send), or nothing for an empty close. Raises
    ProtocolError (1002) for a bad code or a one-byte payload, (1007) for a reason that is
    not UTF-8."""
    if not payload:
        return b""
    if len(payload) == 1:
        raise ProtocolError("a close frame's payload is a 2-byte code, then a reason")
    code = _U16.unpack_from(payload)[0]
    if code not in _SENDABLE_CODES and not 3000 <= code <= 4999:
        raise ProtocolError(f"close code {code} is not one an endpoint may send")
    try:
        payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("the close frame's reason is not UTF-8", 1007) from None
    return payload[:2]


Event = Message | TooLarge | Control


@attrs.define(slots=True)
class FrameReader:
    """Feed received bytes; get whole messages, control frames and TooLarge markers out."""

    masked: bool
    """True on a server (client frames are masked)."""
    max_message: int
    max_fragments: int = 1024
    """Frames one message may come in (more: the message is too large)."""
    check_text: bool = True
    """Fail a text message that is not UTF-8 (1007)."""
    _fragments: int = attrs.field(default=0, init=False)
    _buf: bytearray = attrs.field(factory=bytearray, init=False)
    _parts: list[bytes] = attrs.field(factory=list, init=False)
    _size: int = attrs.field(default=0, init=False)
    _text: bool | None = attrs.field(default=None, init=False)
    """Opcode of the fragmented message under way (None: none)."""
    _oversize: bool = attrs.field(default=False, init=False)
    _skip: int = attrs.field(default=0, init=False)
    _skip_final: bool = attrs.field(default=False, init=False)

    def feed(self, data: bytes) -> list[Event]:
        out: list[Event] = []
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
            if not self._skip and self._skip_final:
                self._finish_oversize(out)
        buf = self._buf
        buf += data
        pos = 0
        size = len(buf)
        while size - pos >= 2:
            b0 = buf[pos]
            b1 = buf[pos + 1]
            if b0 & 0x70:
                raise ProtocolError("reserved bits set (no extension was negotiated)")
            if bool(b1 & 0x80) is not self.masked:
                raise ProtocolError(
                    "client frames must be masked"
                    if self.masked
                    else "server frames must not be masked"
                )
            fin = b0 & 0x80
            opcode = b0 & 0x0F
            length = b1 & 0x7F
            head = 2
            if length == 126:
                if size - pos < 4:
                    break
                length = _U16.unpack_from(buf, pos + 2)[0]
                head = 4
            elif length == 127:
                if size - pos < 10:
                    break
                length = _U64.unpack_from(buf, pos + 2)[0]
                if length >> 63:
                    raise ProtocolError("a 64-bit frame length must have its top bit clear")
                head = 10
            if self.masked:
                head += 4
            if opcode >= 0x8:
                if not fin or length > 125:
                    raise ProtocolError("control frames must be final and at most 125 bytes")
                if opcode not in (CLOSE, PING, PONG):
                    raise ProtocolError(f"unknown control opcode {opcode:#x}")
            elif opcode == CONTINUATION:
                if self._text is None:
                    raise ProtocolError("continuation frame without a message to continue")
            elif opcode in (TEXT, BINARY):
                if self._text is not None:
                    raise ProtocolError("new message inside a fragmented one")
            else:
                raise ProtocolError(f"unknown opcode {opcode:#x}")
            fragments = self._fragments + 1  # counting this frame, once it is consumed
            if opcode < 0x8 and (
                self._oversize
                or self._size + length + FRAGMENT_COST * (fragments - 1) > self.max_message
                or fragments > self.max_fragments
            ):
                # Over the limit: drop this frame's payload without buffering it (once its
                # header, mask key included, is all here).
                if size - pos < head:
                    break
                if opcode != CONTINUATION:
                    self._text = opcode == TEXT
                self._oversize = True
                self._parts.clear()
                self._size += length
                self._fragments = fragments
                available = size - pos - head
                if available >= length:
                    pos += head + length
                    if fin:
                        self._finish_oversize(out)
                    continue
                self._skip = length - max(available, 0)
                self._skip_final = bool(fin)
                pos = size
                break
            end = pos + head + length
            if end > size:
                break
            payload: bytes
            if self.masked:
                key = bytes(buf[pos + head - 4 : pos + head])
                payload = _unmask(memoryview(buf)[pos + head : end], key)
            else:
                payload = bytes(buf[pos + head : end])
            pos = end
            if opcode >= 0x8:
                out.append(Control(opcode, payload))
                continue
            self._fragments = fragments
            if opcode != CONTINUATION:
                self._text = opcode == TEXT
            if fin and not self._parts:
                out.append(self._message(payload))
                continue
            self._parts.append(payload)
            self._size += length
            if fin:
                out.append(self._message(b"".join(self._parts)))
                self._parts.clear()
        if pos:
            del buf[:pos]
        return out

    @property
    def partial(self) -> bool:
        """Part of a frame or message has arrived, and not the rest."""
        return bool(self._buf) or bool(self._parts) or self._skip > 0 or self._oversize

    def _message(self, data: bytes) -> Message:
        text = bool(self._text)
        self._text = None
        self._size = 0
        self._fragments = 0
        if text and self.check_text and not data.isascii():
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("a text message that is not UTF-8", 1007) from None
        return Message(text, data)

    def _finish_oversize(self, out: list[Event]) -> None:
        out.append(TooLarge(self._size))
        self._oversize = False
        self._skip_final = False
        self._text = None
        self._size = 0
        self._fragments = 0


# --- the opening handshake (RFC 6455 section 4) ------------------------------------------------

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key: str | bytes) -> str:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    import base64
    import hashlib

    raw = key.encode() if isinstance(key, str) else key
    return base64.b64encode(hashlib.sha1(raw.strip() + _GUID).digest()).decode()


def new_key() -> str:
    import base64

    return base64.b64encode(os.urandom(16)).decode()
