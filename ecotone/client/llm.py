"""How an env reads to a language model: observations as text, the action as a tool.

Shared by the TRL adapter (`ecotone.trl`) and `ecotone collect`'s chat policy, so a model
sees an env the same way in training and in evaluation.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ecotone.specs import EnvInfo, ToolInfo

BASE_FIELDS = frozenset({"reward", "done", "truncated", "metadata"})
"""Observation fields every env has, left out of its text."""


def observation_text(observation: Mapping[str, Any], *, first: bool = False) -> str:
    """An observation as text: its `text` field if it has one, else (`first`: after a reset)
    its `prompt`, else its own fields as compact JSON."""
    text = observation.get("text")
    if isinstance(text, str) and text:
        return text
    prompt = observation.get("prompt")
    if first and isinstance(prompt, str) and prompt:
        return prompt
    fields = {k: v for k, v in observation.items() if k not in BASE_FIELDS}
    return json.dumps(fields, ensure_ascii=False, separators=(", ", ": "))


def identifier(name: str) -> str:
    """`name` as an identifier a tool-calling model (and Python) accepts."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "value"
    if out[0].isdigit() or keyword.iskeyword(out):
        out = f"{out}_"
    return out


def action_fields(info: EnvInfo) -> list[str]:
    return [k for k in info.action_schema.get("properties", {}) if k != "metadata"]


def action_tool_name(info: EnvInfo, override: str | None = None) -> str:
    """The name the env's action goes by as a tool: `override`, else its only field's name
    (`guess`, `move`, `code`), else `step`."""
    if override:
        return override
    fields = action_fields(info)
    return identifier(fields[0]) if len(fields) == 1 else "step"


RESERVED_NAMES = frozenset({"reset", "get_reward"})
"""Names a tool never gets (TRL's own methods)."""


def tool_name(name: str, taken: set[str] | frozenset[str]) -> str:
    """An env tool's name as a model calls it: an identifier, `tool_`-prefixed when it would
    clash with the action's or another tool's (the same in training and in evaluation)."""
    out = identifier(name)
    if out in taken or out in RESERVED_NAMES:
        out = f"tool_{out}"
    while out in taken:
        out += "_"
    return out


def action_description(info: EnvInfo) -> str:
    schema = info.action_schema
    return " ".join(str(schema.get("description") or info.description or "Act.").split())


def action_parameters(info: EnvInfo) -> dict[str, Any]:
    """The action's JSON Schema as a tool's parameters (without `metadata`)."""
    schema = info.action_schema
    props = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
    out: dict[str, Any] = {"type": "object", "properties": props}
    required = [k for k in schema.get("required", []) if k in props]
    if required:
        out["required"] = required
    if "$defs" in schema:
        out["$defs"] = schema["$defs"]
    return out


def openai_tools(
    info: EnvInfo, tools: Sequence[ToolInfo] = (), action_tool: str | None = None
) -> list[dict[str, Any]]:
    """The env's action and tools in the chat-completions `tools` format."""
    out = [
        {
            "type": "function",
            "function": {
                "name": action_tool_name(info, action_tool),
                "description": action_description(info),
                "parameters": action_parameters(info),
            },
        }
    ]
    taken = {action_tool_name(info, action_tool)}
    for tool in tools:
        name = tool_name(tool.name, taken)
        taken.add(name)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.input_schema or {"type": "object", "properties": {}},
                },
            }
        )
    return out


__all__ = [
    "BASE_FIELDS",
    "action_description",
    "action_fields",
    "action_parameters",
    "action_tool_name",
    "identifier",
    "observation_text",
    "openai_tools",
    "tool_name",
]
