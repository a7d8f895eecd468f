"""The batched hot paths of `step_many`, held to the per-item paths they shortcut.

* Server: the engine's batch fast path answers a whole `step_many` in one go; its bytes and the
  sessions' phases afterwards must be what the general path (items one by one, each on its
  session) and one encode give, for every kind of item (ordinary, ending, refused, invalid,
  raising, unencodable, unknown session).
* Client, sending: a vector env encodes a `step_many`'s items in one pass (`WireStepMany`); the
  bytes must be `StepMany`'s with each action pre-encoded, numpy values made plain.
* Client, answering: `VectorCore` takes an ordinary answer in bulk (no per-sub-env outcome);
  its results must be what the per-sub-env path gives for the same answers, in every autoreset
  mode, with typed and dict observations, metadata, episode ends and several links.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pytest
import trio

import ecotone
from ecotone.client._core import ClientCore, EnvTypes
from ecotone.client._vector.core import VectorCore
from ecotone.client._vector.frames import WireColumns, WireStepMany
from ecotone.client._vector.policy import Policy
from ecotone.client._vector.results import take_ready
from ecotone.client._vector.subenvs import Tally
from ecotone.kernel import Engine, EnvSpec, Mode, Owner
from ecotone.kernel.sessions import Phase
from ecotone.plugins.counter import CounterAction, CounterObservation
from ecotone.specs import (
    Error,
    Hello,
    Open,
    Opened,
    Reset,
    ResetArgs,
    StepColumns,
    StepItem,
    StepMany,
    StepManyResult,
    Welcome,
    codec_for,
)
from tests.conftest import run_bare_server, run_server
from tests.engine_driver import Driver
from tests.wsraw import RawWebSocket

# --- server: the batch fast path against the general path -------------------------------


class ProbeAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    do: str = "ok"


class ProbeObservation(ecotone.Observation, kw_only=True):
    steps: int = 0
    extra: Any = None


class ProbeEnv(ecotone.Environment[ProbeAction, ProbeObservation, ecotone.State]):
    """Each action says what the step does: go on, end or truncate the episode, raise, refuse
    the action, or return an observation no codec can encode."""

    name = "probe"
    inline = True

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> ProbeObservation:
        self._state = ecotone.State(episode_id=episode_id)
        return ProbeObservation()

    def step(self, action: ProbeAction) -> ProbeObservation:
        self._state.step_count += 1
        steps = self._state.step_count
        if action.do == "raise":
            raise RuntimeError("probe exploded")
        if action.do == "reject":
            raise ecotone.InvalidAction("not now", field="do", wanted="later")
        if action.do == "unencodable":  # its episode goes on: the step is an env_error
            return ProbeObservation(steps=steps, reward=1.0, done=True, extra=object())
        return ProbeObservation(
            steps=steps,
            reward=0.5,
            done=action.do == "end",
            truncated=action.do == "truncate",
            metadata={"did": action.do},
        )

    def state(self) -> ecotone.State:
        return self._state


ITEMS = [  # (which session, action) of one step_many
    ("ok", {"do": "ok"}),
    ("fresh", {"do": "ok"}),  # never reset: reset_required
    ("ended", {"do": "ok"}),  # its episode ended: episode_done
    ("unknown", {"do": "ok"}),
    ("end", {"do": "end"}),
    ("truncate", {"do": "truncate"}),
    ("invalid", {"do": 3}),
    ("unexpected", {"nope": 1}),
    ("raise", {"do": "raise"}),
    ("reject", {"do": "reject"}),
    ("unencodable", {"do": "unencodable"}),
    ("ok2", {"do": "ok"}),
]


async def _probe_engine(codec: str) -> tuple[Engine, Owner, dict[str, str]]:
    """An engine with one probe session per item name but `unknown`, each in the phase its
    name says, all of one owner, and the session ids by name."""
    engine = Engine(EnvSpec.from_class(ProbeEnv))
    driver = Driver(engine)
    peer = driver.peer(codec)
    ids = itertools.count(1)
    sessions: dict[str, str] = {"unknown": "0123456789abcdef"}
    for name, _ in ITEMS:
        if name == "unknown":
            continue
        opened = await driver.ask(peer, Open(id=next(ids)))
        assert isinstance(opened, Opened)
        sessions[name] = opened.session
        if name != "fresh":
            await driver.ask(peer, Reset(id=next(ids), session=opened.session))
    ended = engine.sessions.get(sessions["ended"], peer.owner)
    assert ended is not None
    ended.phase = Phase.ENDED
    return engine, peer.owner, sessions


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_the_batch_fast_path_answers_byte_for_byte_as_the_general_path(codec: str) -> None:
    batch_engine, batch_owner, batch_ids = await _probe_engine(codec)
    item_engine, item_owner, item_ids = await _probe_engine(codec)
    enc = codec_for(codec)

    def frame(ids: dict[str, str]) -> StepMany:
        items = [StepItem(session=ids[name], action=enc.raw(action)) for name, action in ITEMS]
        return StepMany(id=7, steps=items)

    fast = batch_engine.peer(enc, batch_owner)  # answers as bytes: the fast path's own
    assert not fast.submit(frame(batch_ids))
    (batched,) = fast.take()
    assert isinstance(batched, bytes)
    general = item_engine.peer(enc, item_owner, frames=True)  # answers as frames: item by item
    assert not general.submit(frame(item_ids))
    (answer,) = general.take()
    assert isinstance(answer, StepManyResult)
    expected = enc.encode(answer)
    renamed = batched
    for name, session in batch_ids.items():  # session ids are random: compare under one naming
        renamed = renamed.replace(session.encode(), item_ids[name].encode())
    assert renamed == expected

    kinds = [r.code if isinstance(r, Error) else "observation" for r in answer.results]
    assert kinds == [
        "observation", "reset_required", "episode_done", "unknown_session", "observation",
        "observation", "invalid_action", "invalid_action", "env_error", "invalid_action",
        "env_error", "observation",
    ]  # fmt: skip
    for name, _ in ITEMS:  # the episodes go on, or end, alike
        if name == "unknown":
            continue
        batch_session = batch_engine.sessions.get(batch_ids[name], batch_owner)
        item_session = item_engine.sessions.get(item_ids[name], item_owner)
        assert batch_session is not None and item_session is not None
        assert batch_session.phase is item_session.phase, name
        assert not batch_session.busy and not item_session.busy
    assert batch_engine.sessions.get(batch_ids["end"], batch_owner).phase is Phase.ENDED  # type: ignore[union-attr]
    unencodable = batch_engine.sessions.get(batch_ids["unencodable"], batch_owner)
    assert unencodable is not None and unencodable.phase is Phase.RUNNING


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_step_columns_answers_by_position_what_step_many_answers_by_item(
    codec: str,
) -> None:
    known = [(name, action) for name, action in ITEMS if name != "unknown"]
    valid = [(name, action) for name, action in known if name not in ("invalid", "unexpected")]
    for items in (valid, known):  # valid actions: decoded in one pass; else item by item
        columns_engine, columns_owner, columns_ids = await _probe_engine(codec)
        item_engine, item_owner, item_ids = await _probe_engine(codec)
        enc = codec_for(codec)
        frame = StepColumns(
            id=7,
            sessions=[columns_ids[name] for name, _ in items],
            actions=enc.raw([action for _, action in items]),
        )
        fast = columns_engine.peer(enc, columns_owner)
        assert not fast.submit(frame)
        (data,) = fast.take()
        columns = msgspec.json.decode(data) if codec == "json" else msgspec.msgpack.decode(data)
        many = StepMany(
            id=7,
            steps=[StepItem(session=item_ids[name], action=enc.raw(a)) for name, a in items],
        )
        general = item_engine.peer(enc, item_owner, frames=True)
        assert not general.submit(many)
        (answer,) = general.take()
        assert isinstance(answer, StepManyResult)
        rename = {columns_ids[name]: item_ids[name] for name, _ in items}
        errors = {int(j): e for j, e in columns.get("errors", {}).items()}
        assert columns["op"] == "step_columns_result" and columns["id"] == 7
        assert len(columns["observations"]) == len(items)
        for j, result in enumerate(answer.results):
            if isinstance(result, Error):
                assert columns["observations"][j] is None
                got = errors[j]
                assert rename[got.pop("session")] == result.session
                expected = msgspec.to_builtins(result)
                del expected["session"]
                assert got == expected, items[j]
            else:
                assert j not in errors
                assert enc.raw(columns["observations"][j]) == result.observation, items[j]
        for name, _ in items:  # the episodes go on, or end, alike
            columns_session = columns_engine.sessions.get(columns_ids[name], columns_owner)
            item_session = item_engine.sessions.get(item_ids[name], item_owner)
            assert columns_session is not None and item_session is not None
            assert columns_session.phase is item_session.phase, name
            assert not columns_session.busy


async def test_a_batch_with_a_threaded_env_is_left_to_the_driver() -> None:
    from tests.envs import SlowEnv

    driver = Driver(Engine({"slow": EnvSpec.from_class(SlowEnv, "slow")}))
    peer = driver.peer(frames=False)
    opened = await driver.ask(peer, {"op": "open", "id": 1})
    session = msgspec.json.decode(opened)["session"]
    await driver.ask(peer, {"op": "reset", "id": 2, "session": session})
    calls = peer.submit(
        StepMany(id=3, steps=[StepItem(session=session, action=msgspec.Raw(b"{}"))])
    )
    assert [call.mode for call in calls] == [Mode.THREAD]
    assert peer.take() == []  # nothing answered before the step ran
    await driver.run(calls)
    (answer,) = peer.take()
    assert msgspec.json.decode(answer)["op"] == "step_many_result"


# --- server: reset items (`step_many.reset`) -----------------------------------------------------

RESET_ITEMS: list[tuple[str, Any]] = [  # (which session, the item: an action, or reset args)
    ("ok", {"do": "ok"}),
    ("fresh", ResetArgs()),  # a session never reset: the reset starts its first episode
    ("ended", ResetArgs(seed=3, episode_id="e-3")),  # a new episode after the last one ended
    ("unknown", ResetArgs()),
    ("end", "both"),  # an action and a reset: invalid_argument
    ("truncate", "neither"),  # no action, no reset: invalid_argument
    ("invalid", ResetArgs(options={"nope": 1})),  # the env takes no such reset option
    ("ok2", {"do": "end"}),
]


def _reset_frame(ids: dict[str, str], enc: Any) -> StepMany:
    items = []
    for name, what in RESET_ITEMS:
        session = ids[name]
        if isinstance(what, ResetArgs):
            items.append(StepItem(session=session, reset=what))
        elif what == "both":
            items.append(StepItem(session=session, action=enc.raw({"do": "ok"}), reset=ResetArgs()))
        elif what == "neither":
            items.append(StepItem(session=session))
        else:
            items.append(StepItem(session=session, action=enc.raw(what)))
    return StepMany(id=7, steps=items)


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_reset_items_answer_byte_for_byte_as_the_general_path(codec: str) -> None:
    batch_engine, batch_owner, batch_ids = await _probe_engine(codec)
    item_engine, item_owner, item_ids = await _probe_engine(codec)
    enc = codec_for(codec)
    fast = batch_engine.peer(enc, batch_owner)
    assert not fast.submit(_reset_frame(batch_ids, enc))
    (batched,) = fast.take()
    general = item_engine.peer(enc, item_owner, frames=True)
    assert not general.submit(_reset_frame(item_ids, enc))
    (answer,) = general.take()
    assert isinstance(answer, StepManyResult)
    renamed = batched
    for name, session in batch_ids.items():
        renamed = renamed.replace(session.encode(), item_ids[name].encode())
    assert renamed == enc.encode(answer)
    kinds = [r.code if isinstance(r, Error) else "observation" for r in answer.results]
    assert kinds == [
        "observation", "observation", "observation", "unknown_session", "invalid_argument",
        "invalid_argument", "invalid_argument", "observation",
    ]  # fmt: skip
    both, neither, option = answer.results[4], answer.results[5], answer.results[6]
    assert isinstance(both, Error) and "not both" in both.message
    assert isinstance(neither, Error) and "needs `action`" in neither.message
    assert isinstance(option, Error) and option.details["unknown"] == ["nope"]
    for name, phase in [("fresh", Phase.RUNNING), ("ended", Phase.RUNNING), ("ok2", Phase.ENDED)]:
        after = batch_engine.sessions.get(batch_ids[name], batch_owner)
        assert after is not None and after.phase is phase, name
        assert not after.busy
    ended = batch_engine.sessions.get(batch_ids["ended"], batch_owner)
    assert ended is not None and ended.env.state().episode_id == "e-3"  # the item's reset args


COLUMN_RESETS: list[tuple[str, Any]] = [  # (which session, its action; None: a reset)
    ("ok", {"do": "ok"}),
    ("fresh", None),  # never reset: the reset starts its first episode
    ("ended", None),  # a new episode after the last one ended
    ("end", {"do": "end"}),
    ("raise", {"do": "raise"}),
    ("reject", {"do": "reject"}),
    ("truncate", None),  # a running episode, reset midway
    ("unencodable", {"do": "unencodable"}),
    ("ok2", {"do": "ok"}),
]


@pytest.mark.parametrize("codec", ["json", "msgpack"])
@pytest.mark.parametrize(
    "args", [None, ResetArgs(seed=3, episode_id="e-3"), ResetArgs(options={"nope": 1})]
)
async def test_step_columns_with_resets_inline_answers_as_the_general_path(
    codec: str, args: ResetArgs | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `step_columns` whose resets are answered inline, in the same pass as its steps, gives
    the bytes and phases the general path (each position an item on its own) gives: resets of
    fresh, ended and running sessions, with seeds, episode ids, or an option the env refuses,
    beside steps that end, raise, are refused or cannot be encoded."""
    fast_engine, fast_owner, fast_ids = await _probe_engine(codec)
    item_engine, item_owner, item_ids = await _probe_engine(codec)
    enc = codec_for(codec)
    resets = [j for j, (_, action) in enumerate(COLUMN_RESETS) if action is None]

    def frame(ids: dict[str, str]) -> StepColumns:
        return StepColumns(
            id=7,
            sessions=[ids[name] for name, _ in COLUMN_RESETS],
            actions=enc.raw([action for _, action in COLUMN_RESETS]),
            resets=resets,
            reset=args,
        )

    fast = fast_engine.peer(enc, fast_owner)
    with monkeypatch.context() as patched:  # the inline pass answers it: no items are made
        patched.setattr("ecotone.kernel.batches._column_items", None)
        assert not fast.submit(frame(fast_ids))
    (data,) = fast.take()
    assert isinstance(data, bytes)
    general = item_engine.peer(enc, item_owner, frames=True)
    assert not general.submit(frame(item_ids))
    (answer,) = general.take()
    renamed = data
    for name, session in fast_ids.items():
        renamed = renamed.replace(session.encode(), item_ids[name].encode())
    assert renamed == enc.encode(answer)
    decoded = msgspec.json.decode(data) if codec == "json" else msgspec.msgpack.decode(data)
    errors = {int(j): e["code"] for j, e in decoded.get("errors", {}).items()}
    refused = {j: "invalid_argument" for j in resets} if args and args.options else {}
    assert errors == {4: "env_error", 5: "invalid_action", 7: "env_error", **refused}
    for name, _ in COLUMN_RESETS:
        fast_session = fast_engine.sessions.get(fast_ids[name], fast_owner)
        item_session = item_engine.sessions.get(item_ids[name], item_owner)
        assert fast_session is not None and item_session is not None
        assert fast_session.phase is item_session.phase, name
        assert not fast_session.busy
        assert fast_session.env.state().episode_id == item_session.env.state().episode_id or (
            args is None or args.episode_id is None  # random ids otherwise
        )
    if args is not None and args.episode_id is not None:
        for j in resets:
            reset_one = fast_engine.sessions.get(fast_ids[COLUMN_RESETS[j][0]], fast_owner)
            assert reset_one is not None and reset_one.env.state().episode_id == "e-3"


@pytest.mark.parametrize(
    ("resets", "actions", "message"),
    [
        ([1, 1], [{"do": "ok"}, None], "more than once"),
        ([5], [{"do": "ok"}, {"do": "ok"}], "beyond"),
        ([1], [None, None], None),  # a null action where a step is: that item is refused
    ],
)
async def test_step_columns_resets_the_fast_path_cannot_judge_are_judged_as_before(
    resets: list[int], actions: list[Any], message: str | None
) -> None:
    engine, owner, ids = await _probe_engine("json")
    enc = codec_for("json")
    peer = engine.peer(enc, owner)
    sessions = [ids["ok"], ids["ok2"]]
    assert not peer.submit(
        StepColumns(id=3, sessions=sessions, actions=enc.raw(actions), resets=resets)
    )
    (data,) = peer.take()
    answer = msgspec.json.decode(data)
    if message is not None:
        assert answer["op"] == "error" and answer["code"] == "invalid_argument"
        assert message in answer["message"]
    else:
        assert answer["op"] == "step_columns_result"
        assert answer["errors"]["0"]["code"] == "invalid_action"
        assert answer["observations"][1] is not None  # the reset went on
    for session in sessions:
        state = engine.sessions.get(session, owner)
        assert state is not None and not state.busy


class SavableProbeEnv(ProbeEnv):
    """`ProbeEnv` whose episodes can be saved, so a session's observation can be forked."""

    name = "savable_probe"

    def load_state(self, state: ecotone.State) -> None:
        self._state = state


class SavableProbes:
    @ecotone.hookimpl
    def ecotone_environments(self) -> dict[str, type]:
        return {"savable_probe": SavableProbeEnv}


@pytest.mark.parametrize("form", ["step", "step_many", "step_columns"])
def test_an_observation_that_cannot_be_encoded_is_not_kept_whatever_form_carried_the_step(
    form: str,
) -> None:
    """A step whose observation cannot be encoded moves nothing, in a batch's fast pass as in
    a `step` frame: the session's observation stays the last one answered, so a fork of it
    afterwards copies that one (the fast passes kept the unencodable one: the fork failed)."""
    with (
        run_bare_server("savable_probe", plugins=[SavableProbes()]) as url,
        RawWebSocket(url) as ws,
    ):
        a, b = ws.open_session(), ws.open_session()
        for session in (a, b):
            ws.request("reset", session=session)
        answered = ws.request("step", session=a, action={"do": "ok"})["observation"]
        bad, ok = {"do": "unencodable"}, {"do": "ok"}
        if form == "step":
            error = ws.request("step", session=a, action=bad)
        elif form == "step_many":
            steps = [{"session": a, "action": bad}, {"session": b, "action": ok}]
            error = ws.request("step_many", steps=steps)["results"][0]
        else:
            answer = ws.request("step_columns", sessions=[a, b], actions=[bad, ok])
            assert answer["op"] == "step_columns_result", answer
            error = answer["errors"]["0"]
        assert error["code"] == "env_error" and "cannot be encoded" in error["message"]
        forked = ws.request("fork", session=a)
        assert forked["op"] == "forked", forked
        assert forked["observation"] == answered


async def test_a_reset_item_answers_what_a_reset_frame_answers() -> None:
    engine, owner, ids = await _probe_engine("json")
    peer = engine.peer(codec_for("json"), owner, frames=True)
    args = ResetArgs(seed=5, episode_id="x")
    assert not peer.submit(StepMany(id=9, steps=[StepItem(session=ids["ok"], reset=args)]))
    (many,) = peer.take()
    assert not peer.submit(Reset(id=9, session=ids["ok2"], seed=5, episode_id="x"))
    (single,) = peer.take()
    (item,) = many.results
    assert type(item) is type(single)
    assert bytes(item.observation) == bytes(single.observation)
    assert item.id == single.id == 9


async def test_reset_items_of_a_threaded_env_run_on_the_driver() -> None:
    from tests.envs import SlowEnv

    driver = Driver(Engine({"slow": EnvSpec.from_class(SlowEnv, "slow")}))
    peer = driver.peer(frames=False)
    opened = [
        msgspec.json.decode(await driver.ask(peer, {"op": "open", "id": i}))["session"]
        for i in (1, 2)
    ]
    await driver.ask(peer, {"op": "reset", "id": 3, "session": opened[0]})
    items = [
        {"session": opened[0], "action": {}},
        {"session": opened[1], "reset": {"options": {"sleep": 0.0}}},
    ]
    calls = peer.receive(msgspec.json.encode({"op": "step_many", "id": 4, "steps": items}))
    assert sorted(call.mode.value for call in calls) == [Mode.THREAD.value] * 2
    assert peer.take() == []
    await driver.run(calls)
    (answer,) = peer.take()
    results = msgspec.json.decode(answer)["results"]
    assert [r["op"] for r in results] == ["observation", "observation"]
    assert results[0]["observation"]["steps"] == 1 and results[1]["observation"]["steps"] == 0


async def test_a_reset_item_of_a_session_set_aside_after_a_timeout_makes_a_fresh_env() -> None:
    from tests.envs import SlowEnv

    engine = Engine({"slow": EnvSpec.from_class(SlowEnv, "slow")})
    driver = Driver(engine)
    peer = driver.peer(frames=False)
    session = msgspec.json.decode(await driver.ask(peer, {"op": "open", "id": 1}))["session"]
    await driver.ask(peer, {"op": "reset", "id": 2, "session": session})
    (hung,) = peer.receive(
        msgspec.json.encode({"op": "step", "id": 3, "session": session, "action": {}})
    )
    await driver.run(engine.timed_out(hung))  # the step passed its deadline: set aside
    (late,) = peer.take()
    assert msgspec.json.decode(late)["code"] == "timeout"
    state = engine.sessions.get(session, peer.owner)
    assert state is not None and state.env is None and state.phase is Phase.BROKEN
    items = [{"session": session, "reset": {}}]
    calls = peer.receive(msgspec.json.encode({"op": "step_many", "id": 4, "steps": items}))
    assert await driver.run(calls) == 2  # a fresh instance, then its reset
    (answer,) = peer.take()
    (result,) = msgspec.json.decode(answer)["results"]
    assert result["op"] == "observation" and result["id"] == 4
    assert state.env is not None and state.phase is Phase.RUNNING and not state.busy


async def test_a_reset_item_of_a_set_aside_session_whose_env_is_made_inline_and_awaited() -> None:
    """An inline env with an async rubric: its fresh instance is made at once, and the reset
    it leads to is awaited, a call of its own, which must answer the item (not a None)."""
    from ecotone.plugins.counter import CounterEnv
    from ecotone.rubrics import Fn, Reward, WeightedSum

    async def judge(action: Any, obs: Any) -> float:
        await trio.lowlevel.checkpoint()
        return 0.0

    rubric = WeightedSum({"env": (Reward(), 1.0), "judge": (Fn(judge), 1.0)})
    env_class = type("ia", (CounterEnv,), {"name": "ia", "rubric": rubric})
    spec = EnvSpec.from_class(env_class, "ia")
    assert spec.inline and spec.mode is Mode.AWAIT
    engine = Engine({"ia": spec})
    driver = Driver(engine)
    peer = driver.peer(frames=False)
    session = msgspec.json.decode(await driver.ask(peer, {"op": "open", "id": 1}))["session"]
    await driver.ask(peer, {"op": "reset", "id": 2, "session": session})
    (hung,) = peer.receive(
        msgspec.json.encode({"op": "step", "id": 3, "session": session, "action": {"delta": 1}})
    )
    await driver.run(engine.timed_out(hung))
    assert msgspec.json.decode(peer.take()[0])["code"] == "timeout"
    items = [{"session": session, "reset": {"options": {"start": 5}}}]
    calls = peer.receive(msgspec.json.encode({"op": "step_many", "id": 4, "steps": items}))
    assert [call.mode for call in calls] == [Mode.AWAIT]
    assert peer.take() == []  # nothing answered before the reset ran
    state = engine.sessions.get(session, peer.owner)
    assert state is not None and state.busy  # the reset holds the session
    await driver.run(calls)
    (answer,) = peer.take()
    (result,) = msgspec.json.decode(answer)["results"]
    assert result["op"] == "observation" and result["observation"]["count"] == 5
    assert not state.busy and state.phase is Phase.RUNNING
    assert peer.pending == 0


def test_a_batched_send_of_resets_only_completes_once() -> None:
    core, conns = _core(2, urls=2, features=("step_many.reset",))
    core.subs[1].needs_reset = True  # alone on its link: that step_many is all resets
    core.plan_step([{"delta": 1}] * 2, core.subs, None, batched=True)
    _answer(core, conns, set(), False, [])
    assert core.ready_count == 2 and not core.sending
    first, second = take_ready(core, 1), take_ready(core, 1)
    by_id = {int(b.env_ids[0]): b for b in (first, second)}
    assert by_id[0].observations[0].count == 10 and by_id[0].rewards.tolist() == [10.0]
    fresh = by_id[1].observations[0]
    assert fresh.count == 0 and fresh.metadata == {"fresh": True}
    assert by_id[1].rewards.tolist() == [0.0] and by_id[1].infos["fresh"].tolist() == [True]
    assert all(sub.busy is None and sub.sent is None for sub in core.subs)


async def test_a_guest_may_not_reset_a_shared_session_inside_step_many() -> None:
    engine, owner, ids = await _probe_engine("json")
    host = engine.peer(codec_for("json"), owner, frames=True)
    assert not host.submit(ecotone.specs.Share(id=1, session=ids["ok"]))
    (shared,) = host.take()
    guest = engine.peer(codec_for("json"), frames=True)
    assert engine.attach(guest.owner, shared.key) == ids["ok"]
    item = StepItem(session=ids["ok"], reset=ResetArgs())
    assert not guest.submit(StepMany(id=2, steps=[item]))
    (answer,) = guest.take()
    (result,) = answer.results
    assert isinstance(result, Error) and result.code == "forbidden"


async def test_welcome_lists_the_reset_items_feature() -> None:
    engine, owner, _ = await _probe_engine("json")
    peer = engine.peer(codec_for("json"), owner, frames=True)
    assert not peer.submit(Hello(id=1))
    (welcome,) = peer.take()
    assert isinstance(welcome, Welcome) and "step_many.reset" in welcome.features


# --- client, sending: WireStepMany against StepMany --------------------------------------------


class FakeConn:
    """What `VectorCore` needs of a connection: a client core (ids, codec) and liveness."""

    def __init__(self, codec: str = "json") -> None:
        self.core = ClientCore(codec)
        self.closed = False
        self.decode: Any = None


def _core(
    n: int,
    *,
    urls: int = 1,
    observation_type: Any = CounterObservation,
    autoreset_mode: str = "next_step",
    codec: str = "json",
    features: tuple[str, ...] = (),
) -> tuple[VectorCore, list[FakeConn]]:
    """A vector core of `n` sub-envs over `urls` fake connections to servers that list
    `features` in their welcome, every session open and its episode running."""
    core = VectorCore(
        [f"ws://host{i}:1" for i in range(urls)],
        n,
        env=None,
        types=EnvTypes(observation_type),
        policy=Policy(
            autoreset_mode=autoreset_mode, errors="info", reset_options=None, step_timeout=60.0
        ),
    )
    conns = [FakeConn(codec) for _ in core.links]
    for link, conn in zip(core.links, conns, strict=True):
        core.attach(link, conn)
        (hello,) = core.take_outbox(link)  # what the server can do, asked first
        assert isinstance(hello, Hello)
        welcome = Welcome(
            id=hello.id, version=1, server="test", envs=["counter"], features=list(features)
        )
        core.on_response(link, welcome)
        assert link.folds_resets is ("step_many.reset" in features)
    for sub in core.subs:
        sub.session = f"{sub.index:016x}"
        sub.conn = sub.link.conn
        sub.needs_reset = False
    return core, conns


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_a_vector_step_many_encodes_to_the_bytes_of_step_many(codec: str) -> None:
    actions: list[Any] = [
        {"delta": 1},
        {"delta": np.int64(2)},
        CounterAction(delta=3),
        {"move": np.arange(3), "nested": {"x": np.float32(0.5), "t": (np.bool_(True), 1)}},
        [np.float64(0.25), None, "text"],
    ]
    core, (conn,) = _core(len(actions), codec=codec)
    tally = Tally()
    core.plan_step(actions, core.subs, tally)
    (frame,) = core.take_outbox(core.links[0])
    assert isinstance(frame, WireStepMany)
    plain = codec_for(codec)

    def raw(action: Any) -> msgspec.Raw:
        try:
            return plain.raw(action)
        except TypeError:  # numpy values: what the vector env always sent for them
            return plain.raw(msgspec.to_builtins(action, enc_hook=lambda v: v.tolist()))

    reference = StepMany(
        id=frame.id,
        steps=[
            StepItem(session=s.session or "", action=raw(a))
            for s, a in zip(core.subs, actions, strict=True)
        ],
    )
    assert conn.core.encode(frame) == plain.encode(reference)


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_a_vector_step_columns_encodes_to_the_bytes_of_step_columns(codec: str) -> None:
    actions: list[Any] = [{"delta": 1}, {"delta": np.int64(2)}, CounterAction(delta=3)]
    core, (conn,) = _core(len(actions), codec=codec, features=("step_columns",))
    core.plan_step(actions, core.subs, Tally())
    (frame,) = core.take_outbox(core.links[0])
    assert isinstance(frame, WireColumns)
    plain = codec_for(codec)
    reference = StepColumns(
        id=frame.id,
        sessions=[s.session or "" for s in core.subs],
        actions=plain.raw([{"delta": 1}, {"delta": 2}, CounterAction(delta=3)]),
    )
    assert conn.core.encode(frame) == plain.encode(reference)


def test_an_action_that_cannot_be_encoded_raises_before_anything_is_queued() -> None:
    core, _ = _core(3)
    core.subs[1].needs_reset = True  # would be reset instead: nothing of it may be queued either
    tally = Tally()
    with pytest.raises(TypeError, match="unsupported"):
        core.plan_step([{"delta": 1}, {"delta": 1}, {"delta": object()}], core.subs, tally)
    assert tally.open == 0 and not tally.outcomes
    assert not core.links[0].outbox and not core.links[0].inflight
    assert all(sub.busy is None and sub.outcome is None for sub in core.subs)


# --- client, answering: the bulk path against the per-sub-env path ----------------------------


def _observation(count: int, *, done: bool, truncated: bool, meta: bool) -> dict[str, Any]:
    obs: dict[str, Any] = {"count": count, "reward": None if count == 3 else float(count)}
    if done:
        obs["done"] = True
    if truncated:
        obs["truncated"] = True
    if meta and count % 2:
        obs["metadata"] = {"odd": count, "half": count / 2}
    return obs


FRESH = {"count": 0, "metadata": {"fresh": True}}


def _answer(
    core: VectorCore, conns: list[FakeConn], ends: set[int], meta: bool, frames: list[str]
) -> None:
    """Answer every frame the core queued, as a counter server would: a step_many's items get
    observations (ending the episodes of `ends`), resets (frames or items) a fresh one. The
    ops of the frames go to `frames`."""
    while any(link.outbox for link in core.links):
        for link, conn in zip(core.links, conns, strict=True):
            for frame in core.take_outbox(link):
                frames.append(type(frame).__name__)
                if isinstance(frame, WireColumns):  # by columns: the same answers, by position
                    actions = msgspec.json.decode(frame.actions)
                    assert len(actions) == len(frame.sessions)
                    assert all(actions[j] is None for j in frame.resets)
                    assert frame.reset == (ResetArgs() if frame.resets else None)
                    observations: list[dict[str, Any]] = []
                    data: dict[str, Any]
                    for j, session in enumerate(frame.sessions):
                        index = int(session, 16)
                        observations.append(
                            FRESH
                            if j in frame.resets
                            else _observation(
                                10 + index,
                                done=index in ends and index % 2 == 0,
                                truncated=index in ends and index % 2 == 1,
                                meta=meta,
                            )
                        )
                    data = {
                        "op": "step_columns_result",
                        "id": frame.id,
                        "observations": observations,
                    }
                elif isinstance(frame, WireStepMany):
                    steps = msgspec.json.decode(frame.steps)
                    results = []
                    for step in steps:
                        if "reset" in step:
                            assert step["reset"] == {} and "action" not in step, step
                            results.append(
                                {"op": "observation", "id": frame.id, "session": step["session"],
                                 "observation": FRESH}
                            )  # fmt: skip
                            continue
                        index = int(step["session"], 16)
                        obs = _observation(
                            10 + index,
                            done=index in ends and index % 2 == 0,
                            truncated=index in ends and index % 2 == 1,
                            meta=meta,
                        )
                        results.append(
                            {"op": "observation", "id": frame.id, "session": step["session"],
                             "observation": obs}
                        )  # fmt: skip
                    data = {
                        "op": "step_many_result",
                        "id": frame.id,
                        "results": results,
                    }
                else:
                    assert isinstance(frame, Reset), frame
                    data = {
                        "op": "observation",
                        "id": frame.id,
                        "session": frame.session,
                        "observation": FRESH,
                    }
                core.on_response(link, conn.decode(msgspec.json.encode(data)))


class Servers(NamedTuple):
    """What `_step` runs against: `urls` servers, whose answers end the episodes of `ends` at
    the first step and carry metadata (`meta`); that take resets inside step_many (`folds`)
    and `step_columns` (`columns`)."""

    urls: int
    ends: set[int]
    meta: bool
    folds: bool = False
    columns: bool = False


def _step(
    bulk: bool,
    mode: str,
    observation_type: Any,
    servers: Servers,
    frames: list[str] | None = None,
) -> Any:
    """Three steps of 8 sub-envs (the episodes of `servers.ends` end at the first; under
    `disabled`, which would refuse to step them again, only that one), every result and the
    sub-envs' state after; `bulk=False` forces the per-sub-env path; the frames sent go to
    `frames`."""
    urls, ends, meta, folds, columns = servers
    features: tuple[str, ...] = ("step_many.reset",) if folds else ()
    if columns:
        features += ("step_columns",)
    core, conns = _core(
        8, urls=urls, observation_type=observation_type, autoreset_mode=mode, features=features
    )
    sent = [] if frames is None else frames
    if not bulk:
        core._take_in_bulk = lambda request, response: False  # type: ignore[method-assign]
    results = []
    for step in range(1 if mode == "disabled" and ends else 3):
        tally = Tally()
        core.check_steppable(core.subs)
        core.plan_step([{"delta": 1}] * 8, core.subs, tally)
        _answer(core, conns, ends if step == 0 else set(), meta, sent)
        assert tally.complete
        if step == 0 and not ends:  # every answer was ordinary: no sub-env needed an outcome
            assert bool(tally.rows) is bulk and bool(tally.outcomes) is not bulk
        results.append(core.step_all_result(tally))
    return results, [sub.obs for sub in core.subs], [sub.needs_reset for sub in core.subs]


def _comparable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, _comparable(value.tolist()))
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return (type(value).__name__, msgspec.to_builtins(value))
    return value


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("observation_type", [CounterObservation, None])
@pytest.mark.parametrize("urls", [1, 3])
@pytest.mark.parametrize(("ends", "meta"), [(set(), False), ({1, 2, 5}, True)])
@pytest.mark.parametrize("columns", [False, True], ids=["step_many", "step_columns"])
def test_an_answer_taken_in_bulk_gives_what_the_per_sub_env_path_gives(
    mode: str, observation_type: Any, urls: int, ends: set[int], meta: bool, columns: bool
) -> None:
    servers = Servers(urls, ends, meta, columns=columns)
    bulk = _step(True, mode, observation_type, servers)
    per_sub = _step(False, mode, observation_type, Servers(urls, ends, meta))  # item by item
    assert _comparable(bulk) == _comparable(per_sub)
    by_columns = _step(False, mode, observation_type, servers)
    assert _comparable(by_columns) == _comparable(per_sub)


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("urls", [1, 3])
@pytest.mark.parametrize("bulk", [True, False])
@pytest.mark.parametrize("columns", [False, True], ids=["step_many", "step_columns"])
def test_autoresets_inside_step_many_give_what_reset_frames_give(
    mode: str, urls: int, bulk: bool, columns: bool
) -> None:
    ends = {1, 2, 5}
    folded_frames: list[str] = []
    folding = Servers(urls, ends, meta=True, folds=True, columns=columns)
    folded = _step(bulk, mode, CounterObservation, folding, folded_frames)
    separate_frames: list[str] = []
    separating = Servers(urls, ends, meta=True)
    separate = _step(bulk, mode, CounterObservation, separating, separate_frames)
    assert _comparable(folded) == _comparable(separate)
    assert "Reset" in separate_frames
    if mode == "next_step":  # the resets ride in the next step's step_many: no frame of their own
        assert "Reset" not in folded_frames
        batch = "WireColumns" if columns else "WireStepMany"
        assert folded_frames.count(batch) == 3 * urls  # one per link and step


def _vector_run(url: str, env: str, mode: str, errors: str) -> list[Any]:
    """Six steps of 5 sub-envs on `url` (twice, round robin), every result (or the error
    raised, with its result); under `disabled`, the ended sub-envs are reset by mask."""
    failing = env == "failing"
    options = {"fail": True} if failing else {"max_steps": 2}
    steps = [[{"fail": j in (1, 3)} for j in range(5)], [{}] * 5] if failing else []
    steps += [[{"delta": j} for j in range(5)] if not failing else [{}] * 5] * (6 - len(steps))
    out: list[Any] = []
    with ecotone.VectorEnv(
        [url, url + "/"], 5, autoreset_mode=mode, errors=errors, reset_options=options,
        observation_type=CounterObservation,
    ) as venv:  # fmt: skip
        out.append(_comparable(venv.reset(options={"fail": False} if failing else {})))
        for actions in steps:
            try:
                result = venv.step(actions)
            except ecotone.SubEnvError as exc:
                result = exc.result
                out.append((type(exc).__name__, sorted(exc.errors)))
            out.append(_comparable(result))
            ended = np.asarray(result[2]) | np.asarray(result[3])
            if mode == "disabled" and ended.any():
                mask = {"reset_mask": ended, **({"fail": False} if failing else {})}
                out.append(_comparable(venv.reset(options=mask)))
        assert not any(sub.busy for sub in venv._core.subs)
    return out


@pytest.mark.parametrize("env", ["counter", "failing"])
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("errors", ["info", "raise"])
def test_a_vector_env_gets_from_the_inline_passes_what_the_per_item_path_gives(
    env: str, mode: str, errors: str
) -> None:
    """A vector env's step_columns (its folded autoresets answered inline) against a server
    whose batches take the inline passes, and one whose step hook sends them down the
    per-item path (`run_server`'s recorder): the same results, step for step, with episodes
    that end, steps and folded resets that raise, in every autoreset mode."""
    with run_bare_server(env) as bare, run_server(env) as hooked:
        assert _vector_run(bare, env, mode, errors) == _vector_run(hooked.url, env, mode, errors)


class NullableAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    null: bool = False
    fail: bool = False
    wordy: bool = False


class NullableEnv(ecotone.Environment[NullableAction, CounterObservation, ecotone.State]):
    """A counter whose step returns None (the server answers it as a null observation), a
    reward that is a word, or raises, when asked to."""

    name = "nullable"
    inline = True

    def __init__(self) -> None:
        self._state = ecotone.State()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> CounterObservation:
        self._state = ecotone.State(episode_id=episode_id)
        return CounterObservation(count=0)

    def step(self, action: NullableAction) -> CounterObservation:
        if action.fail:
            raise RuntimeError("step exploded")
        self._state.step_count += 1
        if action.null:
            return None  # type: ignore[return-value]  # against the contract, on purpose
        reward: Any = "lots" if action.wordy else 1.0  # against the contract too
        return CounterObservation(count=self._state.step_count, reward=reward)

    def state(self) -> ecotone.State:
        return self._state


class NullableEnvs:
    @ecotone.hookimpl
    def ecotone_environments(self) -> dict[str, type]:
        return {"nullable": NullableEnv}


@pytest.mark.parametrize("observation_type", [CounterObservation, None])
@pytest.mark.parametrize("beside", ["ok", "fail"], ids=["in_bulk", "by_items"])
def test_a_null_observation_in_step_columns_is_reported_as_step_many_reports_it(
    observation_type: Any, beside: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `step_columns_result` with a null observation no error explains (an env whose step
    returned None) is that sub-env's `bad_observation`, episode lost, as in a
    `step_many_result` (whose item does not decode); it raised AttributeError out of `step`
    when the answer was taken in bulk, and was taken as a None observation by items."""

    def run(features: tuple[str, ...]) -> list[Any]:
        monkeypatch.setattr("ecotone.kernel.operations.FEATURES", features)
        with (
            run_bare_server("nullable", plugins=[NullableEnvs()]) as url,
            ecotone.VectorEnv(url, 3, errors="info", observation_type=observation_type) as venv,
        ):
            venv.reset()
            assert [link.columns for link in venv._core.links] == ["step_columns" in features]
            first = venv.step([{"null": True}, {"fail": beside == "fail"}, {}])
            second = venv.step([{}] * 3)
            assert not any(sub.busy for sub in venv._core.subs)
            return _comparable([first, second])

    by_columns = run(("step_many.reset", "step_columns"))
    assert by_columns == run(("step_many.reset",))
    infos = by_columns[0][4]
    assert infos["error_code"][1][0] == "bad_observation"
    assert by_columns[0][3][1][0] is True  # truncated: the episode is lost
    assert by_columns[1][1][1][0] == 0.0  # next_step: it was reset


@pytest.mark.parametrize("columns", [True, False], ids=["step_columns", "step_many"])
def test_a_reward_that_is_no_number_raises_as_per_sub_env_and_leaves_no_sub_env_busy(
    columns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dict observations (the default) whose reward is a word: `step` raises the ValueError
    the per-sub-env path raises, and every sub-env has its answer, so the vector env can be
    reset (taken in bulk, the error left them all waiting: no reset or restart ever again)."""
    if not columns:
        monkeypatch.setattr("ecotone.kernel.operations.FEATURES", ("step_many.reset",))
    with (
        run_bare_server("nullable", plugins=[NullableEnvs()]) as url,
        ecotone.VectorEnv(url, 2, errors="info") as venv,
    ):
        venv.reset()
        with pytest.raises(ValueError, match="could not convert string to float"):
            venv.step([{"wordy": True}, {}])
        assert not any(sub.busy for sub in venv._core.subs)
        observations, _ = venv.reset()
        assert [o["count"] for o in observations] == [0, 0]
        _, rewards, *_ = venv.step([{}, {}])
        assert rewards.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("columns", [True, False])
@pytest.mark.parametrize("with_resets", [True, False])
def test_a_batch_answered_with_the_wrong_number_of_items_fails_each_and_leaves_none_busy(
    columns: bool, with_resets: bool
) -> None:
    """A broken server answers one link's batch with an item too few (folded resets in it or
    not): that link's sub-envs fail `internal` as lost episodes, the other link's step, and
    the next step goes on (no sub-env is left waiting for an answer that will never come)."""
    features = ("step_many.reset", "step_columns") if columns else ("step_many.reset",)
    core, conns = _core(6, urls=2, features=features)
    if with_resets:
        core.subs[0].needs_reset = core.subs[4].needs_reset = True  # both on link 0
    tally = Tally()
    core.check_steppable(core.subs)
    core.plan_step([{"delta": 1}] * 6, core.subs, tally)
    for link, conn in zip(core.links, conns, strict=True):
        (frame,) = core.take_outbox(link)
        observations = [{"count": 1, "reward": 1.0}] * 3
        if link.index == 0:
            observations = observations[:2]  # one item too few
        if columns:
            data: dict[str, Any] = {
                "op": "step_columns_result", "id": frame.id, "observations": observations
            }  # fmt: skip
        else:
            results = [
                {"op": "observation", "id": frame.id, "session": "x", "observation": o}
                for o in observations
            ]
            data = {"op": "step_many_result", "id": frame.id, "results": results}
        core.on_response(link, conn.decode(msgspec.json.encode(data)))
    assert tally.complete
    _, rewards, _, truncated, infos = core.step_all_result(tally)
    assert [bool(infos["_error_code"][i]) for i in range(6)] == [True, False] * 3
    assert {infos["error_code"][i] for i in (0, 2, 4)} == {"internal"}
    assert truncated.tolist() == [True, False] * 3  # lost episodes
    assert rewards.tolist() == [0.0, 1.0] * 3
    assert not any(sub.busy for sub in core.subs)
    core.check_steppable(core.subs)  # nothing in flight: the next step may go
    again = Tally()
    core.plan_step([{"delta": 1}] * 6, core.subs, again)
    assert core.links[0].outbox and core.links[1].outbox
