"""Turning received bytes into one request frame, or into the error frame that says why not.

Rules:
* A frame over `max_frame_bytes` is `too_large` (its size and the limit in the details).
* Text on a connection that speaks MessagePack is `invalid_frame`, saying so.
* Bytes that do not parse are `invalid_frame` (nesting too deep for the decoder included); a
  frame without an `op`, or with an op nobody knows, is `invalid_frame` / `unknown_op`; a
  known op with a bad field is `invalid_frame` naming the field. The failed frame's `id` and
  `session` are salvaged when they can be read, so the client can tell which request failed;
  otherwise the error's id is null.
"""

from __future__ import annotations

import msgspec

from ecotone.kernel.answers import error
from ecotone.kernel.validation import describe_validation_error
from ecotone.specs import Codec, Error, ErrorCode, Request
from ecotone.specs.codec import TOO_DEEP
from ecotone.specs.frames import REQUEST_OPS


def too_large(size: int, limit: int) -> Error:
    return error(
        ErrorCode.TOO_LARGE,
        f"frame of {size} bytes is over the limit of {limit} bytes; it was discarded",
        size=size,
        limit=limit,
    )


def decode_request(codec: Codec, data: bytes | str, limit: int) -> Request | Error:
    """Decode one frame. A frame that cannot be used becomes an `Error` to send back."""
    if len(data) > limit:
        return too_large(len(data), limit)
    if isinstance(data, str):
        if len(data) * 4 > limit:  # a char is up to 4 UTF-8 bytes
            size = len(data.encode("utf-8", "surrogatepass"))
            if size > limit:
                return too_large(size, limit)
        if codec.binary:
            return error(
                ErrorCode.INVALID_FRAME,
                f"this connection speaks {codec.name}: send binary messages, not text",
            )
    try:
        return codec.decode_request(data)  # type: ignore[arg-type]
    except msgspec.ValidationError as exc:
        return _salvage(codec, data, exc)
    except msgspec.DecodeError as exc:
        return error(ErrorCode.INVALID_FRAME, f"frame is not valid {codec.name}: {exc}")
    except RecursionError:
        return error(ErrorCode.INVALID_FRAME, f"frame is {TOO_DEEP}")


def _salvage(codec: Codec, data: bytes | str, exc: msgspec.ValidationError) -> Error:
    try:
        loose = codec.decode_lenient(data)  # type: ignore[arg-type]
    except msgspec.DecodeError:
        loose = None
    except RecursionError:
        return error(ErrorCode.INVALID_FRAME, f"frame is {TOO_DEEP}")
    if not isinstance(loose, dict):
        return error(ErrorCode.INVALID_FRAME, "a frame must be an object with an `op` field")
    raw_id = loose.get("id")
    rid = raw_id if isinstance(raw_id, int | str) and not isinstance(raw_id, bool) else None
    raw_session = loose.get("session")
    session = raw_session if isinstance(raw_session, str) else None
    op = loose.get("op")
    if op is None:
        return error(ErrorCode.INVALID_FRAME, "frame has no `op` field", rid, session)
    if not isinstance(op, str) or op not in REQUEST_OPS:
        return error(
            ErrorCode.UNKNOWN_OP,
            f"unknown op {op!r}; this server knows: {', '.join(sorted(REQUEST_OPS))}",
            rid,
            session,
            op=str(op),
        )
    details = describe_validation_error(exc)
    return error(ErrorCode.INVALID_FRAME, f"invalid {op!r} frame: {exc}", rid, session, **details)
