"""The conformance suite (`ecotone.conformance`): its schema validator and action generator, the
checks passing on envs that keep the contract and failing, on the right check, for envs that
break it (tests/broken_envs.py), and the three ways to run it: in process, against a server URL
(ecotone's transports and OpenEnv), from the `ecotone validate` CLI and as a pytest base class.
"""

from __future__ import annotations

import ast
import enum
import inspect
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest

import ecotone
from ecotone.client.sync import Connection
from ecotone.conformance import (
    CHECKS,
    PROTOCOL_CHECKS,
    ConformanceSuite,
    Report,
    Runner,
    Status,
    Target,
    TargetError,
    generate,
    invalid_action,
    run,
    validate,
)
from ecotone.conformance.generate import UNKNOWN_FIELD
from ecotone.conformance.schema import SchemaDefinitionError
from ecotone.conformance.target import InProcess
from ecotone.kernel import Call, Engine, Peer, Registry
from ecotone.kernel.envspec import EnvSpec
from ecotone.kernel.limits import Limits
from ecotone.specs import Request, StepColumns
from ecotone.transports.inproc.client import InprocSyncChannel
from tests import broken_envs
from tests.conftest import make_registry, run_server

REPO = Path(__file__).resolve().parent.parent
ALL_CHECKS = [name for name, chk in CHECKS.items() if chk.seated is not True]
"""The checks of a single-agent env (the seat checks are tests/test_conformance_seats.py's)."""
PROTOCOL = list(PROTOCOL_CHECKS)
URL_EXPECTED = {
    **dict.fromkeys(ALL_CHECKS, Status.PASS),
    **dict.fromkeys(PROTOCOL, Status.PASS),
    "no_overlapping_calls": Status.SKIP,  # needs the probe env: tests/test_protocol_rules.py
}
"""What a sound env behind a server gets: every env check and protocol check passed."""


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The installed plugins plus the test envs and the broken envs."""
    return make_registry(broken_envs)


def statuses(report: Report) -> dict[str, Status]:
    return {r.name: r.status for r in report.results}


def failed(report: Report) -> set[str]:
    return {r.name for r in report.results if r.status is Status.FAIL}


def result(report: Report, name: str) -> Any:
    return next(r for r in report.results if r.name == name)


# --- the schema validator --------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(msgspec.Struct):
    x: int
    y: int


class Cat(msgspec.Struct, tag="cat"):
    lives: Annotated[int, msgspec.Meta(ge=1, le=9)]


class Dog(msgspec.Struct, tag="dog"):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=5)]


class Rich(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Most of what msgspec puts in a schema: bounds, enums, literals, refs, tuples, maps,
    tagged unions, optional and defaulted fields."""

    count: Annotated[int, msgspec.Meta(ge=-3, le=3)]
    ratio: Annotated[float, msgspec.Meta(gt=0, lt=1)]
    word: Annotated[str, msgspec.Meta(pattern="^[a-c]+$", max_length=6)]
    flag: bool
    colour: Colour
    mode: Literal["fast", "slow"]
    where: Point
    path: list[Point]
    pair: tuple[int, str]
    tags: frozenset[int]
    scores: dict[str, float]
    pet: Cat | Dog
    maybe: int | None = None
    note: str = ""


class RichEnv(ecotone.Environment[Rich, ecotone.Observation, ecotone.State]):
    """Only here for its schemas (never served)."""

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Any:
        raise NotImplementedError

    def step(self, action: Rich) -> Any:
        raise NotImplementedError

    def state(self) -> Any:
        raise NotImplementedError


def rich_schema() -> dict[str, Any]:
    """The action schema `describe()` gives for an env whose Action is `Rich`."""
    return EnvSpec.from_class(RichEnv).info().action_schema


GOOD_RICH = {
    "count": 2,
    "ratio": 0.5,
    "word": "abc",
    "flag": True,
    "colour": "red",
    "mode": "slow",
    "where": {"x": 1, "y": 2},
    "path": [{"x": 0, "y": 0}],
    "pair": [1, "a"],
    "tags": [1, 2],
    "scores": {"a": 1.5},
    "pet": {"type": "dog", "name": "rex"},
}


def test_validator_accepts_a_value_that_msgspec_accepts_for_the_same_type() -> None:
    msgspec.convert(GOOD_RICH, Rich)  # the oracle agrees it is valid
    assert validate(GOOD_RICH, rich_schema()) == []


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"count": "2"}, "$.count", "expected integer, got string"),
        ({"count": 4}, "$.count", "above the maximum 3"),
        ({"ratio": 1.0}, "$.ratio", "not below the exclusive maximum 1"),
        ({"word": "abd"}, "$.word", "does not match the pattern"),
        ({"flag": 1}, "$.flag", "expected boolean, got integer"),
        ({"colour": "green"}, "$.colour", "is not one of"),
        ({"where": {"x": 1}}, "$.where.y", "required property is missing"),
        ({"path": [{"x": 0, "y": "0"}]}, "$.path[0].y", "expected integer"),
        ({"pair": [1, "a", 2]}, "$.pair", "more than 2"),
        ({"scores": {"a": "x"}}, "$.scores.a", "expected number"),
        ({"pet": {"type": "cat", "lives": 10}}, "$.pet", "matches none of the alternatives"),
        ({"maybe": "1"}, "$.maybe", "matches none of the alternatives"),
        ({"extra": 1}, "$.extra", "property is not in the schema"),
    ],
)
def test_validator_names_the_path_of_a_violation(
    change: dict[str, Any], path: str, words: str
) -> None:
    bad = {**GOOD_RICH, **change}
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(bad, Rich)  # msgspec rejects it too
    errors = validate(bad, rich_schema())
    assert errors and errors[0].path == path, errors
    assert words in errors[0].message
    assert all(e.path.startswith(path) for e in errors), errors  # nothing else is blamed


def test_validator_reports_missing_properties_repeated_items_and_a_ref_to_nothing() -> None:
    without = {k: v for k, v in GOOD_RICH.items() if k != "flag"}
    assert [str(e) for e in validate(without, rich_schema())] == [
        "$.flag: required property is missing"
    ]
    # msgspec's decoder merely drops duplicates from a set; its schema forbids them
    assert [str(e) for e in validate({**GOOD_RICH, "tags": [1, 1]}, rich_schema())] == [
        "$.tags[1]: 1 repeats an earlier item"
    ]
    with pytest.raises(SchemaDefinitionError, match="points at nothing"):
        validate({"a": 1}, {"properties": {"a": {"$ref": "#/$defs/Missing"}}})


# --- the action generator --------------------------------------------------------------------


def test_generated_values_are_valid_for_msgspec_and_the_validator_for_many_seeds() -> None:
    schema = rich_schema()
    for seed in range(200):
        value = generate(schema, random.Random(seed))
        msgspec.convert(value, Rich)  # raises if the generator made an invalid value
        assert validate(value, schema) == []


def test_generation_is_deterministic_for_a_seed_and_varies_across_seeds() -> None:
    schema = rich_schema()
    assert generate(schema, random.Random(7)) == generate(schema, random.Random(7))
    values = {json.dumps(generate(schema, random.Random(s)), sort_keys=True) for s in range(20)}
    assert len(values) == 20


def test_generated_objects_omit_optional_fields_and_respect_bounds() -> None:
    schema = rich_schema()
    seen_counts = set()
    for seed in range(100):
        value = generate(schema, random.Random(seed))
        assert "maybe" not in value and "note" not in value
        assert -3 <= value["count"] <= 3
        assert 0 < value["ratio"] < 1
        seen_counts.add(value["count"])
    assert seen_counts == set(range(-3, 4))


def test_an_invalid_action_breaks_a_required_field_and_msgspec_names_that_field() -> None:
    schema = rich_schema()
    valid = generate(schema, random.Random(0))
    case = invalid_action(schema, valid)
    assert case.field == "count" and case.action["count"] == "not-a-valid-value"
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.count`"):
        msgspec.convert(case.action, Rich)


class Throttle(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
    speed: int = 1


def test_an_action_without_required_fields_is_made_invalid_by_an_unknown_field() -> None:
    schema = msgspec.json.schema(Throttle)  # a top-level $ref into $defs, resolved
    assert "$ref" in schema
    case = invalid_action(schema, {})
    assert case.field == UNKNOWN_FIELD
    with pytest.raises(msgspec.ValidationError, match=UNKNOWN_FIELD):
        msgspec.convert(case.action, Throttle)


def test_an_action_schema_that_rejects_nothing_gives_no_invalid_action() -> None:
    with pytest.raises(LookupError, match="no action can be made invalid"):
        invalid_action({"type": "object", "properties": {"anything": {}}}, {})


# --- the suite in process --------------------------------------------------------------------


def test_counter_passes_every_check_when_reset_options_let_its_episodes_end() -> None:
    report = run("counter", reset_options={"max_steps": 5})
    assert statuses(report) == dict.fromkeys(ALL_CHECKS, Status.PASS), report.text()
    assert report.ok
    assert result(report, "step_after_done").note == "episode truncated at step 5"
    assert (
        report.lines()[-1]
        == f"{len(ALL_CHECKS)} checks: {len(ALL_CHECKS)} passed, 0 failed, 0 skipped"
    )


def test_counter_without_ending_options_skips_step_after_done_and_says_why() -> None:
    report = run("counter", max_episode_steps=50)
    step_after_done = result(report, "step_after_done")
    assert step_after_done.status is Status.SKIP
    assert "did not end within 50 steps" in step_after_done.reason
    assert "reset options" in step_after_done.reason
    assert report.ok  # a skip is not a failure
    assert failed(report) == set()


def test_echo_passes_every_check_with_actions_from_its_sample_action() -> None:
    report = run("echo")
    assert report.actions == "from the env's sample_action(rng)"
    assert statuses(report) == dict.fromkeys(ALL_CHECKS, Status.PASS), report.text()


def test_an_env_with_schema_drawn_actions_passes_every_check(registry: Registry) -> None:
    report = run("dice", registry=registry)
    assert report.actions == "generated from the Action schema"
    assert statuses(report) == dict.fromkeys(ALL_CHECKS, Status.PASS), report.text()


@pytest.mark.parametrize("name", sorted(broken_envs.BROKEN))
def test_the_suite_fails_a_broken_env_on_the_check_for_the_rule_it_breaks(name: str) -> None:
    env_cls, expected = broken_envs.BROKEN[name]
    report = run(env_cls)  # an env class, no registry needed
    assert failed(report) == expected, report.text()
    assert not report.ok
    for check in expected:
        line = next(line for line in report.lines() if line.startswith(f"FAIL  {check} "))
        assert " / seen " in line and ": expected " in line


@pytest.mark.parametrize(
    ("env_cls", "what", "seen"),
    [
        (
            broken_envs.CloseRaisesTwiceEnv,
            "env.close() called a second time on the same instance",
            "RuntimeError: already closed",
        ),
        (
            broken_envs.CloseRaisesEnv,
            "env.close() called by the kernel",
            "environment 'dice' raised in close(): OSError: cannot release the dice",
        ),
    ],
)
def test_close_idempotent_sees_a_close_that_raises_on_either_call(
    env_cls: type, what: str, seen: str
) -> None:
    close = result(run(env_cls, checks=["close_idempotent"]), "close_idempotent")
    assert (close.status, close.what, close.seen) == (Status.FAIL, what, seen)


def test_a_check_whose_prerequisite_failed_is_skipped_not_passed() -> None:
    report = run(broken_envs.UnseededEnv)
    concurrent = result(report, "concurrent_sessions")
    assert concurrent.status is Status.SKIP
    assert concurrent.reason == "needs seeded_determinism, which failed"


def test_an_env_refusing_every_schema_drawn_action_is_skipped_not_failed() -> None:
    report = run(broken_envs.PickyEnv)
    assert failed(report) == set(), report.text()
    skipped = result(report, "seeded_determinism")
    assert skipped.status is Status.SKIP
    assert "cannot choose an action the env accepts" in skipped.reason
    assert "the dice are asleep" in skipped.reason
    assert "give the env a sample_action(rng)" in skipped.reason


def test_checks_can_be_run_one_by_one_and_unknown_names_are_refused() -> None:
    report = run("counter", checks=["step_count", "episode_id"])
    assert [r.name for r in report.results] == ["step_count", "episode_id"]
    with pytest.raises(ValueError, match="no check named 'nope'"):
        run("counter", checks=["nope"])


def test_an_unknown_env_or_unreachable_url_is_a_target_error() -> None:
    with pytest.raises(TargetError, match="no environment named 'nosuchenv'"):
        run("nosuchenv")
    with pytest.raises(TargetError, match="Connection refused"):
        run(url=f"ws://127.0.0.1:{closed_port()}")


# --- against a server URL --------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["websocket", "http", "tcp"])
def test_counter_behind_a_server_passes_every_check(transport: str) -> None:
    with run_server("counter", transport=transport) as server:
        report = run(url=server.url, reset_options={"max_steps": 5})
    assert statuses(report) == URL_EXPECTED, report.text()
    assert report.target == f"env 'counter' at {server.url}"
    assert result(report, "close_idempotent").note == "wire level only: the env instance is remote"


def test_a_broken_env_behind_a_server_fails_the_same_check() -> None:
    with run_server("shared_state", plugins=[broken_envs]) as server:
        report = run(url=server.url)
    assert failed(report) == {"concurrent_sessions"}, report.text()


def test_an_openenv_url_skips_the_rules_openenv_lacks_with_the_reason() -> None:
    """ecotone's http transport speaks OpenEnv's protocol; `openenv+http://` drives it with
    ecotone's OpenEnv adapter, as it would any OpenEnv server."""
    with run_server("echo", transport="http") as server:
        url = "openenv+" + server.url
        report = run(url=url)
    skipped = {r.name: r.reason for r in report.results if r.status is Status.SKIP}
    assert set(skipped) == {
        "reset_before_step",
        "observation_flags",
        "step_after_done",
        "close_idempotent",
        "close_releases_session",
        "tasks",
        "hidden_task_fields",
        "step_columns",
        "step_columns_malformed",
        "snapshots",
        *PROTOCOL,
    }, report.text()
    assert "no reset_required error" in skipped["reset_before_step"]
    assert "no `truncated`" in skipped["observation_flags"]
    assert failed(report) == set(), report.text()


# --- the checks as written: one rule per function, its docstring saying what it raises -----------


def _body_lines(fn: Any) -> int:
    """The lines of a function's body, its docstring aside."""
    (node,) = ast.parse(textwrap.dedent(inspect.getsource(fn))).body
    assert isinstance(node, ast.FunctionDef)
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return body[-1].end_lineno - body[0].lineno + 1  # type: ignore[operator]


@pytest.mark.parametrize("name", [*ALL_CHECKS, *PROTOCOL])
def test_every_check_says_what_it_checks_and_what_it_raises(name: str) -> None:
    chk = {**CHECKS, **PROTOCOL_CHECKS}[name]
    doc = chk.fn.__doc__ or ""
    title, _, rest = textwrap.dedent(doc).strip().partition("\n\n")
    assert " ".join(title.split()) == chk.title  # the title is the docstring's first paragraph
    raises = rest.split("Raises:\n", 1)
    assert len(raises) == 2 and "CheckFailed:" in raises[1], doc
    if name in CHECKS:  # the protocol's two long ones wait for helpers of their own
        assert _body_lines(chk.fn) <= 40, f"{name}: {_body_lines(chk.fn)} lines"


# --- the step_columns check: against real servers, and against servers that break it ---------


class _StepColumnsBreaker(Engine):
    """An engine that gets `step_columns` wrong one way (`how`), and everything else right:
    `swapped` answers a step_columns of two steps with its positions swapped; `lenient` steps
    what it can of a step_columns with fewer actions than sessions instead of refusing it;
    `partial` refuses such a frame as it should, but only after stepping its first session
    (its env stepped directly, out of the engine's sight)."""

    def __init__(self, spec: EnvSpec, how: str) -> None:
        super().__init__(spec)
        self.how = how
        self.spec = spec

    def submit(self, peer: Peer, request: Request) -> Sequence[Call]:
        if type(request) is StepColumns:
            try:
                actions = peer.codec.decode_as(request.actions, list[msgspec.Raw])
            except msgspec.ValidationError:  # not an array: the engine refuses it
                return super().submit(peer, request)
            if self.how == "swapped" and len(actions) == 2 and not request.resets:
                request = msgspec.structs.replace(
                    request,
                    sessions=request.sessions[::-1],
                    actions=peer.codec.raw(actions[::-1]),
                )
            if self.how == "lenient" and len(actions) < len(request.sessions):
                request = msgspec.structs.replace(
                    request, sessions=request.sessions[: len(actions)]
                )
            if self.how == "partial" and 0 < len(actions) < len(request.sessions):
                session = self.sessions.get(request.sessions[0], peer.owner)
                assert session is not None and session.env is not None
                session.env.step(peer.codec.decode_as(actions[0], self.spec.action_type))
        return super().submit(peer, request)


def _breaker_target(how: str) -> Target:
    spec = EnvSpec.from_class(broken_envs.DiceEnv)
    engine = _StepColumnsBreaker(spec, how)
    channel = InprocSyncChannel(engine, "json")
    connection = Connection("inproc://dice", timeout=10, channel=channel)
    in_process = InProcess(engine, channel.peer.owner)
    return Target(connection, spec.info(), label="a step_columns breaker", in_process=in_process)


def test_the_step_columns_check_compares_errors_by_code_session_and_details() -> None:
    """Not by message: a server may word one error differently in the two frames."""
    from ecotone.conformance.checks.columns import item_outcome
    from ecotone.specs import Error, ErrorCode

    def outcome(sid: str, message: str, **details: Any) -> Any:
        error = Error(id=1, code=ErrorCode.ENV_ERROR, message=message, session=sid,
                      details=details)  # fmt: skip
        return item_outcome(None, error, {sid: "<session A>"})  # type: ignore[arg-type]

    assert outcome("s1", "step 0 of s1 raised", type="KeyError") == outcome(
        "s2", "position 0 (session s2) raised", type="KeyError"
    )
    assert outcome("s1", "m", session="s1") == outcome("s2", "m", session="s2")
    assert outcome("s1", "m", type="KeyError") != outcome("s2", "m", type="ValueError")


COLUMNS_CHECKS = ["step_columns", "step_columns_malformed"]


def test_the_step_columns_checks_pass_in_process_and_behind_every_server() -> None:
    for env in ("dice", "wordle"):  # wordle's resets name tasks
        report = run(env, registry=make_registry(broken_envs), checks=COLUMNS_CHECKS)
        assert statuses(report) == dict.fromkeys(COLUMNS_CHECKS, Status.PASS), report.text()
    for transport in ("websocket", "http", "tcp"):
        with run_server("counter", transport=transport) as server:
            report = run(url=server.url, checks=COLUMNS_CHECKS, reset_options={"max_steps": 3})
        assert statuses(report) == dict.fromkeys(COLUMNS_CHECKS, Status.PASS), report.text()
        assert result(report, "step_columns").note == "5 step_columns of 2 sessions"
        malformed = result(report, "step_columns_malformed")
        assert malformed.note == "5 malformed step_columns refused"


def test_the_step_columns_checks_are_skipped_where_the_server_does_not_list_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ecotone.kernel.operations.FEATURES", ("step_many.reset",))
    with run_server("counter") as server:
        report = run(url=server.url, checks=COLUMNS_CHECKS)
    for name in COLUMNS_CHECKS:
        columns = result(report, name)
        assert columns.status is Status.SKIP
        assert columns.reason == "the server does not list step_columns in its welcome's features"


def test_the_step_columns_check_is_skipped_where_the_server_holds_fewer_than_four() -> None:
    """It holds four sessions at once; a server that allows fewer is not wrong for it."""
    with run_server("counter", limits=Limits(max_sessions=3)) as server:
        report = run(url=server.url, checks=["step_columns"])
    columns = result(report, "step_columns")
    assert columns.status is Status.SKIP, report.text()
    assert columns.reason.startswith("the check holds four sessions at once"), columns.reason
    assert "capacity" in columns.reason


@pytest.mark.parametrize(
    ("how", "name", "what", "expected"),
    [
        (
            "swapped",
            "step_columns",
            "position 0 of step_columns 1",
            "observation",
        ),
        (
            "lenient",
            "step_columns_malformed",
            "the answer to a step_columns with one action for two sessions",
            "one error frame (invalid_argument) with the request's id and a message",
        ),
        (
            "partial",
            "step_columns_malformed",
            "state() of session A after the malformed step_columns",
            "unchanged",
        ),
    ],
)
def test_the_step_columns_checks_fail_a_server_that_gets_step_columns_wrong(
    how: str, name: str, what: str, expected: str
) -> None:
    runner = Runner(_breaker_target(how))
    try:
        columns = runner.run(name)
        others = {other: runner.run(other).status for other in ALL_CHECKS if other != name}
    finally:
        runner.close()
    assert columns.status is Status.FAIL, columns
    assert columns.what.startswith(what), columns
    assert expected in columns.expected, columns
    # the env is sound, and each breaker breaks one of the two rules
    assert others == {other: Status.PASS for other in others}, others


def test_run_takes_the_settings_as_keywords_and_names_one_that_is_not() -> None:
    report = run("counter", checks=["describe"], seeds=[5], steps=1, reset_options=None)
    assert statuses(report) == {"describe": Status.PASS}
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'seed'$"):
        run("counter", seed=5)  # type: ignore[call-arg]


# --- `ecotone validate` ----------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def validate_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    return subprocess.run(
        [sys.executable, "-m", "ecotone", "validate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_validate_counter_prints_a_pass_line_per_check_and_exits_0(tmp_path: Path) -> None:
    done = validate_cli("counter", "--reset-options", '{"max_steps": 5}', cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "ecotone conformance: env 'counter' in an in-process engine; "
        "actions generated from the Action schema"
    )
    assert [line.split()[:2] for line in lines[1:-1]] == [["PASS", c] for c in ALL_CHECKS]
    assert lines[-1] == f"{len(ALL_CHECKS)} checks: {len(ALL_CHECKS)} passed, 0 failed, 0 skipped"


def test_cli_validate_url_of_a_broken_env_exits_1_naming_the_check(tmp_path: Path) -> None:
    with run_server("episode_id_ignored", plugins=[broken_envs]) as server:
        done = validate_cli("--url", server.url, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    fail_lines = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1, done.stdout
    assert fail_lines[0].split()[1] == "episode_id"
    assert "expected 'ecotone-conformance-episode' / seen " in fail_lines[0]
    # skipped: no_overlapping_calls (no probe env), snapshots (episode_id failed)
    assert done.stdout.splitlines()[-1].endswith("1 failed, 2 skipped")


def test_cli_validate_json_gives_every_result_as_data(tmp_path: Path) -> None:
    with run_server("bad_state", plugins=[broken_envs]) as server:
        done = validate_cli("--url", server.url, "--json", "--seeds", "3,4", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    checks = len(ALL_CHECKS) + len(PROTOCOL)
    summary = {"checks": checks, "passed": checks - 3, "failed": 1, "skipped": 2}
    assert report["summary"] == summary
    (bad,) = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert bad["name"] == "state_schema"
    assert bad["what"] == "state after step 1 (seed 3)"
    assert bad["seen"].startswith("$.total: expected integer, got number")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchenv"], "no environment named 'nosuchenv'"),
        (["--url", "ws://127.0.0.1:{port}"], "cannot connect to ws://127.0.0.1:{port}"),
        (["counter", "--reset-options", "[1]"], "--reset-options must be a JSON object"),
        ([], "name an env, or give --url"),
    ],
)
def test_cli_validate_usage_errors_exit_2_with_a_message(
    tmp_path: Path, args: list[str], message: str
) -> None:
    port = str(closed_port())
    done = validate_cli(*[a.replace("{port}", port) for a in args], cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message.replace("{port}", port) in done.stderr
    assert done.stdout == ""


# --- the pytest base class -------------------------------------------------------------------

PYTEST_FILE = '''
from ecotone.conformance import ConformanceSuite
from tests.broken_envs import UnseededEnv


class SharedKnobs(ConformanceSuite):
    """Sets no env: not collected, like ConformanceSuite itself."""

    steps = 4


class TestCounter(SharedKnobs):
    env = "counter"
    reset_options = {"max_steps": 3}


class TestUnseeded(SharedKnobs):
    env = UnseededEnv
'''


def test_a_conformance_suite_subclass_is_one_pytest_test_per_check(tmp_path: Path) -> None:
    (tmp_path / "test_my_env.py").write_text(textwrap.dedent(PYTEST_FILE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_my_env.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    passed = {line.split()[1] for line in out.splitlines() if line.startswith("PASSED ")}
    assert passed >= {f"test_my_env.py::TestCounter::test_{c}" for c in ALL_CHECKS}, out
    assert "FAILED test_my_env.py::TestUnseeded::test_seeded_determinism" in out
    section = out.split("_ TestUnseeded.test_seeded_determinism _", 1)[1].lstrip("_\n")
    assert section.startswith(
        "seeded_determinism: seed 0, reset again on the same session: first observation of "
        "reset(seed=0): expected {"
    ), out
    assert "concurrent_sessions: needs seeded_determinism, which failed" in out
    assert "step_columns: needs seeded_determinism, which failed" in out
    n = len(ALL_CHECKS)
    assert "snapshots: needs seeded_determinism, which failed" in out
    seat_checks = len(CHECKS) - n  # one test per check: a single-agent env skips them
    assert f"1 failed, {2 * n - 4} passed, {3 + 2 * seat_checks} skipped" in out
    assert "seat_turns: a multi-agent env's check: this env has no seats" in out
    assert "SharedKnobs" not in out and "ConformanceSuite" not in out


def test_the_base_class_is_not_collected_and_subclasses_with_a_target_are() -> None:
    assert ConformanceSuite.__test__ is False

    class Knobs(ConformanceSuite):
        steps = 3

    class TestThing(Knobs):
        url = "ws://127.0.0.1:1"

    assert Knobs.__test__ is False and TestThing.__test__ is True
    assert [n for n in dir(TestThing) if n.startswith("test_")] == sorted(
        f"test_{c}"
        for c in [*CHECKS, *PROTOCOL]  # a URL: the protocol checks too
    )
    assert [n for n in dir(Knobs) if n.startswith("test_")] == sorted(f"test_{c}" for c in CHECKS)


# --- a real OpenEnv server -------------------------------------------------------------------


@pytest.fixture
def openenv_server(openenv_python: str) -> Iterator[str]:
    """OpenEnv's own server (create_fastapi_app under uvicorn) with an echo env."""
    from tests.test_openenv_interop import FIXTURES, _read_port, _wait_healthy

    proc = subprocess.Popen(
        [openenv_python, str(FIXTURES / "echo_server.py")], stdout=subprocess.PIPE, text=True
    )
    try:
        port = _read_port(proc, timeout=30)
        _wait_healthy(proc, port, timeout=30)
        yield f"openenv+http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_cli_validate_a_real_openenv_server(tmp_path: Path, openenv_server: str) -> None:
    done = validate_cli("--url", openenv_server, "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    assert done.returncode == 0, json.dumps(report, indent=1)
    # no ids, batches, tasks (listed, and their hidden fields), columns (both step_columns
    # checks), snapshots
    assert report["summary"]["skipped"] == 10 + len(PROTOCOL)
    assert {n for n, c in by_name.items() if c["status"] == "PASS"} == {
        "describe",
        "observation_schema",
        "state_schema",
        "step_count",
        "episode_id",
        "seeded_determinism",
        "invalid_action",
        "concurrent_sessions",
    }
    assert by_name["invalid_action"]["note"].startswith("required field `message` set to 7")
