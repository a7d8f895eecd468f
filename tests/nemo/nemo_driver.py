"""Run a NeMo Gym rollout through NeMo Gym's OpenEnv resources server against a live
OpenEnv server, with a scripted model.

    python nemo_driver.py SERVER_URL [--invalid-action observation|error]

Runs in the NeMo Gym venv (.venv-nemo); used by tests/test_openenv_consumers.py.

NeMo Gym 0.4.0's OpenEnv integration (`resources_servers/openenv/app.py`,
`OpenEnvResourcesServer`) does not speak to an OpenEnv *server*: it imports an
OpenEnv `Environment` class by dotted path (`env_class`) and calls its
`reset()` / `step()` in-process. To point it at a server, this script hands it
`RemoteOpenEnvEnvironment`, a shim Environment that forwards each call over
OpenEnv's `/ws` with openenv's own `GenericEnvClient` (openenv 0.10). So the
OpenEnv wire is spoken by openenv's client; NeMo Gym contributes the rollout
loop, the session handling, error surfacing and reward accumulation.

What runs, all on loopback in this process:
* NeMo Gym's `OpenEnvResourcesServer` (real, unmodified): /seed_session,
  /step, /verify;
* NeMo Gym's `SimpleAgent` (real, unmodified): /run -> the model's
  /v1/responses -> tool calls posted to the resources server -> /verify;
* a scripted "model" speaking the OpenAI Responses API (the only stand-in),
  which answers with `step` function calls: "zzzzz" (not in the word list),
  "slate", "crane", then a closing message.

The reset arguments come from the resources server's config
(`reset_kwargs={"task": "crane"}`): the adapter has no per-row reset.
Prints a JSON summary; exits 0 only when every expectation holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import sys
import time
import types
from importlib.metadata import version
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI, Request
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.server_utils import (
    GlobalAIOHTTPAsyncClientConfig,
    ServerClient,
    get_global_aiohttp_client,
    set_global_aiohttp_client,
)
from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict
from resources_servers.openenv.app import OpenEnvResourcesServer, OpenEnvResourcesServerConfig
from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig

# --- the shim: an OpenEnv Environment that lives on a server ----------------------


class RemoteObservation(BaseModel):
    """What the adapter reads off an observation: `reward`, `done`, `model_dump()`."""

    model_config = ConfigDict(extra="allow")
    reward: float | None = None
    done: bool = False


class WordleAction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    guess: str


class RemoteOpenEnvEnvironment:
    """Constructed with no arguments (the adapter calls `env_class()`), so the
    server URL is a class attribute set before the resources server starts."""

    base_url: str = ""

    def __init__(self) -> None:
        from openenv import GenericEnvClient

        self._client = GenericEnvClient(base_url=self.base_url).sync()
        self._client.connect()

    @staticmethod
    def _observation(result: Any) -> RemoteObservation:
        return RemoteObservation(**result.observation, reward=result.reward, done=result.done)

    def reset(self, **kwargs: Any) -> RemoteObservation:
        return self._observation(self._client.reset(**kwargs))

    def step(self, action: BaseModel) -> RemoteObservation:
        return self._observation(self._client.step(action.model_dump()))

    def close(self) -> None:
        self._client.close()


SHIM_MODULE = "ecotone_openenv_shim"
_shim = types.ModuleType(SHIM_MODULE)
_shim.__dict__["RemoteOpenEnvEnvironment"] = RemoteOpenEnvEnvironment
_shim.__dict__["WordleAction"] = WordleAction
sys.modules[SHIM_MODULE] = _shim  # the adapter resolves env_class/action_class by import

# --- the scripted model (OpenAI Responses API) --------------------------------------

GUESSES = ["zzzzz", "slate", "crane"]
STEP_TOOL = {
    "type": "function",
    "name": "step",
    "description": "Make one Wordle guess.",
    "parameters": {
        "type": "object",
        "properties": {"guess": {"type": "string", "description": "A five-letter word."}},
        "required": ["guess"],
        "additionalProperties": False,
    },
    "strict": True,
}


def scripted_model_app(seen: list[dict[str, Any]]) -> FastAPI:
    """Turn n (= tool outputs already in the input) calls `step` with GUESSES[n];
    after the last one it answers with a message, which ends SimpleAgent's loop."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request) -> dict[str, Any]:
        body = await request.json()
        seen.append(body)
        outputs = [
            i
            for i in body.get("input", [])
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        n = len(outputs)
        if n < len(GUESSES):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": "step",
                "arguments": json.dumps({"guess": GUESSES[n]}),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": "msg_final",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Solved.", "annotations": []}],
            }
        response = {
            "id": f"resp_{len(seen)}",
            "object": "response",
            "created_at": time.time(),
            "model": body.get("model", "scripted"),
            "output": [item],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
        }
        return NeMoGymResponse.model_validate(response).model_dump(mode="json")

    return app


# --- wiring ----------------------------------------------------------------------


def bound_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def nemo_app(server: Any) -> FastAPI:
    """The app as NeMo Gym's `run_webserver` builds it (minus Ray, ulimit, log prefixes)."""
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    return app


def close_to(a: Any, b: float) -> bool:
    return isinstance(a, (int, float)) and math.isclose(a, b, abs_tol=1e-9)


async def main(server_url: str, invalid_mode: str) -> int:
    RemoteOpenEnvEnvironment.base_url = server_url
    socks = {name: bound_socket() for name in ("wordle_resources", "wordle_agent", "policy_model")}
    port = {name: s.getsockname()[1] for name, s in socks.items()}
    global_config = OmegaConf.create(
        {
            "wordle_resources": {
                "resources_servers": {
                    "openenv": {"host": "127.0.0.1", "port": port["wordle_resources"]}
                }
            },
            "wordle_agent": {
                "responses_api_agents": {
                    "simple_agent": {"host": "127.0.0.1", "port": port["wordle_agent"]}
                }
            },
            "policy_model": {
                "responses_api_models": {
                    "scripted": {"host": "127.0.0.1", "port": port["policy_model"]}
                }
            },
        }
    )
    set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
    client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
        global_config_dict=global_config,
    )
    resources = OpenEnvResourcesServer(
        config=OpenEnvResourcesServerConfig(
            host="127.0.0.1",
            port=port["wordle_resources"],
            entrypoint="app.py",
            name="wordle_resources",
            env_class=f"{SHIM_MODULE}.RemoteOpenEnvEnvironment",
            action_class=f"{SHIM_MODULE}.WordleAction",
            reset_kwargs={"task": "crane"},
        ),
        server_client=client,
    )
    agent = SimpleAgent(
        config=SimpleAgentConfig(
            host="127.0.0.1",
            port=port["wordle_agent"],
            entrypoint="app.py",
            name="wordle_agent",
            resources_server={"type": "resources_servers", "name": "wordle_resources"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
            max_steps=10,
        ),
        server_client=client,
    )
    seen: list[dict[str, Any]] = []
    apps = {
        "wordle_resources": nemo_app(resources),
        "wordle_agent": nemo_app(agent),
        "policy_model": scripted_model_app(seen),
    }
    servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning")) for app in apps.values()]
    tasks = [
        asyncio.create_task(srv.serve(sockets=[socks[name]]))
        for srv, name in zip(servers, apps, strict=True)
    ]
    started = time.monotonic()
    try:
        while not all(s.started for s in servers):  # noqa: ASYNC110 - uvicorn has only this flag
            await asyncio.sleep(0.05)
        row = {
            "responses_create_params": {
                "input": [
                    {"role": "developer", "content": "Play Wordle with the `step` tool."},
                    {"role": "user", "content": "Find the secret five-letter word."},
                ],
                "tools": [STEP_TOOL],
            }
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port['wordle_agent']}/run", json=row) as reply:
                status = reply.status
                result = await reply.json(content_type=None)
    finally:
        for srv in servers:
            srv.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await get_global_aiohttp_client().close()
    elapsed = round(time.monotonic() - started, 2)

    output = result.get("response", {}).get("output", []) if isinstance(result, dict) else []
    calls = [json.loads(o["arguments"]) for o in output if o.get("type") == "function_call"]
    tool_outputs = [
        json.loads(o["output"]) for o in output if o.get("type") == "function_call_output"
    ]
    turns = [
        {
            "called": call,
            "returned": {
                k: out.get(k)
                for k in (
                    "reward",
                    "done",
                    "guess",
                    "feedback",
                    "remaining",
                    "solved",
                    "error",
                    "field",
                    "result",
                )
                if k in out
            },
        }
        for call, out in zip(calls, tool_outputs, strict=False)  # the adapter may stop early
    ]
    problems: list[str] = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            problems.append(what)

    expect(status == 200, f"agent /run answered {status}: {str(result)[:500]}")
    expect(calls == [{"guess": g} for g in GUESSES], f"step calls {GUESSES}, got {calls}")
    expect(len(tool_outputs) == 3, f"three tool outputs, got {len(tool_outputs)}")
    if len(tool_outputs) == 3:
        first = tool_outputs[0]
        if invalid_mode == "observation":
            expect(
                str(first.get("error", "")).startswith("invalid action")
                and close_to(first.get("reward"), 0.0),
                f"invalid guess as an error observation with reward 0.0, got {first}",
            )
        else:
            expect(
                "VALIDATION_ERROR" in str(first.get("error"))
                and first.get("result", "missing") is None,
                f"invalid guess as the adapter's {{'error': ..., 'result': None}}, got {first}",
            )
        expect(
            close_to(tool_outputs[1].get("reward"), 0.2)
            and tool_outputs[1].get("feedback") == "..G.G",
            f"slate scores 0.2 with ..G.G, got {tool_outputs[1]}",
        )
        last = tool_outputs[2]
        expect(
            close_to(last.get("reward"), 1.5) and last.get("solved") is True and last.get("done"),
            f"crane solves it for 1.5, got {last}",
        )
    reward = result.get("reward") if isinstance(result, dict) else None
    expect(close_to(reward, 1.7), f"verify reward 1.7, got {reward}")
    summary = {
        "nemo_gym": version("nemo-gym"),
        "openenv": version("openenv"),
        "server": server_url,
        "invalid_action_mode": invalid_mode,
        "seconds": elapsed,
        "model_calls": len(seen),
        "turns": turns,
        "final_message": next(
            (
                o["content"][0]["text"]
                for o in reversed(output)
                if o.get("type") == "message" and o.get("content")
            ),
            None,
        ),
        "verify_reward": reward,
        "ok": not problems,
        "problems": problems,
    }
    print(json.dumps(summary, indent=2))
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server_url")
    parser.add_argument(
        "--invalid-action",
        choices=("observation", "error"),
        default="observation",
        help="how the server answers an invalid action (ECOTONE_OPENENV_INVALID_ACTION)",
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.server_url.rstrip("/"), args.invalid_action)))
