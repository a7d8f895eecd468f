"""What an env looks like as MCP tools: its actions as tools (one per action variant), the
schemas an agent sees, and what it is shown of an observation. Plain data, no MCP types:
`face.py` turns these into the SDK's.

* **Actions as tools.** An action type that is a tagged union (`msgspec` `tag=`) gives one
  tool per variant, named by its tag (`move`, `run_code`), its input schema the variant's
  fields without the tag; any other action type gives one tool, `step`, whose input schema
  is the action's. The docstrings are the descriptions. `metadata` is never offered: it is
  the orchestrator's.
* **What the agent is shown.** The observation without `reward`, `done` and `truncated`
  (they belong to the orchestrator) unless the server reveals them, as `structuredContent`
  with an `outputSchema` made the same way, and as JSON text beside it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

import attrs

STEP_TOOL: Final = "step"
RESET_TOOL: Final = "reset"
HIDDEN: Final = ("reward", "done", "truncated")
"""Observation fields the agent is not shown unless the server reveals them."""
ORCHESTRATOR_FIELDS: Final = ("metadata",)
"""Action fields an agent never sets."""


@attrs.frozen
class ActionTool:
    """One tool that is a step: its name, what it says, its input schema and, for a variant
    of a tagged union, the tag to put back (`tag_field` = `tag`)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    tag_field: str | None = None
    tag: Any = None

    def action(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The action a call with `arguments` stands for: what the agent may set (never
        `metadata`, nor another variant's tag)."""
        dropped = (*ORCHESTRATOR_FIELDS, self.tag_field)
        action = {k: v for k, v in arguments.items() if k not in dropped}
        if self.tag_field is not None:
            action[self.tag_field] = self.tag
        return action


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return dict(root.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {}))
    return dict(schema)


def _object_schema(
    schema: Mapping[str, Any], root: Mapping[str, Any], drop: tuple[str, ...]
) -> dict[str, Any]:
    """`schema` (an object) without the properties `drop`, carrying the root's `$defs` so
    its references still resolve."""
    out = copy.deepcopy(dict(schema))
    out.pop("title", None)
    out.pop("description", None)
    properties = dict(out.get("properties", {}))
    for name in drop:
        properties.pop(name, None)
    out["type"] = "object"
    out["properties"] = properties
    if "required" in out:
        out["required"] = [r for r in out["required"] if r not in drop]
    defs = root.get("$defs")
    if defs:
        out["$defs"] = copy.deepcopy(dict(defs))
    return out


def action_tools(action_schema: Mapping[str, Any], env_description: str) -> list[ActionTool]:
    """The tools that step the env: one per variant of a tagged union, else `step`."""
    action_schema = _inlined(action_schema)
    discriminator = action_schema.get("discriminator")
    variants = action_schema.get("anyOf") or action_schema.get("oneOf")
    if isinstance(discriminator, Mapping) and isinstance(variants, list):
        field = str(discriminator.get("propertyName"))
        tools = []
        for variant in variants:
            body = _resolve(variant, action_schema)
            tag_schema = body.get("properties", {}).get(field, {})
            tag = tag_schema.get("const", (tag_schema.get("enum") or [None])[0])
            if tag is None:
                continue
            tools.append(
                ActionTool(
                    name=str(tag),
                    description=str(body.get("description") or f"{tag}: one step of the env"),
                    input_schema=_object_schema(body, action_schema, (field, *ORCHESTRATOR_FIELDS)),
                    tag_field=field,
                    tag=tag,
                )
            )
        if tools:
            return tools
    description = str(action_schema.get("description") or "")
    summary = f"Take one step in the environment: {env_description}".strip()
    return [
        ActionTool(
            name=STEP_TOOL,
            description=f"{summary}\n\n{description}".strip(),
            input_schema=_object_schema(action_schema, action_schema, ORCHESTRATOR_FIELDS),
        )
    ]


def output_schema(observation_schema: Mapping[str, Any], reveal: bool) -> dict[str, Any]:
    """The schema of what an action tool returns: the observation, as the agent sees it."""
    observation_schema = _inlined(observation_schema)
    return _object_schema(observation_schema, observation_schema, () if reveal else HIDDEN)


def _inlined(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema whose root is a `$ref` (as msgspec writes a struct's), with the referenced
    definition at its root instead, `$defs` kept."""
    if "$ref" not in schema:
        return dict(schema)
    return {**_resolve(schema, schema), "$defs": schema.get("$defs", {})}


SCORES: Final = ("rewards", "discounted")
"""What a rubric adds to an observation's `metadata` (`ecotone.rubrics`): hidden with the
reward."""


def shown(observation: Mapping[str, Any], reveal: bool) -> dict[str, Any]:
    """The observation as the agent sees it: without the reward, the end of the episode and
    a rubric's scores, unless they are revealed."""
    if reveal:
        return dict(observation)
    out = {k: v for k, v in observation.items() if k not in HIDDEN}
    metadata = out.get("metadata")
    if isinstance(metadata, Mapping) and any(k in metadata for k in SCORES):
        out["metadata"] = {k: v for k, v in metadata.items() if k not in SCORES}
    return out


RESET_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "seed": {"type": ["integer", "null"], "description": "for a reproducible episode"}
    },
}
