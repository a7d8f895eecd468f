"""What the vector env puts on the wire and how it reads the answers: pre-encoded `step_many`
and `step_columns` frames, and a decoder that types observations in the same pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import msgspec
import numpy as np

from ecotone.specs import (
    Closed,
    Described,
    Error,
    Opened,
    Pong,
    RequestId,
    ResetArgs,
    Response,
    StateFrame,
    ToolResult,
    Tools,
    Welcome,
)
from ecotone.specs.frames import Frame


def plain(value: Any) -> Any:
    """numpy scalars and arrays (also inside dicts and lists) as plain Python values."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def plain_hook(value: Any) -> Any:
    """`enc_hook` for actions: numpy scalars and arrays as plain values (what `plain` makes of
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


RESET_ITEM: Any = object()
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


def codec_module(codec: Any) -> Any:
    """msgspec's module (`msgspec.json` or `msgspec.msgpack`) for a connection's codec."""
    return msgspec.json if codec.name == "json" else msgspec.msgpack


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
    module = codec_module(codec)
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
