"""`step_columns` on the paths its first tests left out, each held to what `step_many` of the
same items does (the frame's contract: "ordered and run exactly as the `step_many` of the same
items").

* Tasks: resets by position of an env that publishes tasks name each position's task in the
  answer's `tasks`, at the reset positions only (inline env: the batch fast path; worker-thread
  env: the general path).
* Resets by position of envs that run in worker threads or are awaited.
* Sessions that are busy (a call in flight, or held by an unfinished batch), queued behind
  other requests, or shared (a guest's step_columns; another owner's unshared session): the
  batch waits its turn, the guest steps but may not reset, the foreign session is
  `unknown_session` at its position, and the other positions step.
* The vector env's generic fallback: an answer the typed decoder cannot type (an observation
  that does not fit the observation type) is decoded as a plain `step_columns_result`.
* A vector env over two servers, one that takes `step_columns` and one that does not.

Engine-level tests drive the real engine by hand (tests/engine_driver.py), with peers that
answer in bytes (the fast paths) or in frames (the general path); the others run real servers
on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from collections.abc import Iterator
from typing import Any, Literal

import msgspec
import pytest

import ecotone
from ecotone.client.sync import Connection
from ecotone.kernel import Call, Engine, EnvSpec, Mode, Peer
from ecotone.plugins.counter import CounterEnv, CounterObservation
from ecotone.plugins.wordle import WordleEnv
from ecotone.specs import Error, Hello, StepColumns, Welcome
from tests.conftest import ecotone_serving, run_server
from tests.engine_driver import Driver, decoded
from tests.envs import AsyncCounterEnv, SlowEnv

# --- a worker-thread env that publishes tasks --------------------------------------------------


class Puzzle(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    size: int


def puzzles() -> ecotone.TaskSet[Puzzle]:
    return ecotone.TaskSet(
        {
            "train": [Puzzle(id=f"p{i}", size=i) for i in range(6)],
            "test": [Puzzle(id=f"t{i}", size=100 + i) for i in range(3)],
        },
        type=Puzzle,
    )


class PuzzleAction(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    guess: int


class PuzzleObservation(ecotone.Observation, kw_only=True):
    size: int = 0
    guesses: int = 0
    thread: int = 0


class PuzzleEnv(ecotone.Environment[PuzzleAction, PuzzleObservation, ecotone.State]):
    """Guess the task's size. Not inline: its calls run in worker threads."""

    name = "puzzle"
    tasks = puzzles

    def __init__(self) -> None:
        self._state = ecotone.State()
        self._size = 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, task: Puzzle | None = None
    ) -> PuzzleObservation:
        self._state = ecotone.State(episode_id=episode_id)
        self._size = task.size if task is not None else 0
        return PuzzleObservation(thread=threading.get_ident())

    def step(self, action: PuzzleAction) -> PuzzleObservation:
        self._state.step_count += 1
        found = action.guess == self._size
        return PuzzleObservation(
            size=self._size if found else 0,
            guesses=self._state.step_count,
            reward=1.0 if found else 0.0,
            done=found,
            thread=threading.get_ident(),
        )

    def state(self) -> ecotone.State:
        return self._state


UNKNOWN = "0123456789abcdef"


def _engine() -> Engine:
    classes: dict[str, type] = {
        "counter": CounterEnv,
        "wordle": WordleEnv,
        "puzzle": PuzzleEnv,
        "slow": SlowEnv,
        "async_counter": AsyncCounterEnv,
    }
    return Engine({name: EnvSpec.from_class(cls, name) for name, cls in classes.items()})


class Wire:
    """One peer of an engine, driven by hand: requests as dicts, answers as plain data.
    `fast`: the peer takes answers as bytes, so the batch fast paths may answer; otherwise as
    frames, which only the general path (item by item, on each session's turn) answers."""

    def __init__(
        self, engine: Engine, codec: str = "json", fast: bool = True, owner: Any = None
    ) -> None:
        self.driver = Driver(engine)
        self.engine = engine
        self.peer: Peer = self.driver.peer(codec, owner, frames=not fast)
        self._ids = itertools.count(1)

    def frame(self, op: str, **fields: Any) -> bytes:
        return self.peer.codec.encode({"op": op, "id": next(self._ids), **fields})

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        return decoded(self.peer, await self.driver.ask(self.peer, self.frame(op, **fields)))

    def receive(self, op: str, **fields: Any) -> list[Call]:
        """Send a request without running the calls it hands out."""
        return list(self.peer.receive(self.frame(op, **fields)))

    def answers(self) -> list[dict[str, Any]]:
        return [decoded(self.peer, a) for a in self.peer.take()]

    async def open(self, env: str) -> str:
        reply = await self.call("open", env=env)
        assert reply["op"] == "opened", reply
        return str(reply["session"])

    async def reset(self, session: str, **fields: Any) -> dict[str, Any]:
        reply = await self.call("reset", session=session, **fields)
        assert reply["op"] == "observation", reply
        return reply

    async def state(self, session: str) -> dict[str, Any]:
        reply = await self.call("state", session=session)
        assert reply["op"] == "state", reply
        return dict(reply["state"])


def _items(
    sessions: list[str], actions: list[Any], resets: list[int], reset: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The `step_many` items of a `step_columns`."""
    return [
        {"session": s, "reset": reset or {}} if j in resets else {"session": s, "action": a}
        for j, (s, a) in enumerate(zip(sessions, actions, strict=True))
    ]


def by_items(columns: dict[str, Any], sessions: list[str]) -> list[dict[str, Any]]:
    """A `step_columns_result` as the `step_many_result` items of the same request; checks the
    columns' own shape on the way (null at exactly the failed positions, keys in range)."""
    assert columns["op"] == "step_columns_result", columns
    observations = columns["observations"]
    assert len(observations) == len(sessions)
    # JSON keys are strings ("3"); MessagePack keeps them integers.
    errors = {int(j): e for j, e in columns.get("errors", {}).items()}
    tasks = {int(j): t for j, t in columns.get("tasks", {}).items()}
    assert set(errors) | set(tasks) <= set(range(len(sessions))), columns
    assert not set(errors) & set(tasks), columns
    out: list[dict[str, Any]] = []
    for j, observation in enumerate(observations):
        if j in errors:
            assert observation is None, (j, columns)
            out.append(errors[j])
            continue
        item = {
            "op": "observation",
            "id": columns["id"],
            "session": sessions[j],
            "observation": observation,
        }
        if j in tasks:
            item["task"] = tasks[j]
        out.append(item)
    return out


def renamed(value: Any, names: dict[str, str], drop: tuple[str, ...] = ()) -> Any:
    """`value` with session ids renamed (errors name them in their messages too), the id of
    the request dropped, and the observations' `drop` fields left out."""
    if isinstance(value, dict):
        return {k: renamed(v, names, drop) for k, v in value.items() if k not in ("id", *drop)}
    if isinstance(value, list):
        return [renamed(v, names, drop) for v in value]
    if isinstance(value, str):
        for old, new in names.items():
            value = value.replace(old, new)
    return value


# --- a: tasks of resets by position -------------------------------------------------------------

TASK_ENVS = {
    # env: (a step action, options choosing a task, that task's ref, options no task meets)
    "wordle": (
        {"guess": "crane"},
        {"split": "test", "index": 1},
        None,
        {"split": "test", "index": 10**6},
    ),
    "puzzle": (
        {"guess": 3},
        {"split": "test", "index": 1},
        {"id": "t1", "split": "test", "index": 1},
        {"split": "dev"},
    ),
}


async def _task_sessions(wire: Wire, env: str) -> list[str]:
    """s0, s2, s3 reset (running), s1 fresh, and a made-up id at the end."""
    sessions = [await wire.open(env) for _ in range(4)]
    for j in (0, 2, 3):
        await wire.reset(sessions[j], seed=j)
    return [*sessions, UNKNOWN]


@pytest.mark.parametrize("fast", [True, False], ids=["bytes", "frames"])
@pytest.mark.parametrize("codec", ["json", "msgpack"])
@pytest.mark.parametrize("env", sorted(TASK_ENVS))
async def test_resets_by_position_name_each_positions_task_as_step_many_does(
    env: str, codec: str, fast: bool
) -> None:
    action, choose, ref, unmet = TASK_ENVS[env]
    engine = _engine()
    wire = Wire(engine, codec, fast)
    if ref is None:  # the task the choice names, as get_task finds it
        got = await wire.call("get_task", env=env, **choose)
        assert got["op"] == "task", got
        ref = got["ref"]
    columns_ids = await _task_sessions(wire, env)
    many_ids = await _task_sessions(wire, env)
    names = dict(zip(columns_ids, many_ids, strict=True))
    actions = [action, None, action, None, None]
    for resets, reset in (
        ([1, 3, 4], {"options": choose}),  # two resets naming one task, one of no session
        ([0, 1], {"options": unmet}),  # a choice no task meets: an error at each, no task
        ([2, 3], {"seed": 11}),  # drawn with the seed: each the same draw as step_many's
        ([], None),  # steps only: no tasks at all
    ):
        extra: dict[str, Any] = {"resets": resets, "reset": reset} if resets else {}
        columns = await wire.call("step_columns", sessions=columns_ids, actions=actions, **extra)
        many = await wire.call("step_many", steps=_items(many_ids, actions, resets, reset))
        assert many["op"] == "step_many_result", many
        assert renamed(by_items(columns, columns_ids), names, ("thread",)) == renamed(
            many["results"], names, ("thread",)
        ), (resets, reset)
        tasks = {int(j): t for j, t in columns.get("tasks", {}).items()}
        if reset is not None and "options" in reset and reset["options"] is choose:
            assert tasks == {1: ref, 3: ref}  # the reset positions that reset, nothing else
            errors = {int(j): e["code"] for j, e in columns["errors"].items()}
            assert errors == {4: "unknown_session"}
        elif reset is not None and "seed" in reset:
            assert set(tasks) == {2, 3} and tasks[2] == tasks[3]
            assert tasks[2]["split"] == "train"  # the first split
        else:
            assert tasks == {} and "tasks" not in columns  # omitted when empty
        if reset is not None and reset.get("options") is unmet:
            errors = {int(j): e["code"] for j, e in columns["errors"].items()}
            # (3 is a step with a null action: refused as any step without one)
            assert errors == {
                0: "invalid_argument",
                1: "invalid_argument",
                3: "invalid_action",
                4: "unknown_session",
            }
        for j in tasks:  # each session that reset runs a new episode
            assert (await wire.state(columns_ids[j]))["step_count"] == 0


# --- b: resets by position of envs that run in worker threads, or are awaited -----------------


@pytest.mark.parametrize("fast", [True, False], ids=["bytes", "frames"])
@pytest.mark.parametrize(
    ("env", "options", "action", "check"),
    [
        ("slow", {"sleep": 0.01}, {"tag": "t"}, "steps"),
        ("async_counter", {"start": 5}, {"delta": 2}, "count"),
    ],
)
async def test_resets_by_position_of_thread_and_async_envs_run_as_step_many_runs_them(
    env: str, options: dict[str, Any], action: dict[str, Any], check: str, fast: bool
) -> None:
    engine = _engine()
    wire = Wire(engine, "json", fast)
    loop_thread = threading.get_ident()

    async def sessions() -> list[str]:
        """A running and a fresh session of `env`, a running counter, another of `env`."""
        out = [await wire.open(env), await wire.open(env), await wire.open("counter")]
        out.append(await wire.open(env))
        for j in (0, 2, 3):
            await wire.reset(out[j])
        return out

    columns_ids, many_ids = await sessions(), await sessions()
    names = dict(zip(columns_ids, many_ids, strict=True))
    resets = [1, 3]
    reset = {"episode_id": "ep-reset", "options": options}
    actions = [action, None, {"delta": 1}, None]
    columns = await wire.call(
        "step_columns", sessions=columns_ids, actions=actions, resets=resets, reset=reset
    )
    many = await wire.call("step_many", steps=_items(many_ids, actions, resets, reset))
    items = by_items(columns, columns_ids)
    assert "errors" not in columns, columns
    assert renamed(items, names, ("thread",)) == renamed(many["results"], names, ("thread",))
    if env == "slow":  # the resets (and the step) ran in worker threads, not on the loop
        assert all(items[j]["observation"]["thread"] != loop_thread for j in (0, 1, 3))
        assert [items[j]["observation"]["steps"] for j in (0, 1, 3)] == [1, 0, 0]
    else:
        assert [items[j]["observation"]["count"] for j in (0, 1, 3)] == [2, 5, 5]
    for j in resets:  # the episodes the resets started, with the arguments given
        state = await wire.state(columns_ids[j])
        assert (state["episode_id"], state["step_count"]) == ("ep-reset", 0)
    # ...and they go on from there, by columns again
    again = await wire.call(
        "step_columns", sessions=[columns_ids[j] for j in resets], actions=[action, action]
    )
    assert [o[check] for o in again["observations"]] == ([1, 1] if env == "slow" else [7, 7]), again
    # A reset option the env does not take (the counter does): that position's error, the
    # other position resets.
    bad = await wire.call(
        "step_columns",
        sessions=[columns_ids[1], columns_ids[2]],
        actions=[None, None],
        resets=[0, 1],
        reset={"options": {"target": 3}},
    )
    errors = {int(j): e for j, e in bad.get("errors", {}).items()}
    assert set(errors) == {0} and errors[0]["code"] == "invalid_argument", bad
    assert "target" in errors[0]["message"] and bad["observations"][1]["count"] == 0


# --- c: busy, queued and shared sessions ------------------------------------------------------


@pytest.mark.parametrize("op", ["step_columns", "step_many"])
async def test_a_session_with_a_call_in_flight_is_stepped_by_columns_after_that_call(
    op: str,
) -> None:
    """The batch waits for the busy session's turn (it is not refused), and the idle one of
    the batch is stepped meanwhile but answered with the batch: as step_many does."""
    wire = Wire(_engine())
    busy, idle = await wire.open("slow"), await wire.open("slow")
    await wire.reset(busy)
    await wire.reset(idle)
    in_flight = wire.receive("step", session=busy, action={"tag": "first", "sleep": 0.05})
    assert [call.mode for call in in_flight] == [Mode.THREAD] and wire.answers() == []
    actions = [{"tag": "batch-busy"}, {"tag": "batch-idle"}]
    if op == "step_columns":
        calls = wire.receive("step_columns", sessions=[busy, idle], actions=actions)
    else:
        calls = wire.receive("step_many", steps=_items([busy, idle], actions, [], None))
    assert len(calls) == 1 and calls[0].session is not None
    assert calls[0].session.id == idle  # the busy one waits in its queue
    assert wire.answers() == []
    queued = wire.receive("state", session=busy)  # behind the batch
    assert queued == [] and wire.answers() == []
    await wire.driver.run(calls)
    assert wire.answers() == []  # the batch is not answered while one of its items waits
    await wire.driver.run(in_flight)
    first, batch, state = wire.answers()
    assert first["observation"]["tag"] == "first" and first["observation"]["steps"] == 1
    results = by_items(batch, [busy, idle]) if op == "step_columns" else batch["results"]
    assert [r["observation"]["tag"] for r in results] == ["batch-busy", "batch-idle"]
    assert [r["observation"]["steps"] for r in results] == [2, 1]
    assert state["state"]["step_count"] == 2 and state["state"]["last_tag"] == "batch-busy"


@pytest.mark.parametrize("fast", [True, False], ids=["bytes", "frames"])
async def test_an_inline_session_held_by_an_unfinished_batch_is_stepped_after_that_batch(
    fast: bool,
) -> None:
    """Counter sessions step inline, so a step_columns of them alone is the one-pass path's:
    but one that an unfinished step_many still holds must wait for it (else the later request
    would be answered first, and step a session the earlier batch has not answered yet)."""
    wire = Wire(_engine(), fast=fast)
    held, other = await wire.open("counter"), await wire.open("counter")
    slow = await wire.open("slow")
    for session in (held, other, slow):
        await wire.reset(session)
    steps = [
        {"session": held, "action": {"delta": 10}},
        {"session": slow, "action": {"tag": "s", "sleep": 0.05}},
    ]
    batch = wire.receive("step_many", steps=steps)
    assert len(batch) == 1 and wire.answers() == []  # held: stepped, answered with the batch
    columns = wire.receive(
        "step_columns", sessions=[other, held], actions=[{"delta": 1}, {"delta": 2}]
    )
    assert columns == [] and wire.answers() == []  # waits for `held`, stepping `other`
    step = wire.receive("step", session=held, action={"delta": 100})  # queued behind both
    assert step == [] and wire.answers() == []
    await wire.driver.run(batch)
    many, by_columns, stepped = wire.answers()
    assert many["op"] == "step_many_result"
    assert many["results"][0]["observation"]["count"] == 10
    assert [o["count"] for o in by_columns["observations"]] == [1, 12]
    assert stepped["observation"]["count"] == 112


async def test_a_queued_session_is_stepped_by_columns_after_the_requests_before_it() -> None:
    wire = Wire(_engine())
    session, other = await wire.open("slow"), await wire.open("counter")
    await wire.reset(session)
    await wire.reset(other)
    calls = wire.receive("step", session=session, action={"tag": "a", "sleep": 0.02})
    assert wire.receive("step", session=session, action={"tag": "b"}) == []  # queued
    actions = [{"tag": "c"}, {"delta": 3}]
    assert wire.receive("step_columns", sessions=[session, other], actions=actions) == []
    assert wire.answers() == []
    await wire.driver.run(calls)
    a, b, columns = wire.answers()
    assert [x["observation"]["tag"] for x in (a, b)] == ["a", "b"]
    assert columns["observations"][0]["tag"] == "c" and columns["observations"][0]["steps"] == 3
    assert columns["observations"][1]["count"] == 3


@pytest.mark.parametrize("fast", [True, False], ids=["bytes", "frames"])
async def test_a_guest_steps_a_shared_session_by_columns_but_cannot_reset_it(fast: bool) -> None:
    """By columns as by step_many: a guest steps the session shared with it (its owner reads
    that step in shared_steps), may not reset it (`forbidden` at that position), and another
    of the owner's sessions, not shared, is `unknown_session` at its position; the guest's own
    sessions step alongside."""
    engine = _engine()
    owner = Wire(engine, fast=fast)
    shared, unshared = await owner.open("counter"), await owner.open("counter")
    shared_m, unshared_m = await owner.open("counter"), await owner.open("counter")
    for session in (shared, unshared, shared_m, unshared_m):
        await owner.reset(session)
    guest = Wire(engine, fast=fast)
    for session in (shared, shared_m):
        key = (await owner.call("share", session=session))["key"]
        assert engine.attach(guest.peer.owner, key) == session
    own, own_m = await guest.open("counter"), await guest.open("counter")
    await guest.reset(own)
    await guest.reset(own_m)
    names = {shared: shared_m, unshared: unshared_m, own: own_m}

    columns_ids, many_ids = [shared, unshared, own], [shared_m, unshared_m, own_m]
    actions = [{"delta": 2}, {"delta": 3}, {"delta": 4}]
    columns = await guest.call("step_columns", sessions=columns_ids, actions=actions)
    many = await guest.call("step_many", steps=_items(many_ids, actions, [], None))
    items = by_items(columns, columns_ids)
    assert renamed(items, names) == renamed(many["results"], names)
    assert items[0]["observation"]["count"] == 2 and items[2]["observation"]["count"] == 4
    assert items[1]["code"] == "unknown_session"
    assert (await owner.state(unshared))["step_count"] == 0

    columns = await guest.call(
        "step_columns", sessions=[shared, own], actions=[None, None], resets=[0, 1]
    )
    many = await guest.call("step_many", steps=_items([shared_m, own_m], [None] * 2, [0, 1], {}))
    items = by_items(columns, [shared, own])
    assert renamed(items, names) == renamed(many["results"], names)
    assert items[0]["code"] == "forbidden" and items[1]["observation"]["count"] == 0
    assert (await owner.state(shared))["count"] == 2  # not reset

    # The owner's steps of its own shared session, by columns: not a guest's step.
    mine = await owner.call("step_columns", sessions=[shared, unshared], actions=actions[:2])
    assert [o["count"] for o in mine["observations"]] == [4, 3]
    seen = await owner.call("shared_steps", session=shared)
    assert [o["count"] for o in seen["observations"]] == [2]


# --- d: the vector env's generic fallback -----------------------------------------------------


class TaggedObservation(ecotone.Observation, kw_only=True):
    """What a client expects of the inline_probe env: a tag of two values only."""

    tag: Literal["", "a", "b"] = ""
    steps: int = 0


@pytest.mark.parametrize("columns", [True, False], ids=["step_columns", "step_many"])
def test_an_answer_the_typed_decoder_cannot_type_is_reported_as_for_step_many(
    columns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An observation that does not fit the vector env's observation type makes its typed
    decoder fall back to the generic one, which gives a plain `step_columns_result` (raw
    observations); the vector env then reports the observation that does not fit, naming its
    field, as it does for a `step_many_result`. Answers that fit are taken typed, before and
    after."""
    if not columns:
        monkeypatch.setattr("ecotone.kernel.operations.FEATURES", ("step_many.reset",))
    with (
        run_server("inline_probe") as server,
        ecotone.VectorEnv(server.url, 3, observation_type=TaggedObservation) as venv,
    ):
        venv.reset()
        assert [link.columns for link in venv._core.links] == [columns]
        obs, *_ = venv.step([{"tag": "a"}, {"tag": "b"}, {"tag": "a"}])
        assert [type(o) for o in obs] == [TaggedObservation] * 3
        assert [(o.tag, o.steps) for o in obs] == [("a", 1), ("b", 1), ("a", 1)]
        with pytest.raises(ecotone.EpisodeLost) as caught:
            venv.step([{"tag": "a"}, {"tag": "zzz"}, {"tag": "b"}])
        # Only the sub-env whose observation does not fit failed, naming the field; the
        # others stepped, and nothing is left in flight.
        assert list(caught.value.errors) == [1]
        assert isinstance(caught.value.cause, ecotone.ObservationMismatch)
        assert "at `$.tag`" in str(caught.value.cause)
        result = caught.value.result
        assert result is not None
        assert [(o.tag, o.steps) for j, o in enumerate(result[0]) if j != 1] == [
            ("a", 2),
            ("b", 2),
        ]
        # Its episode is lost: the next step resets it (next_step autoreset); the others go on.
        obs, _, _, truncated, infos = venv.step([{"tag": "a"}, {"tag": "b"}, {"tag": "b"}])
        assert [(o.tag, o.steps) for o in obs] == [("a", 3), ("", 0), ("b", 3)]
        assert truncated.tolist() == [False, False, False] and "error" not in infos
        obs, *_ = venv.step([{"tag": "a"}, {"tag": "b"}, {"tag": "b"}])
        assert [(o.tag, o.steps) for o in obs] == [("a", 4), ("b", 1), ("b", 4)]


@pytest.mark.parametrize("columns", [True, False], ids=["step_columns", "step_many"])
def test_an_observation_that_does_not_fit_is_reported_in_place_with_errors_info(
    columns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `errors="info"` the sub-env whose observation does not fit is truncated with
    `bad_observation` in its infos; the others' results are whole."""
    if not columns:
        monkeypatch.setattr("ecotone.kernel.operations.FEATURES", ("step_many.reset",))
    with (
        run_server("inline_probe") as server,
        ecotone.VectorEnv(server.url, 3, observation_type=TaggedObservation, errors="info") as venv,
    ):
        venv.reset()
        assert [link.columns for link in venv._core.links] == [columns]
        obs, rewards, terminated, truncated, infos = venv.step(
            [{"tag": "zzz"}, {"tag": "a"}, {"tag": "b"}]
        )
        assert (obs[0].tag, obs[0].steps) == ("", 0)  # its last good observation
        assert rewards[0] == 0.0 and infos["episode_lost"][0]
        assert truncated.tolist() == [True, False, False]
        assert terminated.tolist() == [False, False, False]
        assert rewards.tolist()[1:] == [1.0, 1.0]
        assert infos["_error_code"].tolist() == [True, False, False]
        assert infos["error_code"][0] == "bad_observation"
        assert "at `$.tag`" in str(infos["error"][0])
        assert [(o.tag, o.steps) for o in obs[1:]] == [("a", 1), ("b", 1)]
        obs, *_ = venv.step([{"tag": "a"}, {"tag": "a"}, {"tag": "a"}])
        assert [(o.tag, o.steps) for o in obs] == [("", 0), ("a", 2), ("a", 2)]


# --- e: a vector env over a server that takes step_columns and one that does not --------------

_TRIMMED_SERVER = """
import sys
from ecotone import cli
from ecotone.kernel import answers, engine, operations
from ecotone.specs import ErrorCode, StepColumns

keep = sys.argv[1].split(",")
operations.FEATURES = tuple(f for f in operations.FEATURES if f in keep)
if "step_columns" not in keep:  # a server from before it: the op is unknown to it
    submit = engine.Engine.submit

    def old_submit(self, peer, request):
        if type(request) is StepColumns:
            peer.emit(answers.error(ErrorCode.UNKNOWN_OP, "unknown op 'step_columns'", request.id))
            return ()
        return submit(self, peer, request)

    engine.Engine.submit = old_submit
sys.exit(cli.main(sys.argv[2:]))
"""


@contextlib.contextmanager
def trimmed_server(env: str, features: tuple[str, ...]) -> Iterator[str]:
    """`ecotone serve ENV` in a process of its own that lists only `features` in its
    `welcome`, and without `step_columns` answers it `unknown_op` (a server from before it,
    whose frames do not have the op); its URL."""
    script = ("-c", _TRIMMED_SERVER, ",".join(features))
    with ecotone_serving(env, "--port", "0", python=script) as proc:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"at (ws://127\.0\.0\.1:\d+)", line)
        assert match, line
        yield match[1]


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("observation_type", [CounterObservation, None], ids=["typed", "dicts"])
@pytest.mark.parametrize("old", [("step_many.reset",), ()], ids=["old-folds", "old-plain"])
def test_a_vector_env_over_a_columns_server_and_one_without_steps_both(
    old: tuple[str, ...], observation_type: Any, mode: str
) -> None:
    with (
        run_server("counter") as new,
        trimmed_server("counter", old) as old_url,
        Connection(old_url) as probe,
    ):
        welcome = probe.request(Hello(id=probe.core.next_id()))
        assert isinstance(welcome, Welcome) and welcome.features == list(old)
        columns = StepColumns(id=probe.core.next_id(), sessions=[], actions=msgspec.Raw(b"[]"))
        refused = probe.request(columns)
        assert isinstance(refused, Error) and refused.code == "unknown_op", refused
        n = 6
        with ecotone.VectorEnv(
            [new.url, old_url],
            n,
            reset_options={"max_steps": 2},
            observation_type=observation_type,
            autoreset_mode=mode,
        ) as venv:
            venv.reset()
            links = venv._core.links
            assert [(link.url, link.columns) for link in links] == [
                (new.url, True),
                (old_url, False),
            ]
            assert [link.folds_resets for link in links] == [True, "step_many.reset" in old]
            deltas = [{"delta": d} for d in range(1, n + 1)]

            def count(o: Any) -> int:
                return int(o.count if observation_type is not None else o["count"])

            # Episodes of 2 steps: next_step resets at the third step, same_step within the second.
            rounds = (
                [(1, 1, 0), (2, 1, 1), (0, 0, 0), (1, 1, 0)]
                if mode == "next_step"
                else [(1, 1, 0), (0, 1, 1), (1, 1, 0), (0, 1, 1)]
            )
            for counts, rewarded, ends in rounds:
                obs, rewards, terminated, truncated, infos = venv.step(deltas)
                assert [count(o) for o in obs] == [counts * d for d in range(1, n + 1)]
                assert rewards.tolist() == [float(rewarded * d) for d in range(1, n + 1)]
                assert truncated.tolist() == [bool(ends)] * n and not terminated.any()
                if mode == "same_step" and ends:
                    finals = [count(o) for o in infos["final_obs"]]
                    assert finals == [2 * d for d in range(1, n + 1)]
            # An action each server refuses: each failure at its own sub-env, the rest step.
            bad: list[dict[str, Any]] = [{"delta": 1}] * n
            bad[2] = bad[3] = {"delta": "x"}  # sub-env 2 is on the new server, 3 on the old
            venv.send(bad, batched=True)
            with pytest.raises(ecotone.SubEnvError) as raised:
                venv.recv()
            assert sorted(raised.value.errors) == [2, 3]
            assert all(
                isinstance(e, ecotone.ServerError) and e.code == "invalid_action"
                for e in raised.value.errors.values()
            )
