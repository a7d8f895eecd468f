"""An env as MCP tools (`ecotone/transports/mcp/catalog.py`): one tool per variant of a tagged
union action, `step` for any other; schemas without what the agent never sets or sees."""

from __future__ import annotations

import msgspec

import ecotone
from ecotone.transports.mcp.server import catalog


class Move(ecotone.Action, tag="move", kw_only=True, forbid_unknown_fields=True):
    """Move the piece one square."""

    direction: str


class Say(ecotone.Action, tag="say", kw_only=True, forbid_unknown_fields=True):
    """Say something to the other player."""

    text: str


def test_a_tagged_union_action_is_one_tool_per_variant_with_the_tag_put_back() -> None:
    schema = msgspec.json.schema(Move | Say)
    tools = {t.name: t for t in catalog.action_tools(schema, "a board game")}
    assert set(tools) == {"move", "say"}
    move = tools["move"]
    assert move.description == "Move the piece one square."
    assert set(move.input_schema["properties"]) == {"direction"}  # no tag, no metadata
    assert move.input_schema["required"] == ["direction"]
    action = move.action({"direction": "north"})
    assert msgspec.convert(action, Move | Say) == Move(direction="north")


def test_any_other_action_is_one_step_tool_and_the_agent_sees_no_reward() -> None:
    class Guess(ecotone.Action, kw_only=True, forbid_unknown_fields=True):
        """A five-letter word."""

        word: str

    (tool,) = catalog.action_tools(msgspec.json.schema(Guess), "wordle")
    assert tool.name == "step" and "A five-letter word." in tool.description
    assert "metadata" not in tool.input_schema["properties"]

    class Seen(ecotone.Observation, kw_only=True):
        hint: str = ""

    schema = catalog.output_schema(msgspec.json.schema(Seen), reveal=False)
    assert set(schema["properties"]) == {"hint", "metadata"}
    shown = catalog.shown({"hint": "G....", "reward": 1.0, "done": True}, reveal=False)
    assert shown == {"hint": "G...."}
    assert "reward" in catalog.output_schema(msgspec.json.schema(Seen), reveal=True)["properties"]


def test_an_agent_cannot_set_metadata_nor_another_variants_tag() -> None:
    tools = {t.name: t for t in catalog.action_tools(msgspec.json.schema(Move | Say), "")}
    action = tools["move"].action({"direction": "up", "metadata": {"admin": True}, "type": "say"})
    assert action == {"direction": "up", "type": "move"}


def test_a_rubrics_scores_are_hidden_with_the_reward() -> None:
    from ecotone.transports.mcp.server.catalog import shown

    observation = {
        "count": 3,
        "reward": 1.5,
        "done": True,
        "metadata": {"rewards": {"env": 1.0, "total": 1.5}, "discounted": {"q": [1.0]}, "x": 1},
    }
    assert shown(observation, False) == {"count": 3, "metadata": {"x": 1}}
    assert shown(observation, True) == observation
