"""The wire protocol's frames and codecs, on their own."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ecotone.specs import (
    PROTOCOL_VERSION,
    SUBPROTOCOLS,
    CallTool,
    Close,
    Closed,
    Codec,
    Describe,
    Described,
    DropSnapshot,
    EnvInfo,
    Error,
    ErrorCode,
    ExportSnapshot,
    Fork,
    GetState,
    GetTask,
    Hello,
    Join,
    JsonCodec,
    Keepalive,
    ListTasks,
    ListTools,
    MsgpackCodec,
    ObservationFrame,
    Observe,
    Open,
    Opened,
    Ping,
    Play,
    Pong,
    Render,
    Rendered,
    Reset,
    Restore,
    Seats,
    Share,
    SharedSteps,
    Snapshot,
    StateFrame,
    Step,
    StepColumns,
    StepItem,
    StepMany,
    StepManyResult,
    Welcome,
    codec_for,
)
from ecotone.specs.frames import REQUEST_OPS

CODECS = ["json", "msgpack"]


@pytest.fixture(params=CODECS)
def codec(request: pytest.FixtureRequest) -> Codec:
    return codec_for(request.param)


def requests(codec: Codec) -> list[Any]:
    action = codec.raw({"delta": 3, "metadata": {"why": "test"}})
    return [
        Hello(id=1),
        Hello(id="h", version=7),
        Describe(id=2),
        Describe(id=3, env="echo"),
        Open(id=4),
        Open(id="open-5", env="counter"),
        Reset(id=6, session="s1"),
        Reset(id=7, session="s1", seed=42, episode_id="ep", options={"target": 3, "x": [1, 2]}),
        Step(id=8, session="s1", action=action),
        GetState(id=9, session="s1"),
        Close(id=10, session="s1"),
        StepMany(
            id=11,
            steps=[StepItem(session="a", action=action), StepItem(session="b", action=action)],
        ),
        Ping(id=12),
        Render(id=13, session="s1"),
    ]


def responses(codec: Codec) -> list[Any]:
    obs = codec.raw({"count": 1, "reward": 1.0, "done": False})
    error = Error(
        id=5,
        code=ErrorCode.INVALID_ACTION,
        message="bad",
        session="s1",
        details={"field": "delta", "path": "$.delta"},
    )
    return [
        Welcome(id=1, version=PROTOCOL_VERSION, server="ecotone", envs=["counter", "echo"]),
        Described(
            id=2,
            info=EnvInfo(name="counter", version="1", action_schema={"type": "object"}),
        ),
        Opened(id=3, session="s1", env="counter"),
        ObservationFrame(id=4, session="s1", observation=obs),
        StateFrame(id="st", session="s1", state=codec.raw({"step_count": 2})),
        Closed(id=6, session="s1"),
        StepManyResult(
            id=7,
            results=[ObservationFrame(id=7, session="a", observation=obs), error],
        ),
        Pong(id=8),
        Rendered(id=9, session="s1", kind="text", content="..A\n.#G"),
        Described(id=10, info=EnvInfo(name="counter", readme="Counts.\n\nMore.")),
        error,
        Error(
            id=None, code=ErrorCode.TOO_LARGE, message="too big", details={"size": 9, "limit": 8}
        ),
    ]


def test_every_request_frame_round_trips(codec: Codec) -> None:
    for frame in requests(codec):
        assert codec.decode_request(codec.encode(frame)) == frame


def test_every_response_frame_round_trips(codec: Codec) -> None:
    for frame in responses(codec):
        assert codec.decode_response(codec.encode(frame)) == frame


def test_nested_payloads_keep_their_values_through_raw(codec: Codec) -> None:
    step = Step(id=1, session="s", action=codec.raw({"delta": -4, "tags": ["a", "b"]}))
    decoded = codec.decode_request(codec.encode(step))
    assert isinstance(decoded, Step)
    assert codec.decode_as(decoded.action, dict[str, Any]) == {"delta": -4, "tags": ["a", "b"]}


def test_json_frames_are_objects_tagged_by_op() -> None:
    wire = msgspec.json.decode(JsonCodec().encode(Opened(id=3, session="s1", env="counter")))
    assert wire == {"op": "opened", "id": 3, "session": "s1", "env": "counter"}


def test_msgpack_frames_are_maps_tagged_by_op() -> None:
    wire = msgspec.msgpack.decode(MsgpackCodec().encode(Closed(id=4, session="s9")))
    assert wire == {"op": "closed", "id": 4, "session": "s9"}


MINIMAL_REQUESTS: dict[str, tuple[dict[str, Any], type]] = {
    "hello": ({}, Hello),
    "describe": ({}, Describe),
    "open": ({}, Open),
    "reset": ({"session": "s"}, Reset),
    "step": ({"session": "s", "action": {"delta": 1}}, Step),
    "state": ({"session": "s"}, GetState),
    "close": ({"session": "s"}, Close),
    "step_many": ({"steps": [{"session": "s", "action": {"delta": 1}}]}, StepMany),
    "step_columns": ({"sessions": ["s"], "actions": [{"delta": 1}]}, StepColumns),
    "list_tools": ({"session": "s"}, ListTools),
    "call_tool": ({"session": "s", "name": "shout", "arguments": {"message": "hi"}}, CallTool),
    "ping": ({}, Ping),
    "render": ({"session": "s"}, Render),
    "share": ({"session": "s"}, Share),
    "shared_steps": ({"session": "s", "since": 0}, SharedSteps),
    "list_tasks": ({}, ListTasks),
    "get_task": ({"task": "t"}, GetTask),
    "snapshot": ({"session": "s"}, Snapshot),
    "restore": ({"session": "s", "snapshot": "snap-1"}, Restore),
    "fork": ({"session": "s", "n": 2}, Fork),
    "export_snapshot": ({"snapshot": "snap-1"}, ExportSnapshot),
    "drop_snapshot": ({"snapshot": "snap-1"}, DropSnapshot),
    "seats": ({"session": "s"}, Seats),
    "join": ({"key": "k"}, Join),
    "play": ({"session": "s", "action": {"card": 1}, "seat": "north"}, Play),
    "observe": ({"session": "s", "wait": True}, Observe),
    "keepalive": ({"sessions": ["s"], "seats": ["k"]}, Keepalive),
}


def test_the_table_of_request_ops_is_complete() -> None:
    assert set(MINIMAL_REQUESTS) == REQUEST_OPS


@pytest.mark.parametrize("op", sorted(MINIMAL_REQUESTS))
def test_every_request_op_decodes_from_plain_data(codec: Codec, op: str) -> None:
    fields, cls = MINIMAL_REQUESTS[op]
    data = msgspec.json.encode if codec.name == "json" else msgspec.msgpack.encode
    frame = codec.decode_request(data({"op": op, "id": 99, **fields}))
    assert type(frame) is cls
    assert frame.id == 99


def test_request_defaults_are_filled_in() -> None:
    hello = JsonCodec().decode_request(b'{"op":"hello","id":1}')
    assert hello == Hello(id=1, version=PROTOCOL_VERSION)
    reset = JsonCodec().decode_request(b'{"op":"reset","id":"r","session":"s"}')
    assert reset == Reset(id="r", session="s", seed=None, episode_id=None, options={})


GARBAGE_JSON = [
    b"",
    b"not json",
    b"{",
    b"\xff\xfe",
    b"null",
    b"[1, 2, 3]",
    b'{"id": 1}',
    b'{"op": "launch_missiles", "id": 1}',
    b'{"op": "step", "id": 1, "session": "s"}',
    b'{"op": "open", "id": 1, "surprise": true}',
    b'{"op": "reset", "id": 1, "session": 7}',
    b'{"op": "hello", "id": true}',
    b'{"op": "hello", "id": [1]}',
    b'{"op": {"nested": 1}, "id": 1}',
]


@pytest.mark.parametrize("data", GARBAGE_JSON, ids=lambda d: d.decode(errors="replace")[:40])
def test_json_codec_rejects_garbage(data: bytes) -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        JsonCodec().decode_request(data)


GARBAGE_MSGPACK = [
    b"",
    b"\xc1",  # a byte MessagePack never uses
    b"\x93\x01\x02\x03",  # an array
    b"\x81\xa2op\xa4nope",  # {"op": "nope"}
    b"\x82\xa2op\xa4step\xa2id\x01",  # a step with no session and no action
    msgspec.json.encode({"op": "ping", "id": 1}),  # JSON is not MessagePack
]


@pytest.mark.parametrize("data", GARBAGE_MSGPACK, ids=lambda d: d.hex()[:24] or "empty")
def test_msgpack_codec_rejects_garbage(data: bytes) -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        MsgpackCodec().decode_request(data)


def test_a_response_is_not_a_request(codec: Codec) -> None:
    with pytest.raises(msgspec.ValidationError):
        codec.decode_request(codec.encode(Pong(id=1)))


def test_codec_for_names_both_codecs_and_rejects_others() -> None:
    assert (codec_for("json").name, codec_for("json").binary) == ("json", False)
    assert (codec_for("msgpack").name, codec_for("msgpack").binary) == ("msgpack", True)
    with pytest.raises(ValueError, match="xml"):
        codec_for("xml")


def test_subprotocols_map_to_existing_codecs() -> None:
    assert SUBPROTOCOLS == {"ecotone.v1.json": "json", "ecotone.v1.msgpack": "msgpack"}
    for name in SUBPROTOCOLS.values():
        assert codec_for(name).name == name


def test_error_codes_keep_their_wire_values() -> None:
    assert {code.value for code in ErrorCode} == {
        "invalid_frame",
        "unknown_op",
        "too_large",
        "unsupported_version",
        "unknown_env",
        "unknown_session",
        "capacity",
        "invalid_action",
        "invalid_argument",
        "reset_required",
        "episode_done",
        "unsupported",
        "env_error",
        "timeout",
        "unauthorized",
        "forbidden",
        "unknown_snapshot",
        "snapshot_mismatch",
        "shutting_down",
        "not_your_turn",
        "seat_taken",
        "unknown_seat_key",
        "internal",
    }


def test_the_version_is_the_distributions() -> None:
    import importlib.metadata
    import tomllib
    from pathlib import Path

    import ecotone
    from ecotone.specs.version import VERSION

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert VERSION == project["project"]["version"] == importlib.metadata.version("ecotone")
    assert ecotone.__version__ == VERSION
