"""Objects a user names as `MODULE:NAME` (a rubric, a policy, a reward function).

MODULE is imported from the installed packages or the working directory, as a user running a
command from their project's folder expects.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def load_named(spec: str, what: str) -> Any:
    """The object `MODULE:NAME` names (`NAME` may be dotted), for a user's rubric, policy...
    `what` says which in errors. MODULE is imported from the installed packages or the
    working directory. ValueError says what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"a {what} is named MODULE:NAME, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import {module_name!r}: {exc}") from None
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"{what} {spec!r}: {module_name!r} has no {attr!r}") from None
    return value
