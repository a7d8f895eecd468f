"""PettingZoo both ways: a multi-agent env on a server as a PettingZoo env.

`env(url)` is an `AECEnv`, `parallel_env(url)` a `ParallelEnv`, for one process driving
every seat of one session (it is the session's owner: it needs no seat key). Either form
works on either kind of env: a turn-based `ecotone.MultiAgentEnvironment` or a simultaneous
`ecotone.SimultaneousEnvironment`, the `pettingzoo:` bridge's included
(`ecotone serve pettingzoo:classic/connect_four_v3`). Spaces are rebuilt from the env's
schemas (`ecotone.gym.spaces`): exactly the served PettingZoo env's for the bridge, derived
field by field for a native env. PettingZoo's `api_test`, `parallel_api_test` and
`seed_test` pass on them (tests/test_pettingzoo.py).

To let other processes play some seats instead, hand them keys from
`env.unwrapped.link.client.seat_keys()`: a seat another connection holds is its own.

Needs the `pettingzoo` extra (`pip install 'ecotone[pettingzoo]'`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecotone.client.sync import connect
from ecotone.pettingzoo.aec import RemoteAECEnv
from ecotone.pettingzoo.link import SeatLink
from ecotone.pettingzoo.parallel import RemoteParallelEnv


def _link(url: str, reset_options: Mapping[str, Any] | None, options: dict[str, Any]) -> SeatLink:
    client = connect(url, **options)
    try:
        return SeatLink(client, client.describe(), reset_options or {})
    except BaseException:
        client.close()
        raise


def env(
    url: str, *, reset_options: Mapping[str, Any] | None = None, **connect_options: Any
) -> RemoteAECEnv:
    """A PettingZoo AEC env for the multi-agent env served at `url` (one new session).

    Args:
        url: The server's URL (`ws://...`, `tcp://...`, `inproc://ENV`...).
        reset_options: The env's reset options, sent with every reset (`rounds=3`, say).
        **connect_options: For `ecotone.connect`: `env=` (which env, when the server serves
            several), `codec=`, `timeout=`, `connect_timeout=`, `token=`.

    Returns:
        The env; `reset()` it first, and `close()` it to close the session.

    Raises:
        ValueError: The env has no seats (a single-agent env: see `ecotone.gym.make`).
        ecotone.gym.SpaceError: A field of a seat's action or observation has no space.

    Example:
        >>> aec = ecotone.pettingzoo.env("inproc://dilemma", reset_options={"rounds": 3})
        >>> aec.reset(seed=0)
        >>> aec.agent_selection, aec.action_space("player_0")
        ('player_0', Discrete(2))
        >>> aec.close()
    """
    return RemoteAECEnv(_link(url, reset_options, connect_options))


def parallel_env(
    url: str, *, reset_options: Mapping[str, Any] | None = None, **connect_options: Any
) -> RemoteParallelEnv:
    """A PettingZoo parallel env for the multi-agent env served at `url` (one new session).

    Args:
        url: The server's URL (`ws://...`, `tcp://...`, `inproc://ENV`...).
        reset_options: The env's reset options, sent with every reset.
        **connect_options: For `ecotone.connect` (as `env`'s).

    Returns:
        The env; `reset()` it first, and `close()` it to close the session.

    Raises:
        ValueError: The env has no seats (a single-agent env: see `ecotone.gym.make`).
        ecotone.gym.SpaceError: A field of a seat's action or observation has no space.

    Example:
        >>> par = ecotone.pettingzoo.parallel_env("inproc://dilemma")
        >>> observations, infos = par.reset(seed=0)
        >>> _, rewards, *_ = par.step({"player_0": 1, "player_1": 0})
        >>> rewards
        {'player_0': 5.0, 'player_1': 0.0}
        >>> par.close()
    """
    return RemoteParallelEnv(_link(url, reset_options, connect_options))


__all__ = ["RemoteAECEnv", "RemoteParallelEnv", "SeatLink", "env", "parallel_env"]
