"""The engine on its own (sans-IO): bytes in through a Peer, answers out of its outbox, the
env calls it hands out run by a test driver. No sockets; run under trio by pytest-trio."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import msgspec
import pytest

from ecotone.kernel import Engine, EnvSpec, Limits, Mode
from ecotone.plugins.counter import CounterEnv
from ecotone.plugins.echo import EchoEnv
from ecotone.specs import PROTOCOL_VERSION, codec_for
from tests import envs
from tests.engine_driver import Driver, decoded

ALL_ENVS: dict[str, type] = {"counter": CounterEnv, "echo": EchoEnv, **envs.TEST_ENVS}


def make_kernel(
    *, limits: Limits | None = None, clock: Callable[[], float] | None = None, **kw: Any
) -> Engine:
    specs = {name: EnvSpec.from_class(cls, name) for name, cls in ALL_ENVS.items()}
    if clock is not None:
        kw["clock"] = clock
    return Engine(specs, default_env="counter", limits=limits, **kw)


class Peer:
    """One engine connection driven by hand: frames in as bytes, replies out as plain data."""

    def __init__(self, kernel: Engine, codec: str = "json") -> None:
        self.kernel = kernel
        self.driver = Driver(kernel)
        self.codec = codec_for(codec)
        self.conn = kernel.peer(self.codec)
        self._ids = itertools.count(1)

    def encode(self, frame: dict[str, Any]) -> bytes:
        if self.codec.binary:
            return msgspec.msgpack.encode(frame)
        return msgspec.json.encode(frame)

    async def disconnect(self) -> int:
        """This peer's connection goes: how many sessions closed."""
        before = len(self.kernel.sessions)
        await self.driver.disconnect(self.conn.owner)
        return before - len(self.kernel.sessions)

    async def reap(self) -> int:
        """Idle sessions reaped: how many."""
        before = len(self.kernel.sessions)
        await self.driver.expire()
        return before - len(self.kernel.sessions)

    async def shutdown(self) -> None:
        await self.driver.shutdown()

    async def send_raw(self, data: bytes | str) -> dict[str, Any]:
        return decoded(self.conn, await self.driver.ask(self.conn, data))

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        rid = next(self._ids)
        reply = await self.send_raw(self.encode({"op": op, "id": rid, **fields}))
        assert reply["id"] == rid, reply
        return reply

    async def open(self, env: str | None = None) -> str:
        reply = await self.call("open", **({"env": env} if env else {}))
        assert reply["op"] == "opened", reply
        return str(reply["session"])

    async def reset(self, session: str, **options: Any) -> dict[str, Any]:
        reply = await self.call("reset", session=session, options=options)
        assert reply["op"] == "observation", reply
        return dict(reply["observation"])

    async def step(self, session: str, action: Any) -> dict[str, Any]:
        reply = await self.call("step", session=session, action=action)
        assert reply["op"] == "observation", reply
        return dict(reply["observation"])

    async def state(self, session: str) -> dict[str, Any]:
        reply = await self.call("state", session=session)
        assert reply["op"] == "state", reply
        return dict(reply["state"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def assert_error(reply: dict[str, Any], code: str, **details: Any) -> None:
    assert reply["op"] == "error", reply
    assert reply["code"] == code, reply
    assert reply["message"]
    for key, value in details.items():
        assert reply["details"].get(key) == value, (key, reply)


# --- frame-level errors ----------------------------------------------------------------------

FRAME_LIMIT = 512


@dataclass
class BadFrame:
    """A bad frame, built for a given session, and the error it must produce."""

    name: str
    codec: str
    build: Callable[[str], bytes]
    code: str
    reply_id: Any
    details: dict[str, Any]


def _json(frame: dict[str, Any]) -> bytes:
    return msgspec.json.encode(frame)


BAD_FRAMES = [
    BadFrame(
        "oversized",
        "json",
        lambda s: _json(
            {
                "op": "step",
                "id": 1,
                "session": s,
                "action": {"delta": 1, "metadata": {"pad": "x" * 600}},
            }
        ),
        "too_large",
        None,
        {"limit": FRAME_LIMIT},
    ),
    BadFrame("not_json", "json", lambda s: b'{"op": "step", "id": 2, ', "invalid_frame", None, {}),
    BadFrame("not_msgpack", "msgpack", lambda s: b"\xc1\xc1\xc1", "invalid_frame", None, {}),
    BadFrame("json_array", "json", lambda s: b"[1, 2, 3]", "invalid_frame", None, {}),
    BadFrame(
        "unknown_op",
        "json",
        lambda s: _json({"op": "teleport", "id": "t-9", "session": s}),
        "unknown_op",
        "t-9",
        {"op": "teleport"},
    ),
    BadFrame(
        "op_not_a_string",
        "json",
        lambda s: _json({"op": {"nested": True}, "id": 10}),
        "unknown_op",
        10,
        {},
    ),
    BadFrame(
        "missing_session_field",
        "json",
        lambda s: _json({"op": "step", "id": 11, "action": {"delta": 1}}),
        "invalid_frame",
        11,
        {"field": "session", "path": "$.session"},
    ),
    BadFrame(
        "unknown_frame_field",
        "json",
        lambda s: _json({"op": "state", "id": 12, "session": s, "sesion": s}),
        "invalid_frame",
        12,
        {"field": "sesion"},
    ),
    BadFrame(
        "action_wrong_type",
        "json",
        lambda s: _json({"op": "step", "id": 13, "session": s, "action": {"delta": "three"}}),
        "invalid_action",
        13,
        {"field": "delta", "path": "$.delta"},
    ),
    BadFrame(
        "action_unknown_field",
        "json",
        lambda s: _json({"op": "step", "id": 14, "session": s, "action": {"delta": 1, "detla": 1}}),
        "invalid_action",
        14,
        {"field": "detla", "path": "$.detla"},
    ),
    BadFrame(
        "action_missing_field",
        "json",
        lambda s: _json({"op": "step", "id": 15, "session": s, "action": {}}),
        "invalid_action",
        15,
        {"field": "delta", "path": "$.delta"},
    ),
    BadFrame(
        "action_not_an_object",
        "msgpack",
        lambda s: msgspec.msgpack.encode({"op": "step", "id": 16, "session": s, "action": [1]}),
        "invalid_action",
        16,
        {"path": "$"},
    ),
    BadFrame(
        "unknown_session",
        "json",
        lambda s: _json(
            {"op": "step", "id": 17, "session": "feedfacecafebeef", "action": {"delta": 1}}
        ),
        "unknown_session",
        17,
        {},
    ),
    BadFrame(
        "text_on_msgpack",
        "msgpack",
        lambda s: b"",  # replaced by a str below: a text message on a binary connection
        "invalid_frame",
        None,
        {},
    ),
]


@pytest.mark.parametrize("bad", BAD_FRAMES, ids=lambda b: b.name)
async def test_each_bad_frame_gets_its_own_error_and_leaves_every_session_intact(
    bad: BadFrame,
) -> None:
    kernel = make_kernel(limits=Limits(max_frame_bytes=FRAME_LIMIT))
    peer = Peer(kernel, bad.codec)
    first, second = await peer.open(), await peer.open()
    await peer.reset(first)
    await peer.reset(second, start=100)
    assert (await peer.step(first, {"delta": 1}))["count"] == 1

    data: bytes | str = bad.build(first)
    if bad.name == "text_on_msgpack":
        data = '{"op": "ping", "id": 1}'
    reply = await peer.send_raw(data)

    assert_error(reply, bad.code, **bad.details)
    assert reply.get("id") == bad.reply_id  # an id that could not be read is omitted
    assert (await peer.step(first, {"delta": 1}))["count"] == 2
    assert (await peer.step(second, {"delta": 1}))["count"] == 101
    assert (await peer.state(first))["step_count"] == 2
    assert len(kernel.sessions) == 2


async def test_an_oversized_frame_reports_its_size_and_the_limit() -> None:
    peer = Peer(make_kernel(limits=Limits(max_frame_bytes=100)))
    frame = _json({"op": "ping", "id": 1, "pad": "y" * 200})
    assert_error(await peer.send_raw(frame), "too_large", size=len(frame), limit=100)


async def test_invalid_action_names_the_session_and_the_field_in_its_message() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    await peer.reset(session)
    reply = await peer.call("step", session=session, action={"delta": 1.5})
    assert_error(reply, "invalid_action", field="delta", path="$.delta")
    assert reply["session"] == session
    assert "delta" in reply["message"]


# --- episode phases --------------------------------------------------------------------------


async def test_step_before_reset_is_reset_required_and_never_reaches_the_env() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    reply = await peer.call("step", session=session, action={"delta": 5})
    assert_error(reply, "reset_required")
    assert reply["session"] == session
    assert (await peer.state(session))["step_count"] == 0
    await peer.reset(session)
    assert (await peer.step(session, {"delta": 5}))["count"] == 5


async def test_step_after_done_is_episode_done_until_the_next_reset() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    await peer.reset(session, target=3)
    assert (await peer.step(session, {"delta": 2}))["done"] is False
    last = await peer.step(session, {"delta": 2})
    assert (last["count"], last["done"], last["reward"]) == (4, True, 2.0)

    for _ in range(2):
        assert_error(await peer.call("step", session=session, action={"delta": 1}), "episode_done")
    assert (await peer.state(session))["step_count"] == 2  # the env was not stepped past the end

    assert (await peer.reset(session))["count"] == 0
    assert (await peer.step(session, {"delta": 1}))["count"] == 1


async def test_step_after_truncation_is_episode_done() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    await peer.reset(session, max_steps=1)
    obs = await peer.step(session, {"delta": 1})
    assert (obs["done"], obs["truncated"]) == (False, True)
    assert_error(await peer.call("step", session=session, action={"delta": 1}), "episode_done")


async def test_several_sessions_on_one_connection_are_independent() -> None:
    peer = Peer(make_kernel())
    a, b, c = await peer.open(), await peer.open(), await peer.open()
    assert len({a, b, c}) == 3
    await peer.reset(a)
    await peer.reset(b, start=10)
    for _ in range(3):
        await peer.step(a, {"delta": 1})
    assert (await peer.step(b, {"delta": -1}))["count"] == 9
    assert (await peer.step(a, {"delta": 1}))["count"] == 4
    assert_error(await peer.call("step", session=c, action={"delta": 1}), "reset_required")
    assert (await peer.state(a))["step_count"] == 4
    assert (await peer.state(b))["step_count"] == 1


# --- sessions and connections ----------------------------------------------------------------


async def test_another_connections_session_is_unknown_to_this_one() -> None:
    kernel = make_kernel()
    alice, mallory = Peer(kernel), Peer(kernel)
    session = await alice.open()
    await alice.reset(session)
    for op, extra in (("step", {"action": {"delta": 1}}), ("state", {}), ("close", {})):
        assert_error(await mallory.call(op, session=session, **extra), "unknown_session")
    assert (await alice.step(session, {"delta": 7}))["count"] == 7


async def test_closing_a_session_twice_is_unknown_session() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    closed = await peer.call("close", session=session)
    assert (closed["op"], closed["session"]) == ("closed", session)
    assert_error(await peer.call("close", session=session), "unknown_session")
    assert_error(await peer.call("reset", session=session), "unknown_session")
    assert len(peer.kernel.sessions) == 0


async def test_open_of_an_unknown_env_is_unknown_env() -> None:
    peer = Peer(make_kernel())
    assert_error(await peer.call("open", env="chess"), "unknown_env", env="chess")
    assert len(peer.kernel.sessions) == 0


async def test_capacity_is_shared_by_connections_and_frees_up_on_close() -> None:
    kernel = make_kernel(limits=Limits(max_sessions=2))
    one, two = Peer(kernel), Peer(kernel)
    first = await one.open()
    await two.open()
    assert_error(await one.call("open"), "capacity", active=2, limit=2)
    assert_error(await two.call("open"), "capacity", active=2, limit=2)
    await one.call("close", session=first)
    again = await one.open()
    await one.reset(again)
    assert (await one.step(again, {"delta": 3}))["count"] == 3


async def test_disconnect_closes_every_session_of_that_connection_only() -> None:
    kernel = make_kernel()
    leaving, staying = Peer(kernel), Peer(kernel)
    a1, a2 = await leaving.open("closing"), await leaving.open("closing")
    b1 = await staying.open("closing")
    await staying.reset(b1)
    first, second, third = envs.ClosingEnv.instances

    assert await leaving.disconnect() == 2

    assert [first.close_calls, second.close_calls, third.close_calls] == [1, 1, 0]
    assert kernel.sessions.get(a1, leaving.conn.owner) is None
    assert kernel.sessions.get(a2, leaving.conn.owner) is None
    assert (await staying.step(b1, {"delta": 4}))["count"] == 4
    assert await leaving.disconnect() == 0
    assert first.close_calls == 1


async def test_shutdown_closes_every_env_exactly_once() -> None:
    kernel = make_kernel()
    peer = Peer(kernel)
    session = await peer.open("closing")
    await peer.open("closing")
    await peer.call("close", session=session)
    await peer.shutdown()
    await peer.disconnect()
    assert [env.close_calls for env in envs.ClosingEnv.instances] == [1, 1]
    assert len(kernel.sessions) == 0


async def test_idle_sessions_are_reaped_by_the_clock_and_closed_once() -> None:
    clock = FakeClock()
    kernel = make_kernel(limits=Limits(lease=10.0), clock=clock)
    peer = Peer(kernel)
    idle = await peer.open("closing")  # last used at t=0
    busy = await peer.open("closing")
    await peer.reset(busy)
    idle_env, busy_env = envs.ClosingEnv.instances

    clock.now = 9.0
    await peer.step(busy, {"delta": 1})  # last used at t=9
    assert await peer.reap() == 0

    clock.now = 10.0
    assert await peer.reap() == 1
    assert (idle_env.close_calls, busy_env.close_calls) == (1, 0)
    assert_error(await peer.call("reset", session=idle), "unknown_session")
    assert (await peer.step(busy, {"delta": 1}))["count"] == 2  # and now last used at t=10

    clock.now = 19.5
    assert await peer.reap() == 0
    clock.now = 20.0
    assert await peer.reap() == 1
    await peer.disconnect()
    await peer.shutdown()
    assert (idle_env.close_calls, busy_env.close_calls) == (1, 1)


async def test_sessions_are_never_reaped_without_a_lease() -> None:
    clock = FakeClock()
    kernel = make_kernel(limits=Limits(lease=None), clock=clock)
    peer = Peer(kernel)
    session = await peer.open()
    clock.now = 1e9
    assert await peer.reap() == 0
    await peer.reset(session)


# --- environments that raise -----------------------------------------------------------------


async def test_env_raising_in_step_is_env_error_and_the_session_goes_on() -> None:
    peer = Peer(make_kernel())
    session = await peer.open("failing")
    await peer.reset(session)
    assert (await peer.step(session, {}))["count"] == 1

    reply = await peer.call("step", session=session, action={"fail": True})
    assert_error(reply, "env_error", type="ValueError", message="step exploded")
    assert reply["session"] == session

    assert (await peer.step(session, {}))["count"] == 2
    assert (await peer.reset(session))["count"] == 0
    assert (await peer.step(session, {}))["count"] == 1


async def test_env_raising_in_its_constructor_is_env_error_and_leaks_no_slot() -> None:
    kernel = make_kernel(limits=Limits(max_sessions=1))
    peer = Peer(kernel)
    for _ in range(3):
        reply = await peer.call("open", env="broken")
        assert_error(reply, "env_error", type="RuntimeError", message="constructor exploded")
    assert len(kernel.sessions) == 0
    session = await peer.open("counter")  # the only slot is still free
    await peer.reset(session)


async def test_env_raising_in_reset_is_env_error_and_needs_a_new_reset() -> None:
    peer = Peer(make_kernel())
    session = await peer.open("failing")
    await peer.reset(session)
    await peer.step(session, {})

    reply = await peer.call("reset", session=session, options={"fail": True})
    assert_error(reply, "env_error", type="RuntimeError", message="reset exploded")
    assert_error(await peer.call("step", session=session, action={}), "reset_required")
    await peer.reset(session)
    assert (await peer.step(session, {}))["count"] == 1


async def test_reset_options_the_env_does_not_take_are_invalid_argument() -> None:
    peer = Peer(make_kernel())
    session = await peer.open()
    reply = await peer.call("reset", session=session, options={"bogus": 1, "start": 2})
    assert_error(
        reply, "invalid_argument", unknown=["bogus"], accepted=["max_steps", "start", "target"]
    )
    assert "bogus" in reply["message"]
    assert (await peer.reset(session, start=2))["count"] == 2
    assert (await peer.step(session, {"delta": 1}))["count"] == 3


class _Options(TypedDict, total=False):
    start: int
    target: int


class _TypedOptionsCounter(CounterEnv):
    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, episode_id: str | None = None, **options: Unpack[_Options]
    ) -> Any:
        return super().reset(seed=seed, episode_id=episode_id, **options)


class _AnyOptionsCounter(CounterEnv):
    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, **options: Any
    ) -> Any:
        return super().reset(seed=seed, episode_id=episode_id, start=options.get("start", 0))


async def test_reset_options_typed_as_a_typeddict_are_the_ones_taken() -> None:
    typed = EnvSpec.from_class(_TypedOptionsCounter, "typed")
    assert typed.reset_options == {"start", "target"}
    assert EnvSpec.from_class(_AnyOptionsCounter, "any").reset_options is None  # takes any
    peer = Peer(Engine(typed))
    session = await peer.open()
    reply = await peer.call("reset", session=session, options={"bogus": 1})
    assert_error(reply, "invalid_argument", unknown=["bogus"], accepted=["start", "target"])
    assert (await peer.reset(session, start=4))["count"] == 4


async def test_a_type_error_raised_inside_reset_is_env_error_not_invalid_argument() -> None:
    peer = Peer(make_kernel())
    session = await peer.open("failing")
    reply = await peer.call("reset", session=session, options={"type_error": True})
    assert_error(reply, "env_error", type="TypeError")
    assert "positional argument" in reply["details"]["message"]


# --- handshake-ish requests ------------------------------------------------------------------


async def test_hello_welcomes_the_current_version_and_lists_envs() -> None:
    peer = Peer(make_kernel())
    reply = await peer.call("hello", version=PROTOCOL_VERSION)
    assert reply["op"] == "welcome"
    assert (reply["version"], reply["server"]) == (PROTOCOL_VERSION, "ecotone")
    assert reply["envs"] == list(ALL_ENVS)


async def test_hello_with_another_version_is_unsupported_version() -> None:
    peer = Peer(make_kernel())
    reply = await peer.call("hello", version=PROTOCOL_VERSION + 1)
    assert_error(reply, "unsupported_version", supported=[PROTOCOL_VERSION])


async def test_ping_is_answered_with_pong() -> None:
    peer = Peer(make_kernel(), "msgpack")
    assert await peer.call("ping") == {"op": "pong", "id": 1, "ready": True}


async def test_describe_returns_the_env_schemas() -> None:
    peer = Peer(make_kernel())
    info = (await peer.call("describe"))["info"]
    assert (info["name"], info["version"]) == ("counter", "1")
    assert info["description"] == "Adds each action's delta to a count; the reward is the delta."
    action = info["action_schema"]
    assert action["properties"]["delta"] == {  # the field's docstring is its description
        "type": "integer",
        "description": "How much to add to the count (negative to subtract).",
    }
    assert action["required"] == ["delta"]
    assert action["additionalProperties"] is False
    assert info["observation_schema"]["properties"]["count"] == {"type": "integer"}
    assert {"episode_id", "step_count", "count"} <= set(info["state_schema"]["properties"])

    echo = (await peer.call("describe", env="echo"))["info"]
    assert echo["action_schema"]["properties"]["message"] == {
        "type": "string",
        "description": "The text to echo back.",
    }
    assert_error(await peer.call("describe", env="chess"), "unknown_env")


async def test_step_many_dispatched_directly_answers_each_item_in_order() -> None:
    peer = Peer(make_kernel())
    a, b = await peer.open(), await peer.open()
    await peer.reset(a)
    await peer.reset(b, start=50)
    reply = await peer.call(
        "step_many",
        steps=[
            {"session": b, "action": {"delta": 1}},
            {"session": "nope", "action": {"delta": 1}},
            {"session": a, "action": {"delta": "x"}},
            {"session": a, "action": {"delta": 2}},
        ],
    )
    assert reply["op"] == "step_many_result"
    results = reply["results"]
    assert [r["op"] for r in results] == ["observation", "error", "error", "error"]
    assert results[0]["observation"]["count"] == 51
    assert (results[1]["code"], results[2]["code"]) == ("unknown_session", "invalid_action")
    assert_error(results[3], "invalid_argument", reason="duplicate_session", first_item=2)
    assert (await peer.step(a, {"delta": 2}))["count"] == 2  # the invalid action did nothing


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_step_columns_answers_what_step_many_of_the_same_items_does(codec: str) -> None:
    peer = Peer(make_kernel(), codec)
    a, b, c = await peer.open(), await peer.open(), await peer.open()
    for session in (a, b, c):
        await peer.reset(session, start=10)
    many = await peer.call(
        "step_many",
        steps=[{"session": s, "action": {"delta": d}} for s, d in ((a, 1), (b, 2), (c, 3))],
    )
    columns = await peer.call(
        "step_columns", sessions=[a, b, c], actions=[{"delta": 1}, {"delta": 2}, {"delta": 3}]
    )
    assert columns["op"] == "step_columns_result"
    assert set(columns) == {"op", "id", "observations"}  # no errors, no tasks: omitted
    assert [o["count"] for o in columns["observations"]] == [12, 14, 16]
    first = [r["observation"] for r in many["results"]]
    stepped_again = [{**o, "count": o["count"] + d} for o, d in zip(first, (1, 2, 3), strict=True)]
    assert stepped_again == columns["observations"]


async def test_step_columns_says_which_positions_failed_and_steps_the_others() -> None:
    peer = Peer(make_kernel())
    a, b, fresh, ended = [await peer.open() for _ in range(4)]
    await peer.reset(a)
    await peer.reset(b, start=50)
    await peer.reset(ended, target=1)
    await peer.step(ended, {"delta": 1})
    reply = await peer.call(
        "step_columns",
        sessions=[b, "nope", a, fresh, ended],
        actions=[{"delta": 1}, {"delta": 1}, {"delta": "x"}, {"delta": 1}, {"delta": 1}],
    )
    assert reply["op"] == "step_columns_result"
    observations, errors = reply["observations"], reply["errors"]
    assert observations[0]["count"] == 51 and observations[1:] == [None] * 4
    assert {int(j): e["code"] for j, e in errors.items()} == {
        1: "unknown_session",
        2: "invalid_action",
        3: "reset_required",
        4: "episode_done",
    }
    assert errors["2"]["session"] == a and errors["2"]["id"] == reply["id"]
    assert (await peer.step(a, {"delta": 2}))["count"] == 2  # the invalid action did nothing
    # Every session known and of one env: the one-pass path, which says the same.
    reply = await peer.call("step_columns", sessions=[a, fresh], actions=[{"delta": 1}] * 2)
    assert reply["observations"][0]["count"] == 3 and reply["observations"][1] is None
    assert reply["errors"]["1"]["code"] == "reset_required"
    twice = await peer.call("step_columns", sessions=[a, a], actions=[{"delta": 1}, {"delta": 1}])
    assert_error(twice["errors"]["1"], "invalid_argument", reason="duplicate_session")
    assert twice["observations"][0]["count"] == 4


async def test_step_columns_resets_the_positions_it_names_with_the_arguments_given() -> None:
    peer = Peer(make_kernel())
    a, b = await peer.open(), await peer.open()
    await peer.reset(a)
    reply = await peer.call(
        "step_columns",
        sessions=[a, b],
        actions=[{"delta": 4}, None],
        resets=[1],
        reset={"options": {"start": 7}, "episode_id": "ep-b"},
    )
    assert [o["count"] for o in reply["observations"]] == [4, 7]
    assert (await peer.state(b))["episode_id"] == "ep-b"
    assert (await peer.step(b, {"delta": 1}))["count"] == 8


async def test_step_columns_of_worker_thread_sessions_is_answered_by_columns_too() -> None:
    peer = Peer(make_kernel())
    x, y = await peer.open("slow"), await peer.open("slow")
    await peer.reset(x)
    await peer.reset(y)
    reply = await peer.call(
        "step_columns", sessions=[x, y], actions=[{"tag": "x"}, {"tag": "y", "sleep": "no"}]
    )
    assert reply["op"] == "step_columns_result"
    assert reply["observations"][0]["tag"] == "x" and reply["observations"][1] is None
    assert reply["errors"]["1"]["code"] == "invalid_action"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"actions": {"delta": 1}}, "must be an array"),
        ({"actions": [{"delta": 1}]}, "1 actions for 2 sessions"),
        ({"actions": [None, None], "resets": [0, 0]}, "more than once"),
        ({"actions": [None, None], "resets": [2, -1]}, "positions [-1, 2] beyond"),
    ],
)
async def test_a_malformed_step_columns_is_one_clear_error_and_steps_nothing(
    fields: dict[str, Any], says: str
) -> None:
    peer = Peer(make_kernel())
    a, b = await peer.open(), await peer.open()
    await peer.reset(a)
    await peer.reset(b)
    reply = await peer.call("step_columns", sessions=[a, b], **fields)
    assert_error(reply, "invalid_argument")
    assert says in reply["message"]
    assert (await peer.step(a, {"delta": 1}))["count"] == 1


# --- how env code is run ---------------------------------------------------------------------


async def test_a_sync_env_runs_in_a_worker_thread_and_an_inline_env_on_the_loop() -> None:
    kernel = make_kernel()
    peer = Peer(kernel)
    loop_thread = threading.get_ident()
    offloaded, inline = await peer.open("slow"), await peer.open("inline_probe")
    assert (await peer.reset(offloaded))["thread"] != loop_thread
    assert (await peer.reset(inline))["thread"] == loop_thread
    assert (await peer.step(offloaded, {"tag": "a"}))["thread"] != loop_thread
    assert (await peer.step(inline, {"tag": "b"}))["thread"] == loop_thread

    # An inline env's step is answered as it is received; a thread env's is a call to make.
    step = {"op": "step", "id": 99, "session": inline, "action": {}}
    assert peer.conn.receive(peer.encode(step)) == ()
    assert len(peer.conn.take()) == 1
    step = {"op": "step", "id": 100, "session": offloaded, "action": {}}
    calls = peer.conn.receive(peer.encode(step))
    assert [call.mode for call in calls] == [Mode.THREAD] and peer.conn.take() == []
    await peer.driver.run(calls)
    assert len(peer.conn.take()) == 1


async def test_an_async_env_is_awaited_for_every_method() -> None:
    peer = Peer(make_kernel())
    session = await peer.open("async_counter")
    await peer.call("reset", session=session, episode_id="ep-async", options={"start": 5})
    assert (await peer.step(session, {"delta": 2}))["count"] == 7
    assert (await peer.step(session, {"delta": -10}))["count"] == -3
    state = await peer.state(session)
    assert (state["episode_id"], state["step_count"], state["count"]) == ("ep-async", 2, -3)
    assert_error(await peer.call("step", session=session, action={"delta": None}), "invalid_action")
    await peer.call("close", session=session)
    assert envs.AsyncCounterEnv.closes == ["ep-async"]


async def test_a_dataclass_typed_env_decodes_actions_and_names_bad_fields() -> None:
    peer = Peer(make_kernel())
    session = await peer.open("dataclass_grid")
    assert await peer.reset(session) == {
        "x": 0,
        "y": 0,
        "reward": None,
        "done": False,
        "truncated": False,
    }
    assert (await peer.step(session, {"dx": 2, "dy": -1}))["x"] == 2
    obs = await peer.step(session, {"dx": 1})
    assert (obs["x"], obs["y"], obs["reward"]) == (3, -1, -1.0)
    assert (await peer.state(session))["step_count"] == 2

    wrong = await peer.call("step", session=session, action={"dx": "far"})
    assert_error(wrong, "invalid_action", field="dx", path="$.dx")
    missing = await peer.call("step", session=session, action={"dy": 1})
    assert_error(missing, "invalid_action", field="dx", path="$.dx")


async def test_an_attrs_typed_env_decodes_actions_and_names_bad_fields() -> None:
    peer = Peer(make_kernel(), "msgpack")
    session = await peer.open("attrs_compass")
    await peer.reset(session)
    assert (await peer.step(session, {"degrees": 90}))["heading"] == 90
    assert (await peer.step(session, {"degrees": 180, "clockwise": False}))["heading"] == 270
    assert (await peer.state(session))["heading"] == 270

    wrong = await peer.call("step", session=session, action={"degrees": 90, "clockwise": "yes"})
    assert_error(wrong, "invalid_action", field="clockwise", path="$.clockwise")
    missing = await peer.call("step", session=session, action={})
    assert_error(missing, "invalid_action", field="degrees")


async def test_json_and_msgpack_connections_see_the_same_episode() -> None:
    kernel = make_kernel()
    observations = []
    for codec in ("json", "msgpack"):
        peer = Peer(kernel, codec)
        session = await peer.open("echo")
        episode = [await peer.reset(session, max_steps=3)]
        for message in ("a", "bb", "ccc"):
            episode.append(await peer.step(session, {"message": message}))
        observations.append(episode)
    assert observations[0] == observations[1]
    assert observations[0][-1]["truncated"] is True
