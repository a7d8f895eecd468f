"""OpenEnv counter environment server, the OpenEnv side of `make bench`.

Runs inside a separate virtualenv that has the pins of bench/requirements-openenv.txt
(openenv 0.10.0 + uvicorn); it is not importable from ecotone's own environment.

The environment mirrors ecotone's counter plugin:

* action ``{"delta": int}``
* observation ``{"count": int}`` plus OpenEnv's standard ``done``/``reward``/``metadata``
* reward = delta, never done
* state: ``episode_id``, ``step_count``, ``count``

It is written the way OpenEnv's own ``openenv init`` template writes an environment:
a synchronous ``reset``/``step`` (the server runs them on the session's executor thread),
served by ``create_fastapi_app`` under plain uvicorn. ``--async-step`` instead overrides
``step_async``/``reset_async`` so the server awaits them on the event loop, skipping the
thread hop: OpenEnv's best case, for reference only.

Usage: python bench/openenv_counter_server.py --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

# OpenEnv refuses more than one session unless the env class sets
# SUPPORTS_CONCURRENT_SESSIONS = True; the cap itself is create_fastapi_app's
# max_concurrent_envs (default 1).
DEFAULT_MAX_SESSIONS = 512


class CounterAction(Action):
    delta: int


class CounterObservation(Observation):
    count: int = 0


class CounterState(State):
    count: int = 0


class CounterEnvironment(Environment[CounterAction, CounterObservation, CounterState]):
    """Counter: adds ``delta`` to ``count``; reward = delta; never done."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState(episode_id=str(uuid.uuid4()), step_count=0, count=0)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        self._state = CounterState(
            episode_id=episode_id if episode_id is not None else str(uuid.uuid4()),
            step_count=0,
            count=0,
        )
        return CounterObservation(count=0, done=False, reward=0)

    def step(
        self,
        action: CounterAction,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        state = self._state
        count = state.count + action.delta
        # Rebuild rather than assign: State has validate_assignment=True, so each
        # attribute assignment would re-run validation; this keeps it to one.
        self._state = CounterState(
            episode_id=state.episode_id, step_count=state.step_count + 1, count=count
        )
        return CounterObservation(count=count, done=False, reward=action.delta)

    @property
    def state(self) -> CounterState:
        return self._state


class AsyncCounterEnvironment(CounterEnvironment):
    """Same env, but with native async methods: the server awaits them in-loop."""

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(
        self,
        action: CounterAction,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        return self.step(action, timeout_s=timeout_s, **kwargs)


def build_app(max_sessions: int, async_step: bool = False) -> Any:
    """The FastAPI app (typed Any: fastapi is not in ecotone's own venv)."""
    env_cls = AsyncCounterEnvironment if async_step else CounterEnvironment
    return create_fastapi_app(
        env_cls,
        CounterAction,
        CounterObservation,
        max_concurrent_envs=max_sessions,
        env_name="counter",
        state_cls=CounterState,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help="OpenEnv max_concurrent_envs (concurrent WebSocket sessions)",
    )
    parser.add_argument(
        "--async-step",
        action="store_true",
        help="override step_async/reset_async (no executor thread hop per step)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    app = build_app(args.max_sessions, async_step=args.async_step)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
