"""Records carried inside frames: what an env is, which task an episode runs, a tool.

Plain msgspec Structs, not frames (no `op`); `ecotone.specs.frames` (and `ecotone.specs`)
re-export them.
"""

from typing import Any

import msgspec

__all__ = ["EnvInfo", "TaskRef", "ToolInfo"]


class EnvInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What an environment is: its name, version, description and JSON Schemas."""

    name: str
    description: str = ""
    version: str = ""
    action_schema: dict[str, Any] = {}
    observation_schema: dict[str, Any] = {}
    state_schema: dict[str, Any] = {}
    readme: str = ""
    """Longer documentation, as plain text or markdown: the env class's `readme` attribute, or
    else its module's and class's docstrings."""
    tasks: dict[str, int] = {}
    """The env's task splits and how many tasks each holds (none: it publishes no tasks)."""
    task_schema: dict[str, Any] = {}
    """The JSON Schema of one task record."""
    seats: list[str] = []
    """A multi-agent env's seats (none: a single-agent env); its moves are `play` frames."""
    seat_schemas: dict[str, dict[str, Any]] = {}
    """The action and observation schemas (`action`, `observation`) of each seat whose types
    are not the env's own."""
    simultaneous: bool = False
    """Its seats move at once: a round waits for every live seat, or `move_deadline` s."""
    move_deadline: float | None = None


class TaskRef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Which task an episode runs: its id, and where it is.

    A reset of an env that publishes tasks names it (`StepResult.task`), as do `get_task`'s
    answers (`Task.ref`).

    Args:
        id: The task's id.
        split: The split it is in (None for a task given inline).
        index: Its position in the split, from 0 (None for a task given inline).
    """

    id: str
    split: str | None = None
    index: int | None = None


class ToolInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool an env exposes: its name, what it does, and the JSON Schema of its arguments.

    An env's `list_tools()` returns them; a client's `list_tools()` hands them back.

    Args:
        name: The tool's name, as `call_tool` takes it.
        description: What it does, for a person or a model.
        input_schema: The JSON Schema of its arguments (an object's).
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = {}
