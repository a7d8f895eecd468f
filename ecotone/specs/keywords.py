"""Keyword options into a record: what a public function that takes `**options:
Unpack[SomeOptions]` (PEP 692) does with them at run time.

A type checker holds its callers to the TypedDict; a caller it does not see (plain Python, a
`**dict`) gets here, so the record is built with the errors Python gives a function's own
keywords: a `TypeError` naming what the function does not take, or what it needs and was
not given, said of the function rather than of the record's `__init__`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import attrs

R = TypeVar("R", bound=attrs.AttrsInstance)


def from_keywords(record: type[R], keywords: Mapping[str, object], caller: str) -> R:
    """`record(**keywords)`, `record` an attrs class whose `__init__` takes keywords only.

    Raises `TypeError` naming the keywords `record` has no field for (with the ones it
    takes), or the required fields that `keywords` lacks, as coming from `caller` (a
    function's name, shown as `caller()`). The record's own converters and validators then
    run as usual, with their own errors."""
    fields = [field for field in attrs.fields(record) if field.init]
    taken = [field.alias for field in fields]
    unknown = sorted(set(keywords) - set(taken))
    if unknown:
        raise TypeError(
            f"{caller}() got {_unexpected(unknown)}; it takes {', '.join(sorted(taken))}"
        )
    missing = [
        field.alias
        for field in fields
        if field.default is attrs.NOTHING and field.alias not in keywords
    ]
    if missing:
        raise TypeError(f"{caller}() missing required keyword argument(s) {_quoted(missing)}")
    return record(**keywords)


def _unexpected(names: list[str]) -> str:
    plural = "s" if len(names) > 1 else ""
    return f"unexpected keyword argument{plural} {_quoted(names)}"


def _quoted(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names)


__all__ = ["from_keywords"]
