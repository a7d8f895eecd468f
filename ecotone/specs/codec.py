"""JSON and MessagePack codecs for frames and env payloads.

A codec owns reusable msgspec encoders/decoders (building them is the expensive part). The
same codec encodes nested env payloads (`raw`) so they can be embedded in frames as
`msgspec.Raw` without a second pass over the whole frame.
"""

from typing import Any, Protocol, TypeVar

import msgspec

from ecotone.specs.frames import Request, Response

T = TypeVar("T")

TOO_DEEP = (
    "nested too deeply to decode (more than about 1,000 levels of arrays and objects): "
    "the decoder's recursion limit"
)
"""What is said of bytes whose nesting exhausts the decoder's recursion (RecursionError)."""


class Codec(Protocol):
    """Encodes frames to bytes and back. `name` is `json` or `msgspec`'s `msgpack`."""

    name: str
    binary: bool

    def encode(self, obj: Any) -> bytes: ...
    def decode_request(self, data: bytes) -> Request: ...
    def decode_response(self, data: bytes) -> Response: ...
    def decode_lenient(self, data: bytes) -> Any: ...
    def decode_as(self, data: bytes | msgspec.Raw, type_: type[T]) -> T: ...
    def raw(self, obj: Any) -> msgspec.Raw: ...


class _MsgspecCodec:
    name: str
    binary: bool

    def __init__(self, module: Any) -> None:
        self._module = module
        self._encoder = module.Encoder()
        self._requests = module.Decoder(Request)
        self._responses = module.Decoder(Response)
        self._any = module.Decoder()
        self._typed: dict[Any, Any] = {}

    def encode(self, obj: Any) -> bytes:
        return self._encoder.encode(obj)

    def decode_request(self, data: bytes) -> Request:
        return self._requests.decode(data)

    def decode_response(self, data: bytes) -> Response:
        return self._responses.decode(data)

    def decode_lenient(self, data: bytes) -> Any:
        """Decode into plain data, with no schema (used to salvage a bad frame's id)."""
        return self._any.decode(data)

    def decode_as(self, data: bytes | msgspec.Raw, type_: type[T]) -> T:
        decoder = self._typed.get(type_)
        if decoder is None:
            decoder = self._typed[type_] = self._module.Decoder(type_)
        return decoder.decode(data)

    def raw(self, obj: Any) -> msgspec.Raw:
        return msgspec.Raw(self._encoder.encode(obj))


class JsonCodec(_MsgspecCodec):
    """UTF-8 JSON; WebSocket text frames."""

    name = "json"
    binary = False

    def __init__(self) -> None:
        super().__init__(msgspec.json)


class MsgpackCodec(_MsgspecCodec):
    """MessagePack; WebSocket binary frames."""

    name = "msgpack"
    binary = True

    def __init__(self) -> None:
        super().__init__(msgspec.msgpack)


def codec_for(name: str) -> Codec:
    """A fresh codec by name (`json` or `msgpack`)."""
    if name == "json":
        return JsonCodec()
    if name == "msgpack":
        return MsgpackCodec()
    raise ValueError(f"unknown codec {name!r}; expected 'json' or 'msgpack'")
