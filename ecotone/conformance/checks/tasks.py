"""Tasks: listed, found and started as describe() says."""

from __future__ import annotations

from typing import Any

from ecotone.client.sync import EnvClient
from ecotone.conformance.expect import expect, fail, show
from ecotone.conformance.registry import check
from ecotone.conformance.runner import Runner
from ecotone.conformance.schema import validate


def _check_split(r: Runner, client: EnvClient[Any, Any], split: str, count: int) -> None:
    """One split of `count` tasks: its first page is listed as counted and matches the task
    schema; its first task is found by index and by id, and reset(split=, index=0) starts it.

    Raises:
        CheckFailed: any of that is not so.
    """
    r.doing = f"list_tasks({split!r}, limit=20)"
    page = client.list_tasks(split, limit=20)
    expect(page.total == count, f"list_tasks({split!r}).total", str(count), str(page.total))
    expect(
        len(page.tasks) == min(20, count),
        f"list_tasks({split!r}, limit=20)",
        f"{min(20, count)} tasks",
        f"{len(page.tasks)}",
    )
    for index, task in enumerate(page.tasks):
        errors = validate(task, r.info.task_schema)
        if errors:
            fail(
                f"task {split}[{index}]",
                "a record matching describe().task_schema",
                "; ".join(str(e) for e in errors[:3]),
            )
    if not count:
        return
    r.doing = f"get_task(split={split!r}, index=0)"
    got = client.get_task(split=split, index=0)
    expect(
        got.task == page.tasks[0], f"get_task({split!r}, 0)", show(page.tasks[0]), show(got.task)
    )
    r.doing = f"get_task({got.id!r})"
    by_id = client.get_task(got.id)
    expect(by_id.ref == got.ref, f"get_task({got.id!r}).ref", show(got.ref), show(by_id.ref))
    r.doing = f"reset(split={split!r}, index=0)"
    started = client.reset(split=split, index=0, **r.settings.reset_options)
    expect(
        started.task == got.ref,
        f"reset(split={split!r}, index=0).task",
        show(got.ref),
        show(started.task),
    )


@check("tasks", openenv_skip="OpenEnv's clients have no task frames (its Task API is plain HTTP)")
def check_tasks(r: Runner) -> str:
    """an env that publishes tasks lists each split as describe() counts it, every listed task
    matches the task schema, get_task finds it by index and by id, and reset(split=, index=)
    and a seeded reset name the task they start

    Raises:
        CheckFailed: list_tasks' splits are not describe()'s counts; a split's total or page size is
            wrong; a listed task does not match the task schema; get_task by index or by id finds
            another task; reset(split=, index=) names another task; a seeded reset names no task, or
            another one when repeated.
    """
    counts = r.info.tasks
    with r.session() as client:
        r.doing = "list_tasks()"
        first = client.list_tasks(limit=0)
        expect(first.splits == counts, "list_tasks().splits", show(counts), show(first.splits))
        if not counts:
            return "the env publishes no tasks, and list_tasks says so"
        for split, count in counts.items():
            _check_split(r, client, split, count)
        r.doing = f"reset(seed={r.seed}) twice"
        once = client.reset(seed=r.seed, **r.settings.reset_options).task
        again = client.reset(seed=r.seed, **r.settings.reset_options).task
        expect(once is not None, f"reset(seed={r.seed}).task", "the task drawn", "none")
        expect(once == again, f"reset(seed={r.seed}).task, twice", show(once), show(again))
    splits = ", ".join(f"{s} ({n})" for s, n in counts.items())
    return f"splits {splits}"
