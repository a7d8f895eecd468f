"""An OpenEnv 0.10.0 echo environment, served by OpenEnv's own server (create_fastapi_app
under uvicorn) for the interop tests. Run it with the openenv venv's python:

    python echo_server.py

It binds 127.0.0.1 on a free port, prints `PORT <n>` on stdout and serves until killed.

Action `{"message": str}`; observation `{"echoed_message": str, "message_length": int}`;
reward = the message's length (an int on the wire); an empty message ends the episode.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

import uvicorn
from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)


class EchoAction(Action):
    message: str


class EchoObservation(Observation):
    echoed_message: str = ""
    message_length: int = 0


class EchoState(State):
    last_message: str = ""


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # required for max_concurrent_envs > 1

    def __init__(self) -> None:
        super().__init__()
        self._state = EchoState(episode_id=str(uuid.uuid4()))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EchoObservation:
        self._state = EchoState(episode_id=episode_id or str(uuid.uuid4()))
        return EchoObservation()

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> EchoObservation:
        self._state.step_count += 1
        self._state.last_message = action.message
        return EchoObservation(
            echoed_message=action.message,
            message_length=len(action.message),
            reward=len(action.message),
            done=action.message == "",
        )

    @property
    def state(self) -> EchoState:
        return self._state


app = create_fastapi_app(
    EchoEnvironment,
    EchoAction,
    EchoObservation,
    max_concurrent_envs=4,
    env_name="echo",
    state_cls=EchoState,
)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
