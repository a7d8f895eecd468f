"""What a vector env is told to do: its keyword options, its autoreset mode and error policy.

The mode and the policy are `str` enums: a member is equal to its value, and prints as it,
so the strings users pass and compare (`autoreset_mode="same_step"`,
`venv.autoreset_mode == "next_step"`) keep working. No numpy here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, TypedDict

import attrs


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


def as_autoreset_mode(value: Any) -> AutoresetMode:
    """`value` (ours, or Gymnasium's member or value) as an `AutoresetMode`.

    Raises:
        ValueError: it is none of them (the message lists ours).
    """
    try:
        return AutoresetMode(value)
    except ValueError:
        known = ", ".join(AutoresetMode)
        raise ValueError(f"autoreset_mode {value!r} is not one of {known}") from None


def as_error_policy(value: Any) -> ErrorPolicy:
    """`value` as an `ErrorPolicy`.

    Raises:
        ValueError: it is not one (the message lists them).
    """
    try:
        return ErrorPolicy(value)
    except ValueError:
        raise ValueError(f"errors {value!r} is not one of {', '.join(ErrorPolicy)}") from None


def _reset_options(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value or {})


@attrs.frozen(kw_only=True)
class Policy:
    """What the core does when an episode ends or a sub-env fails, and how long it waits for
    an answer. The fields are checked (and Gymnasium's modes mapped) as the record is made.

    Raises (when made):
        ValueError: an autoreset mode or an error policy that is not one.
    """

    autoreset_mode: AutoresetMode = attrs.field(converter=as_autoreset_mode)
    errors: ErrorPolicy = attrs.field(converter=as_error_policy)
    reset_options: dict[str, Any] = attrs.field(converter=_reset_options)
    """Passed to every automatic reset (and merged into explicit ones)."""
    step_timeout: float | None
    """Seconds a step (or a reset) may take; None: forever."""

    @classmethod
    def from_options(cls, options: VectorOptions, default_timeout: float | None) -> Policy:
        """The policy a vector env's keyword `options` give, with the defaults (`next_step`,
        `raise`, no reset options, `default_timeout`) for those they leave out."""
        return cls(
            autoreset_mode=options.get("autoreset_mode", AutoresetMode.NEXT_STEP),
            errors=options.get("errors", ErrorPolicy.RAISE),
            reset_options=options.get("reset_options"),
            step_timeout=options.get("step_timeout", default_timeout),
        )


class VectorOptions(TypedDict, total=False):
    """The keyword options of `VectorEnv` and `AsyncVectorEnv`; their class docstring says
    what each does. Defaults: observation_type None (dicts), autoreset_mode `next_step`,
    errors `raise`, step_timeout the connection's `DEFAULT_TIMEOUT` (60 s), reset_options
    none, codec `"json"`, connect_timeout 10 s, record_to None (no recording),
    record_format `"jsonl"`, token None, resume False, checkpoint_every None,
    resume_timeout 60 s."""

    observation_type: Any
    autoreset_mode: AutoresetMode | str | enum.Enum  # Gymnasium's members too
    errors: ErrorPolicy | str
    step_timeout: float | None
    reset_options: Mapping[str, Any] | None
    codec: str
    connect_timeout: float
    record_to: Any
    record_format: str
    token: str | None
    resume: bool
    checkpoint_every: int | None
    resume_timeout: float


OPTIONS: Final = frozenset(VectorOptions.__optional_keys__)


def check_options(options: Mapping[str, object], owner: type) -> None:
    """Refuse a keyword that is not one of `VectorOptions`, as Python refuses an unknown
    keyword argument of `owner.__init__` (mypy catches it too, where it sees the call).

    Raises:
        TypeError: naming the first unknown keyword.
    """
    for name in options:
        if name not in OPTIONS:
            raise TypeError(
                f"{owner.__qualname__}.__init__() got an unexpected keyword argument {name!r}"
            )
