"""Engine requests for the OpenEnv profile: what its `/ws` peer and its HTTP routes send."""

from __future__ import annotations

import itertools
from typing import Any, Final

from ecotone.compat.openenv.mapping import to_openenv_observation
from ecotone.kernel import Engine, Owner
from ecotone.kernel.tasks import TASK_OPTIONS
from ecotone.server.runner import Runner
from ecotone.specs import (
    Close,
    Error,
    JsonCodec,
    ObservationFrame,
    Open,
    Opened,
    Reset,
    Response,
    StateFrame,
)

ids: Final = itertools.count(1)
"""Request ids of the profile's frames (each `ask` waits for its own answer: any will do)."""


class Bridge:
    """Engine requests for the OpenEnv profile, on behalf of one session owner."""

    def __init__(self, runner: Runner, owner: Owner) -> None:
        self.runner = runner
        self.engine: Engine = runner.engine
        self.owner = owner
        self.codec = JsonCodec()

    async def call(self, frame: Any) -> Response:
        response: Response = await self.runner.ask(self.owner, self.codec, frame)
        return response

    async def open(self) -> Opened | Error:
        response = await self.call(Open(id=next(ids)))
        assert isinstance(response, Opened | Error)
        return response

    async def close(self, session: str) -> Response:
        return await self.call(Close(id=next(ids), session=session))

    def reset_frame(self, session: str, data: dict[str, Any]) -> Reset:
        data = dict(data)
        seed = data.pop("seed", None)
        episode_id = data.pop("episode_id", None)
        spec = self.engine.envs[self.engine.default_env]
        accepted = spec.reset_options
        if accepted is not None and spec.tasks is not None:
            accepted = accepted | TASK_OPTIONS  # reset(split=, index=) picks a task
        # As OpenEnv does: keys the env's reset() does not take are dropped, not refused.
        options = {k: v for k, v in data.items() if accepted is None or k in accepted}
        return Reset(
            id=next(ids), session=session, seed=seed, episode_id=episode_id, options=options
        )

    def observation(self, response: ObservationFrame, *, http: bool) -> dict[str, Any]:
        obs = self.codec.decode_as(response.observation, dict[str, Any])
        return to_openenv_observation(obs, http=http)

    def state(self, response: StateFrame) -> Any:
        return self.codec.decode_as(response.state, dict[str, Any])
