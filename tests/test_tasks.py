"""Tasks: an env's named splits of typed records (`ecotone.TaskSet`), listed and fetched over
the wire and over HTTP (ecotone's routes and OpenEnv's Task API, the real `openenv` client
included), chosen by `reset(task=, split=, index=)` or drawn with the seed; and a task file
named at serve time in place of the env's own."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import textwrap
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

import ecotone
from ecotone.kernel.envspec import EnvDefinitionError, EnvSpec
from ecotone.plugins.coding.env import task_set as coding_tasks
from ecotone.plugins.wordle import WordleTask, task_id, words
from ecotone.plugins.wordle import task_set as wordle_tasks
from tests.conftest import ecotone_serving, run_server

# --- the TaskSet itself -----------------------------------------------------------------------


class Puzzle(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    size: int


def puzzles() -> ecotone.TaskSet[Puzzle]:
    return ecotone.TaskSet(
        {
            "train": [Puzzle(id=f"p{i}", size=i) for i in range(10)],
            "test": [{"id": "t0", "size": 100}, {"id": "t1", "size": 101}],  # converted
        },
        type=Puzzle,
    )


def test_a_task_set_finds_pages_and_draws_reproducibly() -> None:
    tasks = puzzles()
    assert tasks.counts() == {"train": 10, "test": 2} and tasks.default_split == "train"
    assert tasks.splits["test"][1] == Puzzle(id="t1", size=101)
    ref, record = tasks.find("t1")
    assert (ref, record) == (
        ecotone.TaskRef(id="t1", split="test", index=1),
        tasks.splits["test"][1],
    )
    assert tasks.page("train", 8, 5) == ("train", tasks.splits["train"][8:])
    drawn = [tasks.choose({}, seed)[0] for seed in range(20)]
    assert drawn == [tasks.choose({}, seed)[0] for seed in range(20)]
    assert {r.split for r in drawn} == {"train"} and len({r.id for r in drawn}) > 3
    assert tasks.choose({"split": "test"}, 3)[0].split == "test"
    assert tasks.choose({"split": "test", "index": 0}, None)[1] == Puzzle(id="t0", size=100)
    inline_ref, inline = tasks.choose({"task": {"id": "mine", "size": 7}}, None)
    assert inline == Puzzle(id="mine", size=7) and inline_ref == ecotone.TaskRef(id="mine")
    assert tasks.schema()["properties"]["size"] == {"type": "integer"}


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"task": "nope"}, "no task 'nope'; tasks: p0, p1"),
        ({"split": "dev"}, "no task split 'dev'; splits: train, test"),
        ({"split": "test", "index": 2}, "index 2 is out of range: split 'test' has 2 tasks"),
        ({"index": "3"}, "a task index is an integer"),
        ({"task": "p1", "index": 1}, "not both"),
        ({"task": {"id": "x", "size": "big"}}, "the inline task: not a Puzzle"),
    ],
)
def test_a_choice_that_cannot_be_met_says_why(options: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ecotone.TaskError, match=complaint):
        puzzles().choose(options, 0)


class Lock(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    code: str
    hints: list[str] = []


def locks() -> ecotone.TaskSet[Lock]:
    """Tasks whose answer is hidden, named by opaque ids, with words read as inline tasks."""
    records = [Lock(name="front", code="amber", hints=["a gem"]), Lock(name="back", code="cedar")]

    def read(text: str) -> Lock:
        if not text.isalpha():
            raise ValueError("a lock is given as its code, in letters")
        return Lock(name="given", code=text)

    return ecotone.TaskSet(
        records,
        id=lambda lock: f"lock-{lock.name}",
        type=Lock,
        hidden=("code", "hints"),
        from_text=read,
    )


def test_hidden_fields_are_withheld_marked_in_the_schema_and_text_reads_as_an_inline_task(
    tmp_path: Path,
) -> None:
    tasks = locks()
    ref, record = tasks.find("lock-front")
    assert tasks.public(record) == {"name": "front"}
    assert tasks.withheld(record) == {"code": "amber", "hints": ["a gem"]}
    assert puzzles().withheld(puzzles().splits["test"][0]) == {}  # hides nothing
    schema = tasks.schema()
    assert schema["required"] == ["name"]  # a listed record comes without its hidden fields
    assert schema["properties"]["code"] == {"type": "string", "writeOnly": True}
    assert schema["properties"]["name"] == {"type": "string"}
    # text that is an id is that task; other text is read as an inline record
    assert tasks.choose({"task": "lock-front"}, None) == (ref, record)
    given_ref, given = tasks.choose({"task": "zebra"}, None)
    assert (given_ref, given) == (
        ecotone.TaskRef(id="lock-given"),
        Lock(name="given", code="zebra"),
    )
    with pytest.raises(ecotone.TaskError, match="no task '12': a lock is given as its code"):
        tasks.choose({"task": "12"}, None)
    unknown: dict[str, Lock] = {}
    broken: ecotone.TaskSet[Lock] = ecotone.TaskSet(
        [Lock(name="a", code="b")], id="name", from_text=unknown.__getitem__
    )
    with pytest.raises(ecotone.TaskError, match="no task 'zz': from_text raised KeyError: 'zz'"):
        broken.choose({"task": "zz"}, None)  # an env's bug, answered, not raised in the server
    # an inline record equal to a listed task is named as that task; a different one is not
    assert tasks.choose({"task": msgspec.to_builtins(record)}, None) == (ref, record)
    other = tasks.choose({"task": {"name": "front", "code": "ember"}}, None)[0]
    assert other == ecotone.TaskRef(id="lock-front")  # no split: not the listed one
    path = tmp_path / "locks.jsonl"
    path.write_text('{"name": "side", "code": "delta"}\n')
    read = tasks.reading(path)  # a task file keeps the set's id, hidden fields and reader
    assert read.public(read.splits["locks"][0]) == {"name": "side"}
    assert read.choose({"task": "zebra"}, None)[0] == ecotone.TaskRef(id="lock-given")


def test_ids_are_unique_across_splits() -> None:
    with pytest.raises(ecotone.TaskError, match="task id 'a' appears twice: train\\[0\\] and test"):
        ecotone.TaskSet({"train": [{"id": "a"}], "test": [{"id": "a"}]})


def test_an_env_with_tasks_must_take_a_task_in_reset() -> None:
    class NoTaskEnv(ecotone.Environment[ecotone.Action, ecotone.Observation, ecotone.State]):
        tasks = puzzles

        def reset(
            self, *, seed: int | None = None, episode_id: str | None = None
        ) -> ecotone.Observation:
            return ecotone.Observation()

        def step(self, action: ecotone.Action) -> ecotone.Observation:
            return ecotone.Observation()

        def state(self) -> ecotone.State:
            return ecotone.State()

    with pytest.raises(EnvDefinitionError, match="publishes tasks, but its reset\\(\\) takes no"):
        EnvSpec.from_class(NoTaskEnv, "no-task")


# --- over the wire -------------------------------------------------------------------------


def test_wordle_publishes_its_words_and_a_reset_plays_the_chosen_one() -> None:
    listed = words()
    ids = {task_id(WordleTask(secret=w)): w for w in listed}
    with run_server("wordle") as server, ecotone.connect(server.url) as env:
        info = env.describe()
        assert info.tasks == {"train": len(listed) - len(listed) // 5, "test": len(listed) // 5}
        # the word is a hidden field: marked so, and not required of a listed record
        assert info.task_schema["properties"] == {"secret": {"type": "string", "writeOnly": True}}
        assert "required" not in info.task_schema
        page = env.list_tasks("test", offset=2, limit=3)
        assert page.splits == info.tasks and (page.split, page.offset) == ("test", 2)
        assert page.total == len(listed) // 5
        assert page.tasks == [{}, {}, {}]  # no public field
        assert [ids[i] for i in page.ids] == [listed[i] for i in (14, 19, 24)]  # every fifth
        assert all(re.fullmatch(r"w-[0-9a-f]{12}", i) for i in page.ids)
        first = env.list_tasks()
        assert first.split == "train" and len(first.tasks) == len(first.ids) == 100

        one = env.get_task(split="test", index=3)
        assert one.ref == ecotone.TaskRef(id=page.ids[1], split="test", index=3)
        assert one.task == {}
        assert env.get_task(one.id).ref == one.ref

        result = env.reset(split="test", index=3)
        assert result.task == one.ref
        assert env.step({"guess": listed[19]}).done  # the secret is that task's word

        result = env.reset(task="crane")  # a word given: the listed task it is, by its id
        assert result.task is not None and ids[result.task.id] == "crane"
        assert result.task.split in ("train", "test") and result.task.index is not None
        assert env.step({"guess": "crane"}).done
        assert env.reset(task=" CRANE ").task == result.task

        seeded = [env.reset(seed=s).task for s in (1, 2, 3)]
        assert seeded == [env.reset(seed=s).task for s in (1, 2, 3)]
        assert all(ref is not None and ref.split == "train" for ref in seeded)

        inline = env.reset(task={"secret": "zzzzz"}, allow_any_word=True)
        assert inline.task == ecotone.TaskRef(id=task_id(WordleTask(secret="zzzzz")))
        assert "zzzzz" not in inline.task.id
        assert env.step({"guess": "zzzzz"}).done
        word = env.reset(task="qzxjv", allow_any_word=True)  # not in the list: inline too
        assert word.task is not None and word.task.split is None and "qzxjv" not in word.task.id
        assert env.step({"guess": "qzxjv"}).done


def test_bad_task_requests_are_invalid_argument_and_the_session_goes_on() -> None:
    with run_server("wordle") as server, ecotone.connect(server.url) as env:
        with pytest.raises(ecotone.ServerError, match="no task 'qqqq': a wordle task is") as caught:
            env.reset(task="qqqq")  # neither an id nor a five-letter word
        assert caught.value.code == "invalid_argument"
        with pytest.raises(ecotone.ServerError, match="no task 'crane'") as caught:
            env.get_task("crane")  # get_task takes ids only
        assert caught.value.code == "invalid_argument"
        with pytest.raises(ecotone.ServerError, match="out of range") as caught:
            env.reset(split="test", index=10_000)
        assert caught.value.details == {"split": "test", "count": len(words()) // 5}
        with pytest.raises(ecotone.ServerError, match="no task split 'dev'"):
            env.list_tasks("dev")
        with pytest.raises(ecotone.ServerError, match="needs `task`"):
            env.get_task()
        assert env.reset(task="crane").task is not None  # the session is still usable


def test_an_env_without_tasks_lists_none_and_refuses_task_options() -> None:
    with run_server("counter") as server, ecotone.connect(server.url) as env:
        assert env.describe().tasks == {}
        assert env.list_tasks() == ecotone.Tasks(splits={})
        with pytest.raises(ecotone.ServerError, match="publishes no tasks"):
            env.get_task("x")
        with pytest.raises(ecotone.ServerError, match="does not take reset option\\(s\\) split"):
            env.reset(split="train")
        assert env.reset(seed=0).task is None


def test_coding_publishes_prompts_but_never_its_hidden_tests() -> None:
    with run_server("coding") as server, ecotone.connect(server.url) as env:
        info = env.describe()
        assert info.tasks == {"train": 7, "test": 3}
        listed = env.list_tasks("train").tasks + env.list_tasks("test").tasks
        assert {t["id"] for t in listed} == {t.id for t in coding_tasks()}
        for task in listed:
            assert set(task) <= {"id", "prompt", "stub", "timeout_s", "memory_mb", "tests"}
            assert task.get("tests", "") == ""  # shipped tasks keep theirs on the server
        result = env.reset(split="test", index=0)
        assert result.task is not None and result.observation["task"] == result.task.id


# --- HTTP: ecotone's routes and OpenEnv's Task API ---------------------------------------------


def http(url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_task_routes_answer_on_every_http_face(transport: str) -> None:
    listed = words()
    with run_server("wordle", transport=transport) as server:
        base = "http://" + server.url.split("://", 1)[1]
        status, page = http(f"{base}/v1/tasks?split=test&limit=2")
        assert status == 200 and page["op"] == "tasks"
        assert page["tasks"] == [{}, {}]  # the words are hidden; the ids are opaque
        assert page["ids"] == [task_id(WordleTask(secret=listed[i])) for i in (4, 9)]
        status, one = http(f"{base}/v1/task?id={page['ids'][1]}")
        assert status == 200 and one["ref"] == {"id": page["ids"][1], "split": "test", "index": 1}
        assert one["task"] == {}
        status, bad = http(f"{base}/v1/task?split=test&index=x")
        assert status == 422 and bad["code"] == "invalid_argument"

        assert http(f"{base}/list_environments") == (200, ["wordle"])
        status, splits = http(f"{base}/wordle/splits")
        assert status == 200 and splits == [
            {"name": "train", "type": "train", "num_tasks": len(listed) - len(listed) // 5},
            {"name": "test", "type": "test", "num_tasks": len(listed) // 5},
        ]
        assert http(f"{base}/WORDLE/num_tasks", {"split": "test"}) == (
            200,
            {"num_tasks": len(listed) // 5},
        )
        assert http(f"{base}/wordle/task", {"split": "test", "index": 0}) == (200, {"task": {}})
        status, ranged = http(f"{base}/wordle/task_range", {"split": "test", "start": -2})
        assert status == 200 and ranged["tasks"] == [{}, {}]
        status, everything = http(f"{base}/wordle/tasks", {"split": "test"})
        assert status == 200 and len(everything["tasks"]) == len(listed) // 5
        assert not {json.dumps(t) for t in everything["tasks"]} - {"{}"}  # no word among them
        assert everything["env_name"] == "wordle"
        assert http(f"{base}/wordle/task", {"split": "test", "index": 10**6})[0] == 400
        assert http(f"{base}/wordle/task", {"index": 0})[0] == 422
        assert http(f"{base}/wordle/num_tasks", {"split": "dev"})[0] == 400
        assert http(f"{base}/chess/splits")[0] == 404


class HarborTask(msgspec.Struct, frozen=True, kw_only=True):
    """The shape of OpenEnv's `HarborTaskRef` (its Task API's reference client reads it)."""

    index: int
    task_id: str
    task_name: str
    dataset: str = ""
    instruction: str = ""


class HarborObservation(ecotone.Observation, kw_only=True):
    instruction: str = ""


class HarborLikeEnv(ecotone.Environment[ecotone.Action, HarborObservation, ecotone.State]):
    """An env named `harbor_env` whose tasks look like OpenEnv's Harbor datasets."""

    name = "harbor_env"
    inline = True
    tasks = ecotone.TaskSet(
        {
            "terminal-bench": [
                HarborTask(index=i, task_id=f"tb-{i}", task_name=f"task {i}", instruction=f"do {i}")
                for i in range(30)
            ]
        },
        id="task_id",
        type=HarborTask,
    )

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        task: HarborTask | None = None,
    ) -> HarborObservation:
        return HarborObservation(instruction=task.instruction if task else "")

    def step(self, action: ecotone.Action) -> HarborObservation:
        return HarborObservation(done=True, reward=1.0)

    def state(self) -> ecotone.State:
        return ecotone.State()


class HarborPlugin:
    @ecotone.hookimpl
    def ecotone_environments(self) -> Mapping[str, Any]:
        return {"harbor_env": HarborLikeEnv}


OPENENV_TASK_CLIENT = textwrap.dedent(
    """
    import json, sys
    from openenv.harbor.client import HarborEnv

    env = HarborEnv(base_url=sys.argv[1])
    split = env.splits()[0]["name"]
    print(json.dumps({
        "splits": env.splits(),
        "num_tasks": env.num_tasks(split),
        "task": env.get_task(split, 7).model_dump(),
        "range": [t.task_id for t in env.get_task_range(split, 3, 6)],
    }))
    """
)


def test_openenvs_own_task_client_reads_an_ecotone_server(openenv_python: str) -> None:
    with run_server("harbor_env", transport="http", plugins=[HarborPlugin()]) as server:
        done = subprocess.run(
            [openenv_python, "-c", OPENENV_TASK_CLIENT, server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
    assert seen["splits"] == [{"name": "terminal-bench", "type": "validation", "num_tasks": 30}]
    assert seen["num_tasks"] == 30
    assert seen["task"] == {
        "index": 7,
        "task_id": "tb-7",
        "task_name": "task 7",
        "dataset": "",
        "instruction": "do 7",
    }
    assert seen["range"] == ["tb-3", "tb-4", "tb-5"]


# --- a task file named at serve time ------------------------------------------------------------


def test_a_task_file_replaces_the_envs_own_tasks(tmp_path: Path) -> None:
    lines = [
        {"split": "easy", "secret": "crane"},
        {"split": "easy", "secret": "slate"},
        {"split": "hard", "secret": "fjord"},
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with run_server("wordle", tasks={"": str(path)}) as server, ecotone.connect(server.url) as env:
        assert env.describe().tasks == {"easy": 2, "hard": 1}
        hard = env.list_tasks("hard")  # the env's hidden fields and ids hold for a file's
        assert hard.tasks == [{}] and hard.ids == [task_id(WordleTask(secret="fjord"))]
        assert env.reset(seed=5).task in (
            ecotone.TaskRef(id=task_id(WordleTask(secret="crane")), split="easy", index=0),
            ecotone.TaskRef(id=task_id(WordleTask(secret="slate")), split="easy", index=1),
        )
        assert env.reset(split="hard").task == ecotone.TaskRef(
            id=hard.ids[0], split="hard", index=0
        )
        assert env.reset(task="fjord").task == ecotone.TaskRef(
            id=hard.ids[0], split="hard", index=0
        )
    named = tmp_path / "plain.json"
    named.write_text(json.dumps([{"secret": "crane"}]))
    with (
        run_server("wordle", tasks={"eval": str(named)}) as server,
        ecotone.connect(server.url) as env,
    ):
        assert env.describe().tasks == {"eval": 1}
    # Named explicitly (`--tasks eval=mine.jsonl`), a file whose records carry a `split`
    # field is that split's, every record of it (issue 40: such records were refused).
    with (
        run_server("wordle", tasks={"eval": str(path)}) as server,
        ecotone.connect(server.url) as env,
    ):
        assert env.describe().tasks == {"eval": 3}
        listed = env.list_tasks("eval")  # the word stays hidden (issue 39), named by its id
        assert listed.tasks[2] == {} and listed.ids[2] == task_id(WordleTask(secret="fjord"))


def test_a_bad_task_file_stops_serve_with_the_line_at_fault(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"secret": "crane"}\n{"secret": 5}\n')
    with ecotone_serving("wordle", "--port", "0", "--tasks", f"train={path}", cwd=tmp_path) as proc:
        assert proc.wait(timeout=30) == 2
        assert proc.stderr is not None
        said = proc.stderr.read()
    assert f"{path}:2: not a WordleTask: Expected `str`, got `int`" in said
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b'\xef\xbb\xbf{"secret": "crane"}\n')  # as some editors save
    assert ecotone.TaskSet.from_file(with_bom, id="secret").counts() == {"bom": 1}
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"secret": "crane"}\n{oops\n')
    with ecotone_serving("wordle", "--port", "0", "--tasks", str(broken), cwd=tmp_path) as proc:
        assert proc.wait(timeout=30) == 2
        assert proc.stderr is not None
        assert f"{broken}:2: not JSON" in proc.stderr.read()
    with ecotone_serving("counter", "--port", "0", "--tasks", str(path), cwd=tmp_path) as proc:
        assert proc.wait(timeout=30) == 2
        assert proc.stderr is not None
        assert "takes no `task` in reset(), so it cannot be given tasks" in proc.stderr.read()


def test_the_shipped_task_sets_are_stable() -> None:
    assert wordle_tasks().splits["test"][0] == WordleTask(secret=words()[4])
    assert (
        wordle_tasks().get("test", 0)[0].id
        == "w-" + hashlib.sha256(b"wordle:" + words()[4].encode()).hexdigest()[:12]
    )  # ids stay what they were: recorded runs name tasks by them
    assert [t.id for t in coding_tasks().splits["test"]] == [
        "to_roman",
        "balanced_brackets",
        "merge_intervals",
    ]


@pytest.mark.parametrize("scheme", ["openenv+http", "openenv+ws"])
def test_openenvs_reset_with_split_and_index_starts_that_task(scheme: str) -> None:
    test_words = [w for i, w in enumerate(words()) if i % 5 == 4]
    with run_server("wordle", transport="http") as server:
        url = scheme + "://" + server.url.split("://", 1)[1]
        with ecotone.connect(url) as env:
            env.reset(split="test", index=3)
            assert env.step({"guess": test_words[3]}).done


def test_a_task_files_hidden_fields_reach_the_env_but_no_client(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    hidden = "assert add(1, 2) == 3  # the hidden test\n"
    path.write_text(json.dumps({"id": "add", "prompt": "Write add(a, b).", "tests": hidden}) + "\n")
    with (
        run_server("coding", tasks={"eval": str(path)}) as server,
        ecotone.connect(server.url) as env,
    ):
        listed = env.list_tasks("eval").tasks
        assert listed == [{"id": "add", "prompt": "Write add(a, b).", "stub": "", "timeout_s": 5.0,
                           "memory_mb": 256}]  # fmt: skip
        assert "tests" not in env.get_task("add").task
        base = "http://" + server.url.split("://", 1)[1]
        assert "hidden test" not in json.dumps(http(f"{base}/coding/tasks", {"split": "eval"})[1])
        env.reset(task="add")
        result = env.step({"code": "def add(a, b):\n    return a + b\n"})
        assert result.done and result.observation["passed"] == 1  # the env ran the hidden test
