"""Length-prefixed framing for byte streams (stdio, TCP, unix sockets), sans-IO.

A frame on a stream is a 4-byte big-endian unsigned length followed by that many bytes of
payload (one JSON or MessagePack encoded frame). The codec is not negotiated by a handshake:
the server reads it off the first payload (`{` opens a JSON object; a MessagePack map starts
with 0x80-0x8f, 0xde or 0xdf) and answers in the same codec for the rest of the connection.
Zero round trips, and a client can never get it wrong.

A frame announced larger than the limit is skipped without being buffered and reported as
`TooLarge`, so the stream stays in sync and the peer gets a `too_large` error.
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

HEADER: Final = struct.Struct(">I")
MAX_LENGTH: Final = 0xFFFFFFFF


def encode(payload: bytes) -> bytes:
    """One frame: header + payload."""
    return HEADER.pack(len(payload)) + payload


def detect_codec(payload: bytes) -> str:
    """`json` or `msgpack`, from the first byte of a payload."""
    first = payload.lstrip(b" \t\r\n")[:1]
    return "json" if first in (b"{", b"[", b'"') or not first else "msgpack"


@attrs.frozen(slots=True)
class TooLarge:
    """A frame over the limit was skipped."""

    size: int


@attrs.define(slots=True)
class FrameDecoder:
    """Feed bytes in, get complete payloads (or TooLarge markers) out."""

    limit: int
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)
    _skip: int = attrs.field(default=0, init=False)

    def feed(self, data: bytes) -> list[bytes | TooLarge]:
        out: list[bytes | TooLarge] = []
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        buf = self._buffer
        buf += data
        pos = 0
        size = len(buf)
        while size - pos >= 4:
            (length,) = HEADER.unpack_from(buf, pos)
            if length > self.limit:
                out.append(TooLarge(length))
                available = size - pos - 4
                if available >= length:
                    pos += 4 + length
                    continue
                self._skip = length - available
                pos = size
                break
            end = pos + 4 + length
            if end > size:
                break
            out.append(bytes(buf[pos + 4 : end]))
            pos = end
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def partial(self) -> bool:
        """Part of a frame has arrived, and not the rest."""
        return bool(self._buffer) or self._skip > 0
