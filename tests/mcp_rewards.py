"""A reward function for an MCP env, named in the env's name (`#reward=tests.mcp_rewards:...`)
by tests/test_mcp_envs.py."""

from __future__ import annotations

from typing import Any


def sum_is_seven(action: Any, observation: Any) -> float:
    """1 when the `get-sum` tool answered 7, else 0."""
    return 1.0 if action.tool == "get-sum" and "7" in observation.text else 0.0
