"""`ecotone.pettingzoo.parallel_env(url)`: a multi-agent env on a server as a PettingZoo
`ParallelEnv`.

One process drives every seat through the session's owner (`SeatLink`). `step(actions)`:

* A simultaneous env (`ecotone.SimultaneousEnvironment`) plays one round with every live
  agent's action (one round trip); each agent's observation, reward, termination,
  truncation and info are its seat's view after it. An action must be given for every live
  agent (`ValueError` otherwise: the round would wait for it).
* A turn-based env takes the action of the agent whose turn it is and ignores the others'
  (as PettingZoo's `turn_based_aec_to_parallel`); every agent's values come back, its reward
  how much its reward since its last move grew.

Agents done (terminated or truncated) leave `agents` after the step that ended them; one the
server waits for no more though not done is reported truncated.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import ParallelEnv

from ecotone.pettingzoo.link import Moved, SeatLink

Dicts = tuple[
    dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]
]


class RemoteParallelEnv(ParallelEnv[str, Any, Any]):
    """A PettingZoo parallel env backed by one ecotone session. Build it with
    `ecotone.pettingzoo.parallel_env(url)`.

    Args:
        link: The session, and each seat's spaces.
    """

    def __init__(self, link: SeatLink) -> None:
        self.link = link
        self.metadata = {"render_modes": [], "name": link.info.name}
        self.render_mode = None
        self.possible_agents: list[str] = list(link.seats)
        self.agents: list[str] = []
        self._acting: list[str] = []
        self._since: dict[str, float] = {}
        """A turn-based env's reward of each agent since its last move, as last seen."""

    def observation_space(self, agent: str) -> Any:
        return self.link.observations[agent].space

    def action_space(self, agent: str) -> Any:
        return self.link.actions[agent].space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self.link.reset(seed, options)
        moved = self.link.move({}, observe=self.possible_agents)
        self.agents = list(self.possible_agents)
        self._acting = moved.acting
        self._since = dict.fromkeys(self.agents, 0.0)
        return (
            {a: moved.agents[a].observation for a in self.agents},
            {a: moved.agents[a].info for a in self.agents},
        )

    def step(self, actions: dict[str, Any]) -> Dicts:
        if self.link.simultaneous:
            missing = [a for a in self._acting if a not in actions]
            if missing:
                raise ValueError(f"no action for {', '.join(missing)}, who move in this round")
            moved = self.link.move({a: actions[a] for a in self._acting})
            rewards = {a: agent.reward for a, agent in moved.agents.items()}
        else:
            turn = self._acting[0] if self._acting else None
            if turn is not None and turn not in actions:
                raise ValueError(f"no action for {turn}, whose turn it is")
            plays = {} if turn is None else {turn: actions[turn]}
            moved = self.link.move(plays, observe=[a for a in self.agents if a != turn])
            if turn is not None:
                self._since[turn] = 0.0
            rewards = {
                a: agent.reward - self._since.get(a, 0.0) for a, agent in moved.agents.items()
            }
            self._since.update({a: agent.reward for a, agent in moved.agents.items()})
        return self._ended(moved, rewards)

    def _ended(self, moved: Moved, rewards: dict[str, float]) -> Dicts:
        """The step's dicts for the agents that were live; those done leave `agents`."""
        self._acting = moved.acting
        observations, terminations, truncations, infos = {}, {}, {}, {}
        for agent in self.agents:
            values = moved.agents[agent]
            observations[agent] = values.observation
            terminations[agent] = values.terminated
            gone = agent not in moved.acting if self.link.simultaneous else not moved.acting
            truncations[agent] = values.truncated or (gone and not values.terminated)
            infos[agent] = values.info
        rewards = {a: float(rewards.get(a, 0.0)) for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Close the session (and its connection). Idempotent."""
        self.link.close()

    def __repr__(self) -> str:
        return f"<RemoteParallelEnv {self.link.info.name} url={self.link.client.connection.url}>"


__all__ = ["RemoteParallelEnv"]
