"""One multi-agent session driven by one process: what both PettingZoo forms stand on.

`SeatLink` holds the session's owner client (the owner may move and read every seat that no
other connection holds: no seat key is needed), the env's description, and each seat's
spaces and conversions, rebuilt from its schemas by `ecotone.gym.spaces` (an env served by
the `pettingzoo:` bridge carries the exact spaces; a native env's are derived field by
field). A seat's view becomes PettingZoo's per-agent values here: its observation (a numpy
value of the seat's space), reward, termination (`done`), truncation and info (the view's
`metadata`, and the bridge's `info`).

Seeds follow PettingZoo (and Gymnasium): `reset(seed=s)` seeds the episode, and a reset
without a seed goes on reproducibly from it (for a native env, the seed sent is drawn from
the link's own generator; an env served by the bridge continues its own). Reset `options`
are the env's reset options; options a native env does not take are dropped, with a warning
once, as PettingZoo envs ignore options they do not know.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ecotone.client.errors import ServerError
from ecotone.client.results import SeatResult
from ecotone.client.sync import EnvClient
from ecotone.gym.spaces import RESERVED_RESET_OPTIONS, _nodes
from ecotone.specs import EnvInfo


class Agent(NamedTuple):
    """One agent's values, from its seat's view (PettingZoo's per-agent dicts' items)."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Moved(NamedTuple):
    """What moves (and reads) came to: each seat's values, and the seats the episode waits
    for now."""

    agents: dict[str, Agent]
    acting: list[str]


class SeatLink:
    """The owner's session of a multi-agent env, and each seat's spaces (see the module).

    Args:
        client: The session's client (its owner's).
        info: The env's description.
        reset_options: Reset options every reset sends, besides those `reset` is given.
    """

    def __init__(
        self, client: EnvClient[Any, Any], info: EnvInfo, reset_options: Mapping[str, Any]
    ) -> None:
        if not info.seats:
            raise ValueError(
                f"env {info.name!r} has no seats: it is a single-agent env (use ecotone.gym)"
            )
        self.client = client
        self.info = info
        self.seats: list[str] = list(info.seats)
        self.simultaneous = bool(info.simultaneous)
        self.reset_options = dict(reset_options)
        clash = sorted(RESERVED_RESET_OPTIONS & set(self.reset_options))
        if clash:
            raise ValueError(f"reset options may not be named {', '.join(clash)}")
        self.actions: dict[str, Any] = {}
        self.observations: dict[str, Any] = {}
        self.bridged: dict[str, bool] = {}
        for seat in self.seats:
            schemas = info.seat_schemas.get(seat, {})
            seat_info = EnvInfo(
                name=f"{info.name} ({seat})",
                action_schema=schemas.get("action", info.action_schema),
                observation_schema=schemas.get("observation", info.observation_schema),
            )
            action, observation, bridged = _nodes(seat_info)
            self.actions[seat], self.observations[seat] = action, observation
            self.bridged[seat] = bridged
        self.np_random = np.random.default_rng()
        self._refused: set[str] = set()
        """Reset options the env refused (dropped from then on)."""

    # --- the episode ----------------------------------------------------------------------

    def reset(self, seed: int | None, options: Mapping[str, Any] | None) -> None:
        """Start an episode on the server."""
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        elif not any(self.bridged.values()):
            seed = int(self.np_random.integers(2**31))
        given = dict(options or {})
        clash = sorted(RESERVED_RESET_OPTIONS & set(given))
        if clash:
            raise ValueError(f"reset options may not be named {', '.join(clash)}")
        sent = {k: v for k, v in {**self.reset_options, **given}.items() if k not in self._refused}
        try:
            self.client.reset(seed=seed, **sent)
        except ServerError as exc:
            unknown = (
                set(exc.details.get("unknown", ())) if exc.code == "invalid_argument" else set()
            )
            if not unknown or unknown & set(self.reset_options) or not unknown <= set(given):
                raise
            warnings.warn(
                f"env {self.info.name!r} takes no reset option {', '.join(sorted(unknown))}: "
                "ignored from now on",
                stacklevel=3,
            )
            self._refused |= unknown
            self.client.reset(seed=seed, **{k: v for k, v in sent.items() if k not in unknown})

    def move(self, plays: Mapping[str, Any], observe: Sequence[str] = ()) -> Moved:
        """Move seats (`plays`: each seat's action, a value of its action space) and read the
        views of `observe` after the moves, in one round trip."""
        wire = {seat: self.actions[seat].to_wire(action) for seat, action in plays.items()}
        views = self.client.play_round(wire, observe=observe)
        agents = {seat: self._agent(seat, view) for seat, view in views.items()}
        last = next(reversed(views.values()), None)
        return Moved(agents, [] if last is None else list(last.acting))

    def _agent(self, seat: str, view: SeatResult[Any]) -> Agent:
        data: Mapping[str, Any] = view.result.observation
        info = dict(data.get("metadata") or {})
        if self.bridged[seat]:
            info.update(data.get("info") or {})
        return Agent(
            observation=self.observations[seat].from_wire(data),
            reward=float(view.result.reward or 0.0),
            terminated=bool(view.result.done),
            truncated=bool(view.result.truncated),
            info=info,
        )

    def close(self) -> None:
        """Close the session (and its connection). Idempotent."""
        self.client.close()


__all__ = ["Agent", "Moved", "SeatLink"]
