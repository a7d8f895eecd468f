"""What a vector env is told to do: its autoreset mode and its error policy."""

from __future__ import annotations

from typing import Literal

AutoresetMode = Literal["next_step", "same_step", "disabled"]
ErrorPolicy = Literal["raise", "info"]
AUTORESET_MODES: tuple[str, ...] = ("next_step", "same_step", "disabled")
ERROR_POLICIES: tuple[str, ...] = ("raise", "info")

_GYMNASIUM_MODES = {"NextStep": "next_step", "SameStep": "same_step", "Disabled": "disabled"}
"""`gymnasium.vector.AutoresetMode` values (the enum is accepted too), to ours."""
