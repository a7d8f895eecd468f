"""Snapshots, restores and forks of live episodes, on every transport, and every way they can
be refused: each error answered clearly, the session left as it was, the server going on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ecotone
from ecotone.kernel import Engine, EnvSpec, Limits
from ecotone.kernel.config import AuthConfig, SnapshotConfig
from ecotone.kernel.rubrics import Trajectory
from ecotone.kernel.sealing import Seal
from ecotone.plugins.counter import CounterEnv
from tests.conftest import run_server
from tests.engine_driver import Driver, decoded
from tests.envs import TEST_ENVS, AsyncCounterEnv


def _counts(env: Any, deltas: list[int]) -> list[int]:
    return [env.step({"delta": d}).observation["count"] for d in deltas]


def _round_trip(env: Any) -> None:
    """snapshot, restore, fork, export and drop on one session, as a client sees them."""
    env.reset(seed=0)
    _counts(env, [1, 2, 3])
    snap = env.snapshot()
    assert snap.step_count == 3 and snap.size > 0 and snap.id.startswith("snap-")
    first = _counts(env, [5, 5])
    resumed = env.restore(snap)
    assert resumed.step_count == 3 and resumed.result.observation["count"] == 6
    assert resumed.episode_id == snap.episode_id
    assert _counts(env, [5, 5]) == first == [11, 16]
    forks = env.fork(2)
    assert len(forks) == 2
    ids = {f.state()["episode_id"] for f in forks} | {env.state()["episode_id"]}
    assert len(ids) == 3  # each copy its own episode
    assert [_counts(f, [100]) for f in forks] == [[116], [116]]
    assert env.state()["count"] == 16  # the original went on untouched
    blob = env.export_snapshot(snap)
    assert b"count" not in blob  # sealed: not even the field names show
    assert env.restore(blob).step_count == 3
    assert env.state()["count"] == 6
    env.drop_snapshot(snap)
    with pytest.raises(ecotone.ServerError) as gone:
        env.restore(snap)
    assert gone.value.code == "unknown_snapshot"
    for f in forks:
        f.close()


@pytest.mark.parametrize("transport", ["websocket", "http", "tcp", "unix"])
def test_every_operation_on_every_transport(transport: str, tmp_path: Path) -> None:
    host = str(tmp_path / "s.sock") if transport == "unix" else "127.0.0.1"
    with run_server("counter", transport=transport, host=host) as server:
        with ecotone.connect(server.url) as env:
            _round_trip(env)
        with ecotone.connect(server.url, codec="msgpack") as env:
            _round_trip(env)


def test_every_operation_in_process() -> None:
    with ecotone.connect("inproc://counter") as env:
        _round_trip(env)


async def test_the_async_client_forks_and_restores_an_async_env() -> None:
    from ecotone.transports.inproc.client import InprocAsyncChannel

    channel = InprocAsyncChannel(Engine(EnvSpec.from_class(AsyncCounterEnv)), "json")
    connection = ecotone.AsyncConnection("inproc://async_counter", channel=channel)
    async with connection, await connection.open() as env:
        await env.reset()
        await env.step({"delta": 4})
        snap = await env.snapshot()
        forks = await env.fork(3)
        results = [(await f.step({"delta": i})).observation["count"] for i, f in enumerate(forks)]
        assert results == [4, 5, 6]
        await env.step({"delta": 1})
        assert (await env.restore(snap)).result.observation["count"] == 4
        for f in forks:
            await f.aclose()


@pytest.mark.parametrize("env_name", ["dataclass_grid", "attrs_compass"])
def test_dataclass_and_attrs_states_are_saved_and_forks_get_new_ids(env_name: str) -> None:
    action = {"dx": 1, "dy": 2} if env_name == "dataclass_grid" else {"degrees": 30}
    with _inproc(EnvSpec.from_class(TEST_ENVS[env_name])) as env:
        env.reset(episode_id="origin")
        env.step(action)
        (copy,) = env.fork()
        assert copy.state()["episode_id"] not in (None, "origin")
        assert copy.state()["step_count"] == 1
        assert copy.step(action).observation == env.step(action).observation


def test_a_rubric_that_scores_the_whole_episode_keeps_its_turns_across_a_restore() -> None:
    spec = EnvSpec.from_class(CounterEnv).with_rubric(Trajectory(lambda turns: float(len(turns))))
    with _inproc(spec) as env:
        env.reset(target=4)
        env.step({"delta": 1})
        env.step({"delta": 1})
        snap = env.snapshot()
        env.reset(target=4)  # another episode: its turns start again
        env.restore(snap)
        env.step({"delta": 1})
        last = env.step({"delta": 1})
        assert last.done and last.reward == 4.0  # the two turns before the snapshot counted


def _inproc(spec: EnvSpec) -> Any:
    """A session on an in-process engine serving `spec` (a rubric of the test's own)."""
    from ecotone.transports.inproc.client import InprocSyncChannel

    channel = InprocSyncChannel(Engine(spec), "json")
    connection = ecotone.Connection("inproc://counter", channel=channel)
    client = connection.open()
    client._owns = True
    return client


# --- refusals: each clear, the session as it was, the server going on -----------------------


def _code(call: Any) -> tuple[str, dict[str, Any]]:
    with pytest.raises(ecotone.ServerError) as refused:
        call()
    return refused.value.code, refused.value.details


def test_refusals_name_what_is_wrong_and_change_nothing() -> None:
    limits = Limits(max_snapshots=2, max_sessions=4, max_sessions_per_connection=4)
    with run_server("counter", limits=limits) as server:
        with ecotone.connect(server.url) as env, ecotone.connect(server.url) as other:
            assert _code(env.snapshot)[0] == "reset_required"  # no episode yet
            assert _code(lambda: env.fork(1))[0] == "reset_required"
            env.reset()
            env.step({"delta": 7})
            assert _code(lambda: env.restore("snap-nosuch"))[0] == "unknown_snapshot"
            mine = env.snapshot()
            other.reset()
            assert _code(lambda: other.restore(mine))[0] == "unknown_snapshot"  # not its own
            assert _code(lambda: other.export_snapshot(mine))[0] == "unknown_snapshot"
            env.snapshot()
            code, details = _code(env.snapshot)
            assert code == "capacity" and details["scope"] == "owner" and details["limit"] == 2
            env.drop_snapshot(mine)
            kept = env.snapshot()  # room again
            code, details = _code(lambda: env.fork(3))  # 2 held + 3 > 4
            assert code == "capacity" and details["asked"] == 3
            assert _code(lambda: env.fork(0))[0] == "invalid_argument"
            blob = bytearray(env.export_snapshot(kept))
            blob[-1] ^= 1
            code, details = _code(lambda: env.restore(bytes(blob)))
            assert code == "snapshot_mismatch" and details["differs"] == "seal"
            assert _code(lambda: env.restore(b"not a snapshot"))[0] == "snapshot_mismatch"
            assert env.state()["count"] == 7 and env.step({"delta": 1}).observation["count"] == 8
            (copy,) = env.fork(1)  # and the server goes on
            assert copy.step({"delta": 2}).observation["count"] == 10


def test_a_snapshot_too_large_or_a_full_store_is_capacity_with_its_scope() -> None:
    with run_server("counter", limits=Limits(max_snapshot_bytes=16)) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            code, details = _code(env.snapshot)
            assert code == "capacity" and details["scope"] == "size"
    with run_server("counter", limits=Limits(max_snapshot_store_bytes=300)) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.snapshot()
            env.snapshot()
            code, details = _code(env.snapshot)
            assert code == "capacity" and details["scope"] == "store"


def test_an_env_that_cannot_be_saved_says_why_and_a_guest_may_not_save() -> None:
    with run_server("slow") as server, ecotone.connect(server.url) as env:
        env.reset()
        code, _ = _code(env.snapshot)
        assert code == "unsupported"
        with pytest.raises(ecotone.ServerError, match="neither snapshot"):
            env.fork()
        env.step({"sleep": 0})  # it goes on


async def test_a_guest_of_a_shared_session_may_not_snapshot_restore_or_fork_it() -> None:
    engine = Engine(EnvSpec.from_class(CounterEnv))
    driver = Driver(engine)
    owner, guest = driver.peer(), driver.peer()
    session = (await driver.ask(owner, {"op": "open", "id": 1})).session
    await driver.ask(owner, {"op": "reset", "id": 2, "session": session})
    key = (await driver.ask(owner, {"op": "share", "id": 3, "session": session})).key
    engine.attach(guest.owner, key)
    for op in ("snapshot", "fork"):
        answer = decoded(guest, await driver.ask(guest, {"op": op, "id": 4, "session": session}))
        assert answer["code"] == "forbidden", answer
    restore = {"op": "restore", "id": 5, "session": session, "snapshot": "snap-x"}
    assert decoded(guest, await driver.ask(guest, restore))["code"] == "forbidden"


async def test_a_connections_snapshots_go_with_it() -> None:
    engine = Engine(EnvSpec.from_class(CounterEnv))
    driver = Driver(engine)
    peer = driver.peer()
    session = (await driver.ask(peer, {"op": "open", "id": 1})).session
    await driver.ask(peer, {"op": "reset", "id": 2, "session": session})
    for rid in (3, 4):
        await driver.ask(peer, {"op": "snapshot", "id": rid, "session": session})
    assert len(engine.snapshots) == 2 and engine.snapshots.total > 0
    await driver.disconnect(peer.owner)
    assert len(engine.snapshots) == 0 and engine.snapshots.total == 0


def test_a_tokens_snapshots_are_the_tokens_on_every_connection() -> None:
    tokens = AuthConfig(token="alpha-token-0123456789", required=True)
    with run_server("counter", auth=tokens) as server:
        url = server.url
        with ecotone.connect(url, token="alpha-token-0123456789") as first:
            first.reset()
            first.step({"delta": 3})
            snap = first.snapshot()
        with ecotone.connect(url, token="alpha-token-0123456789") as second:
            second.restore(snap)  # the same token, another connection: its snapshot
            assert second.state()["count"] == 3


def test_a_restore_the_env_fails_needs_a_reset_and_the_session_goes_on() -> None:
    with run_server("restore_fails") as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.step({"degrees": 90})
            snap = env.snapshot()
            with pytest.raises(ecotone.EnvError, match="corrupt"):
                env.restore(snap)
            assert _code(lambda: env.step({"degrees": 1}))[0] == "reset_required"
            env.reset()
            assert env.step({"degrees": 1}).observation["heading"] == 1


# --- across servers ---------------------------------------------------------------------------


def test_an_export_restores_on_another_server_with_the_same_key_only(tmp_path: Path) -> None:
    key = Seal.write_key(tmp_path / "key")
    other_key = Seal.write_key(tmp_path / "other")
    shared = SnapshotConfig(key_file=str(key))
    with run_server("counter", snapshots=shared) as one, ecotone.connect(one.url) as env:
        env.reset()
        _counts(env, [2, 2])
        blob = env.export_snapshot(env.snapshot())
        ahead = _counts(env, [1, 1])
    with run_server("counter", snapshots=shared) as two, ecotone.connect(two.url) as env:
        assert env.restore(blob).step_count == 2
        assert _counts(env, [1, 1]) == ahead
    with run_server("echo", snapshots=shared) as echo, ecotone.connect(echo.url) as env:
        code, details = _code(lambda: env.restore(blob))
        assert code == "snapshot_mismatch" and details["differs"] == "env"
    foreign = SnapshotConfig(key_file=str(other_key))
    with run_server("counter", snapshots=foreign) as three, ecotone.connect(three.url) as env:
        code, details = _code(lambda: env.restore(blob))
        assert code == "snapshot_mismatch" and details["differs"] == "seal"


def test_a_key_file_others_may_read_is_refused(tmp_path: Path) -> None:
    key = Seal.write_key(tmp_path / "key")
    os.chmod(key, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        Seal.from_file(key)


def test_the_http_routes_snapshot_restore_fork_export_and_drop() -> None:
    with run_server("counter", transport="http") as server:
        base = server.url.rstrip("/") + "/v1"
        sid = _http("POST", f"{base}/sessions")[1]["session"]
        _http("POST", f"{base}/sessions/{sid}/reset", {})
        _http("POST", f"{base}/sessions/{sid}/step", {"action": {"delta": 5}})
        status, snap = _http("POST", f"{base}/sessions/{sid}/snapshot")
        assert status == 200 and snap["op"] == "snapshotted", snap
        _http("POST", f"{base}/sessions/{sid}/step", {"action": {"delta": 5}})
        status, back = _http(
            "POST", f"{base}/sessions/{sid}/restore", {"snapshot": snap["snapshot"]}
        )
        assert status == 200 and back["observation"]["count"] == 5
        status, forked = _http("POST", f"{base}/sessions/{sid}/fork", {"n": 2})
        assert status == 200 and len(forked["sessions"]) == 2
        status, exported = _http("GET", f"{base}/snapshots/{snap['snapshot']}")
        assert status == 200 and exported["op"] == "snapshot_export"
        status, back = _http("POST", f"{base}/sessions/{sid}/restore", {"blob": exported["blob"]})
        assert status == 200 and back["step_count"] == 1
        assert _http("DELETE", f"{base}/snapshots/{snap['snapshot']}")[0] == 200
        status, gone = _http("GET", f"{base}/snapshots/{snap['snapshot']}")
        assert status == 404 and gone["code"] == "unknown_snapshot"
        status, bad = _http("POST", f"{base}/sessions/{sid}/restore", {"blob": "AAAA"})
        assert status == 409 and bad["code"] == "snapshot_mismatch"
        status, bad = _http("POST", f"{base}/sessions/{sid}/fork", {"n": "two"})
        assert status == 400 and bad["code"] == "invalid_frame"


def _http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())


def test_a_vector_env_forks_one_sub_env_into_others_on_one_server_and_across(
    tmp_path: Path,
) -> None:
    shared = SnapshotConfig(key_file=str(Seal.write_key(tmp_path / "key")))
    with (
        run_server("counter", snapshots=shared) as one,
        run_server("counter", snapshots=shared) as two,
    ):
        with ecotone.VectorEnv([one.url, two.url], 4) as venv:
            venv.reset(seed=0)
            venv.step([{"delta": d} for d in (1, 2, 3, 4)])
            homes = venv.env_urls
            source = 2
            copies = [i for i in range(4) if i != source]
            assert {homes[i] for i in copies} == {one.url, two.url}  # one server, and the other
            observations = venv.fork(source, copies)
            assert [o["count"] for o in observations] == [3, 3, 3]
            counts = [o["count"] for o in venv.step([{"delta": 10}] * 4)[0]]
            assert counts == [13, 13, 13, 13]
            with pytest.raises(ValueError, match="into itself"):
                venv.fork(0, [0, 1])


def test_a_gymnasium_env_gets_and_sets_its_state_cartpole_with_its_time_limit() -> None:
    import ecotone.gym

    with run_server("gymnasium:CartPole-v1?max_episode_steps=12") as server:
        env = ecotone.gym.make(server.url)
        try:
            env.reset(seed=5)
            for _ in range(4):
                env.step(0)
            state_obs = env.step(0)[0].tolist()
            state = env.get_state()
            assert isinstance(state, ecotone.gym.RemoteEnvState) and state.blob
            first = [env.step(1) for _ in range(7)]
            assert first[-1][3] is True  # TimeLimit: truncated at step 12
            obs, _ = env.set_state(state)
            assert obs.tolist() == state_obs
            again = [env.step(1) for _ in range(7)]
            assert [(o.tolist(), r, te, tr) for o, r, te, tr, _ in again] == [
                (o.tolist(), r, te, tr) for o, r, te, tr, _ in first
            ]
        finally:
            env.close()


def test_every_operation_over_stdio() -> None:
    with ecotone.connect("stdio:counter") as env:
        _round_trip(env)


def test_a_snapshot_taken_on_one_launched_server_is_restored_on_another(tmp_path: Path) -> None:
    """Two servers started by the process provider, as an orchestrator would, sharing the
    snapshot key through their environment."""
    key = str(Seal.write_key(tmp_path / "key"))
    environment = {"ECOTONE_SNAPSHOTS_KEY_FILE": key}
    with ecotone.launch("chess", provider="process", environment=environment) as first:
        first.reset(seed=7)
        first.step({"move": "e2e4"})
        blob = first.export_snapshot(first.snapshot())
        ahead = [first.step({"move": m}).observation["fen"] for m in ("d2d4", "g1f3")]
    with ecotone.launch("chess", provider="process", environment=environment) as second:
        assert second.restore(blob).step_count == 1
        assert [second.step({"move": m}).observation["fen"] for m in ("d2d4", "g1f3")] == ahead


@pytest.mark.parametrize(
    "env",
    [
        "gymnasium:CartPole-v1",
        "gymnasium:FrozenLake-v1",
        "gymnasium:Taxi-v4",
        "gymnasium:MountainCar-v0",
        "gymnasium-vector:CartPole-v1",
    ],
)
def test_the_gymnasium_bridge_saves_its_envs_wrappers_and_rngs(env: str) -> None:
    """The conformance check, to each episode's end (TimeLimit's truncation included)."""
    from ecotone.conformance import run

    report = run(env, checks=["snapshots"], max_episode_steps=250)
    (snapshots,) = [r for r in report.results if r.name == "snapshots"]
    assert snapshots.status == "PASS", report.text()
