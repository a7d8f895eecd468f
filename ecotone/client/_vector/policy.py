"""What a vector env is told to do: its autoreset mode and its error policy.

Both are `str` enums: a member is equal to its value, and prints as it, so the strings users
pass and compare (`autoreset_mode="same_step"`, `venv.autoreset_mode == "next_step"`) keep
working. No numpy here: `import ecotone` imports this module.
"""

from __future__ import annotations

import enum
from typing import Any


class AutoresetMode(enum.StrEnum):
    """When a sub-env whose episode ended is reset (Gymnasium 1.x's `AutoresetMode`, whose
    members and values (`"NextStep"`...) are accepted too)."""

    NEXT_STEP = "next_step"
    """By the next step, instead of stepping it."""
    SAME_STEP = "same_step"
    """Within the step that ended it."""
    DISABLED = "disabled"
    """By the caller (`reset(options={"reset_mask": ...})`); stepping it before is an error."""

    @classmethod
    def _missing_(cls, value: object) -> AutoresetMode | None:
        # Gymnasium's members are a plain Enum (not equal to their values): map them by value.
        return _FROM_GYMNASIUM.get(getattr(value, "value", value))


_FROM_GYMNASIUM: dict[object, AutoresetMode] = {
    "NextStep": AutoresetMode.NEXT_STEP,
    "SameStep": AutoresetMode.SAME_STEP,
    "Disabled": AutoresetMode.DISABLED,
}
"""`gymnasium.vector.AutoresetMode` values, to ours."""


class ErrorPolicy(enum.StrEnum):
    """What a call does when sub-envs fail."""

    RAISE = "raise"
    """Raise `SubEnvError` (`EpisodeLost` when an episode was lost), the result attached."""
    INFO = "info"
    """Report each failure in the sub-env's infos and go on."""


def autoreset_mode(value: Any) -> AutoresetMode:
    """`value` (ours, or Gymnasium's member or value) as an `AutoresetMode`.

    Raises:
        ValueError: it is none of them (the message lists ours).
    """
    try:
        return AutoresetMode(value)
    except ValueError:
        known = ", ".join(AutoresetMode)
        raise ValueError(f"autoreset_mode {value!r} is not one of {known}") from None


def error_policy(value: Any) -> ErrorPolicy:
    """`value` as an `ErrorPolicy`.

    Raises:
        ValueError: it is not one (the message lists them).
    """
    try:
        return ErrorPolicy(value)
    except ValueError:
        raise ValueError(f"errors {value!r} is not one of {', '.join(ErrorPolicy)}") from None
