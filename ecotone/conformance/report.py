"""What a check run gives: each check's status and message, and the report of them all."""

from __future__ import annotations

import enum
from typing import Any

import attrs


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


class CheckFailed(Exception):
    """A check saw something other than what the contract promises."""

    def __init__(self, what: str, expected: str, seen: str) -> None:
        super().__init__(f"{what}: expected {expected} / seen {seen}")
        self.what = what
        self.expected = expected
        self.seen = seen


class CheckSkipped(Exception):
    """A check cannot apply to this env or server; the message says why."""


@attrs.frozen(kw_only=True)
class CheckResult:
    """The outcome of one check. A failure says `what` was looked at, what was `expected`
    and what was `seen`; a skip gives its `reason`; a pass may carry a `note`."""

    name: str
    status: Status
    title: str
    what: str = ""
    expected: str = ""
    seen: str = ""
    reason: str = ""
    note: str = ""
    seconds: float = 0.0

    @property
    def message(self) -> str:
        """The line's text after the check's name."""
        if self.status is Status.FAIL:
            return f"{self.what}: expected {self.expected} / seen {self.seen}"
        if self.status is Status.SKIP:
            return self.reason
        return f"({self.note})" if self.note else ""

    def line(self, width: int = 0) -> str:
        """`PASS  name`, `FAIL  name  what: expected ... / seen ...`, `SKIP  name  reason`."""
        text = f"{self.status.value}  {self.name:<{width}}  {self.message}"
        return text.rstrip()

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["status"] = self.status.value
        return data


@attrs.frozen(kw_only=True)
class Report:
    """Every result, and the lines `ecotone validate` prints."""

    target: str
    env: str
    actions: str
    results: tuple[CheckResult, ...]

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status is status)

    @property
    def ok(self) -> bool:
        """Nothing failed (skips are not failures)."""
        return self.count(Status.FAIL) == 0

    @property
    def summary(self) -> str:
        return (
            f"{len(self.results)} checks: {self.count(Status.PASS)} passed, "
            f"{self.count(Status.FAIL)} failed, {self.count(Status.SKIP)} skipped"
        )

    def lines(self) -> list[str]:
        width = max((len(r.name) for r in self.results), default=0)
        return [
            f"ecotone conformance: {self.target}; actions {self.actions}",
            *(r.line(width) for r in self.results),
            self.summary,
        ]

    def text(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "env": self.env,
            "actions": self.actions,
            "ok": self.ok,
            "summary": {
                "checks": len(self.results),
                "passed": self.count(Status.PASS),
                "failed": self.count(Status.FAIL),
                "skipped": self.count(Status.SKIP),
            },
            "checks": [r.to_dict() for r in self.results],
        }
