"""Drive an OpenEnv server through verifiers' own OpenEnv integration, with a
scripted player instead of a model. Runs in the verifiers venv (.venv-vf); used by
tests/test_openenv_consumers.py.

    python vf_driver.py SERVER_URL [--invalid-action observation|error] [--harness null]

What runs is verifiers' stock code path (verifiers 0.4.0, `verifiers.v1`):
`OpenEnvTaskset` (taskset id "openenv") -> `OpenEnvEnv.run()` -> openenv's
`GenericEnvClient` over `/ws` (+ `GET /schema`) -> `Agent.interaction()` ->
the rollout's interception server -> the model client. Two local stand-ins
replace what would need a real model:

* the player's harness, `ScriptedPlayerHarness`: verifiers' `Harness.launch()`
  contract explicitly allows an in-process loop as long as every model call
  goes through the interception endpoint; it sends the conversation there as one
  chat-completions request (the stock `null`/`bash` harnesses do the same from a
  uv-installed script, which needs uv on PATH and downloads its deps from PyPI
  on first use: `--harness null` runs that stock harness instead);
* the "model": a loopback HTTP server speaking OpenAI's chat-completions API,
  whose replies come from a script chosen by the request's model name.

The only other hook is a read-only spy on `EnvClient._send_and_receive`, which
records the WebSocket messages exchanged with the server for the summary; it
does not change what is sent or returned.

Scenarios, both on reset `{"task": "crane"}` (verifiers' `resets` config):
* clean:  '{"guess": "slate"}', then "crane" (a bare word)
* invalid: "zzzzz" (not in the word list), '{"guess": "slate"}', then a fenced
  JSON '{"guess": "crane"}'.
  With a server in `ECOTONE_OPENENV_INVALID_ACTION=observation` mode the invalid
  guess comes back as an observation and the episode goes on to solve the word;
  with the default (OpenEnv's VALIDATION_ERROR), openenv's client raises and
  verifiers fails the episode: `--invalid-action error` expects exactly that.

Prints a JSON summary on stdout; exits 0 only when every expectation holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
import types
from typing import Any, cast

import httpx
import verifiers
import verifiers.v1 as vf
from aiohttp import web
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

# --- the scripted "model" ------------------------------------------------------

SCRIPTS: dict[str, list[str]] = {
    "scripted-clean": ['{"guess": "slate"}', "crane"],
    "scripted-invalid": [
        "zzzzz",
        '{"guess": "slate"}',
        '```json\n{"guess": "crane"}\n```',
    ],
}


class ScriptedModel:
    """A chat-completions endpoint on loopback. The reply is a pure function of
    the request: the script named by `model`, at the index given by how many
    assistant messages the conversation already holds."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        script = SCRIPTS.get(body.get("model", ""))
        if script is None:
            return web.json_response(
                {"error": {"message": f"unknown model {body.get('model')!r}"}},
                status=404,
            )
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if turn >= len(script):
            return web.json_response(
                {"error": {"message": f"script {body['model']} has no turn {turn}"}},
                status=400,
            )
        reply = script[turn]
        head = {
            "id": f"chatcmpl-scripted-{len(self.requests)}",
            "created": int(time.time()),
            "model": body["model"],
        }
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            return web.json_response(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )
        # The stock chat program (`--harness null`) streams: answer as SSE.
        chunk = {**head, "object": "chat.completion.chunk"}
        events = [
            {
                **chunk,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": reply},
                        "finish_reason": None,
                    }
                ],
            },
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return web.Response(text=text, content_type="text/event-stream")

    async def __aenter__(self) -> ScriptedModel:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = cast(Any, site)._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


# --- the player's harness: one model call per segment, in-process --------------


class ScriptedPlayerHarnessConfig(vf.HarnessConfig):
    pass


class ScriptedPlayerHarness(vf.Harness[ScriptedPlayerHarnessConfig]):
    """A tool-less chat turn run in-process (see `Harness.launch`'s docstring):
    the conversation so far goes to the interception endpoint, which records the
    turn on the trace and forwards it to the run's model client."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # resume() relaunches on the accreted conversation
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):  # noqa: PLR0913 (verifiers calls it so)
        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages.extend(message_to_wire(m) for m in prompt)
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{endpoint}/chat/completions",
                headers={"Authorization": f"Bearer {secret}"},
                json={"model": ctx.model, "messages": messages},
            )
        if response.status_code != 200:
            failed = f"model call failed: {response.status_code} {response.text}"
            return ProgramResult(1, "", failed)
        reply = response.json()["choices"][0]["message"]["content"] or ""
        return ProgramResult(0, reply, "")


HARNESS_ID = "vf_scripted_player"
_module = types.ModuleType(HARNESS_ID)
_module.__dict__["ScriptedPlayerHarness"] = ScriptedPlayerHarness
_module.__dict__["__all__"] = ["ScriptedPlayerHarness"]
sys.modules[HARNESS_ID] = _module  # verifiers resolves a harness id by import


# --- a read-only spy on the OpenEnv wire ---------------------------------------

WIRE: list[dict[str, Any]] = []


def spy_on_openenv_wire() -> None:
    from openenv.core.env_client import EnvClient

    original = EnvClient._send_and_receive

    async def recorded(self, message):
        entry: dict[str, Any] = {"sent": message}
        WIRE.append(entry)
        try:
            entry["received"] = await original(self, message)
        except Exception as e:  # recorded, then re-raised unchanged
            entry["raised"] = f"{type(e).__name__}: {e}"
            raise
        return entry["received"]

    EnvClient._send_and_receive = recorded


# --- the run ---------------------------------------------------------------------


def close_to(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, abs_tol=1e-9)


def summarize(name: str, episode, wire: list[dict]) -> dict[str, Any]:
    trace = episode.traces[0] if episode.traces else None
    turns = []
    for entry in wire:
        sent = entry["sent"]
        if sent.get("type") not in ("reset", "step"):
            continue
        data = (entry.get("received") or {}).get("data", {})
        obs = data.get("observation", {})
        turns.append(
            {
                "sent": sent,
                "reward": data.get("reward"),
                "done": data.get("done"),
                **({"raised": entry["raised"]} if "raised" in entry else {}),
                "observation": {
                    k: obs[k]
                    for k in ("guess", "feedback", "remaining", "solved", "error", "field")
                    if k in obs
                },
            }
        )
    return {
        "scenario": name,
        "episode_ok": episode.ok,
        "episode_errors": [f"{e.type}: {e.message}" for e in episode.errors],
        "model_turns": trace.num_turns if trace else 0,
        "model_replies": [m.content for m in trace.assistant_messages] if trace else [],
        "stop_condition": trace.stop_condition if trace else None,
        "rewards": {k: (r.score if r else None) for k, r in trace.rewards.items()} if trace else {},
        "final_reward": trace.reward if trace else None,
        "env_turns": turns,
    }


def check(summary: dict[str, Any], invalid_mode: str) -> list[str]:
    """The expectations, as failures (empty = pass)."""
    problems: list[str] = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            problems.append(f"{summary['scenario']}: {what}")

    steps = [t for t in summary["env_turns"] if t["sent"]["type"] == "step"]
    resets = [t for t in summary["env_turns"] if t["sent"]["type"] == "reset"]
    expect(
        len(resets) == 1 and resets[0]["sent"]["data"] == {"task": "crane"},
        f"one reset with data {{'task': 'crane'}}, got {[r['sent'] for r in resets]}",
    )
    fails_here = summary["scenario"] == "invalid" and invalid_mode == "error"
    if fails_here:
        expect(not summary["episode_ok"], "the episode should fail on VALIDATION_ERROR")
        expect(
            any("VALIDATION_ERROR" in e for e in summary["episode_errors"]),
            f"VALIDATION_ERROR in episode errors, got {summary['episode_errors']}",
        )
        expect(
            [s["sent"]["data"] for s in steps] == [{"guess": "zzzzz"}],
            f"only the invalid step sent, got {[s['sent'] for s in steps]}",
        )
        expect(
            "openenv_reward" not in summary["rewards"], "no openenv_reward recorded on a failed run"
        )
        return problems
    if summary["scenario"] == "clean":
        guesses, rewards = ["slate", "crane"], [0.2, 1.5]
    else:
        guesses, rewards = ["zzzzz", "slate", "crane"], [0.0, 0.2, 1.5]
    expect(summary["episode_ok"], f"episode ok, errors: {summary['episode_errors']}")
    expect(
        [s["sent"]["data"] for s in steps] == [{"guess": g} for g in guesses],
        f"steps {guesses}, got {[s['sent']['data'] for s in steps]}",
    )
    expect(
        len(steps) == len(rewards)
        and all(close_to(s["reward"], r) for s, r in zip(steps, rewards, strict=True)),
        f"step rewards {rewards}, got {[s['reward'] for s in steps]}",
    )
    expect(
        bool(steps)
        and steps[-1]["done"] is True
        and steps[-1]["observation"].get("solved") is True,
        "the last step solves the word (done, solved)",
    )
    if summary["scenario"] == "invalid" and steps:
        first = steps[0]["observation"]
        expect(
            first.get("error", "").startswith("invalid action"),
            f"the invalid guess comes back as an error observation, got {first}",
        )
    expect(
        summary["model_turns"] == len(guesses),
        f"{len(guesses)} model turns, got {summary['model_turns']}",
    )
    expect(
        close_to(summary["rewards"].get("openenv_reward"), sum(rewards)),
        f"openenv_reward {sum(rewards)}, got {summary['rewards']}",
    )
    return problems


async def main(server_url: str, invalid_mode: str, harness_id: str) -> int:
    spy_on_openenv_wire()
    env_config = vf.resolve_env_config(
        {
            "taskset": {"id": "openenv", "base_url": server_url, "resets": [{"task": "crane"}]},
            "player": {"harness": {"id": harness_id}, "runtime": SubprocessConfig().model_dump()},
        }
    )
    env = vf.load_environment(env_config)
    (task,) = list(env.taskset)
    summaries: list[dict[str, Any]] = []
    started = time.monotonic()
    async with ScriptedModel() as model, env.serving():
        client = vf.EvalClientConfig(base_url=model.base_url, api_key_var="VF_SCRIPTED_API_KEY")
        for name in ("clean", "invalid"):
            ctx = vf.ModelContext(model=f"scripted-{name}", client=client)
            first = len(WIRE)
            (slot,) = env.slots(task, 1)
            episode = await env.run_slot(slot, ctx)
            summaries.append(summarize(name, episode, WIRE[first:]))
    problems = [p for s in summaries for p in check(s, invalid_mode)]
    print(
        json.dumps(
            {
                "verifiers": verifiers.__version__,
                "server": server_url,
                "invalid_action_mode": invalid_mode,
                "harness": harness_id,
                "seconds": round(time.monotonic() - started, 2),
                "scenarios": summaries,
                "ok": not problems,
                "problems": problems,
            },
            indent=2,
        )
    )
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
    parser.add_argument(
        "--harness",
        default=HARNESS_ID,
        help=f"the player's harness id (default {HARNESS_ID}, in-process; 'null' is "
        "verifiers' stock chat program, which needs uv on PATH and downloads its deps)",
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.server_url.rstrip("/"), args.invalid_action, args.harness)))
