"""`ecotone.pettingzoo.env(url)`: a multi-agent env on a server as a PettingZoo `AECEnv`.

One process drives every seat through the session's owner (`SeatLink`). The AEC rules are
PettingZoo's:

* `agent_selection` is whose turn it is on the server; a seat that is done (terminated or
  truncated) is selected first, once, for its dead step (`step(None)`), which removes it
  from `agents` and the per-agent dicts here without reaching the server.
* A turn-based env's view reward is the seat's reward since its last move, which is
  PettingZoo's cumulative reward (`last()`); `rewards` is how much each agent's grew in the
  last step. A move and the other seats' views after it take one round trip.
* A simultaneous env (`ecotone.SimultaneousEnvironment`) goes as PettingZoo's
  `parallel_to_aec` does: each live agent's action is kept until the last one of the round
  acts, then the round is played on the server (one round trip) and `rewards` and the
  cumulative rewards are the round's.

An action the server refuses (outside the action mask, say) raises
`ecotone.InvalidActionError`; nothing changes.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv

from ecotone.pettingzoo.link import Agent, SeatLink


class RemoteAECEnv(AECEnv[str, Any, Any]):
    """A PettingZoo AEC env backed by one ecotone session. Build it with
    `ecotone.pettingzoo.env(url)`.

    Args:
        link: The session, and each seat's spaces.
    """

    def __init__(self, link: SeatLink) -> None:
        super().__init__()
        self.link = link
        self.metadata = {
            "render_modes": [],
            "name": link.info.name,
            "is_parallelizable": link.simultaneous,
        }
        self.render_mode = None
        self.possible_agents: list[str] = list(link.seats)
        self.agents: list[str] = []
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        self._observations: dict[str, Any] = {}
        self._acting: list[str] = []
        self._round: dict[str, Any] = {}
        self.agent_selection: str = ""

    def observation_space(self, agent: str) -> Any:
        return self.link.observations[agent].space

    def action_space(self, agent: str) -> Any:
        return self.link.actions[agent].space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.link.reset(seed, options)
        moved = self.link.move({}, observe=self.possible_agents)
        self.agents = list(self.possible_agents)
        self._load(moved.agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self._acting = moved.acting
        self._round = {}
        self._select()

    def _load(self, agents: dict[str, Agent]) -> None:
        for seat, agent in agents.items():
            if seat in self.agents:
                self._observations[seat] = agent.observation
                self.terminations[seat] = agent.terminated
                self.truncations[seat] = agent.truncated
                self.infos[seat] = agent.info

    def _select(self) -> None:
        """The next agent: a done one first (its dead step), else whose move the server
        waits for. Agents the server waits for no more, though not done, are truncated (the
        episode ended without them: a seat lost, say)."""
        waiting = [a for a in self._acting if a in self.agents and a not in self._round]
        if not self._round:
            for agent in self.agents:
                gone = agent not in self._acting if self.link.simultaneous else not self._acting
                if gone and not self.terminations[agent]:
                    self.truncations[agent] = True
        dead = [a for a in self.agents if self.terminations[a] or self.truncations[a]]
        if dead:
            self.agent_selection = dead[0]
        elif waiting:
            self.agent_selection = waiting[0]

    def observe(self, agent: str) -> Any:
        return self._observations[agent]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._dead_step(agent, action)
        elif self.link.simultaneous:
            self._round_step(agent, action)
        else:
            self._turn_step(agent, action)

    def _dead_step(self, agent: str, action: Any) -> None:
        if action is not None:
            raise ValueError(f"{agent} is done: its only action is None (a dead step)")
        self.agents.remove(agent)
        for values in (
            self.rewards,
            self._cumulative_rewards,
            self.terminations,
            self.truncations,
            self.infos,
        ):
            values.pop(agent, None)
        self._round.pop(agent, None)
        self._clear_rewards()
        self._select()

    def _turn_step(self, agent: str, action: Any) -> None:
        others = [a for a in self.agents if a != agent]
        moved = self.link.move({agent: action}, observe=others)
        self._cumulative_rewards[agent] = 0.0
        for seat in self.agents:
            reward = moved.agents[seat].reward
            self.rewards[seat] = reward - self._cumulative_rewards[seat]
            self._cumulative_rewards[seat] = reward
        self._load(moved.agents)
        self._acting = moved.acting
        self._select()

    def _round_step(self, agent: str, action: Any) -> None:
        if not self._round:
            self._clear_rewards()
        self._round[agent] = action
        waiting = [a for a in self._acting if a in self.agents and a not in self._round]
        if waiting:
            self.agent_selection = waiting[0]
            return
        plays, self._round = self._round, {}
        moved = self.link.move(plays)
        self.rewards = {
            a: moved.agents[a].reward if a in moved.agents else 0.0 for a in self.agents
        }
        self._cumulative_rewards = dict(self.rewards)
        self._load(moved.agents)
        self._acting = moved.acting
        self._select()

    def close(self) -> None:
        """Close the session (and its connection). Idempotent."""
        self.link.close()

    def __repr__(self) -> str:
        return f"<RemoteAECEnv {self.link.info.name} url={self.link.client.connection.url}>"


__all__ = ["RemoteAECEnv"]
