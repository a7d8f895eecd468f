"""Every env as an MCP server, checked with the official SDK's own clients: over stdio
(`ecotone mcp ENV`, a subprocess) and over streamable HTTP (`/mcp` of the http transport);
the lifecycle and every bad input as the MCP spec says; one env session per MCP session; an
orchestrator that keeps reset and reward while an agent acts over MCP."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import ecotone
from ecotone.kernel.config import AuthConfig, McpConfig
from tests.conftest import RunningServer, run_server, wait_until
from tests.httpraw import Http, raw_exchange

# An action each bundled env accepts, and a field of what it observes.
PLAYS: dict[str, tuple[str, dict[str, Any], str]] = {
    "wordle": ("step", {"guess": "crane"}, "feedback"),
    "chess": ("step", {"move": "e2e4"}, "fen"),
    "gridworld": ("step", {"move": "up"}, "position"),
    "coding": ("step", {"code": "print(6 * 7)"}, "stdout"),
    "echo": ("shout", {"message": "hi"}, ""),  # an env with tools of its own: those
}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


@contextlib.asynccontextmanager
async def stdio_session(env: str, *flags: str) -> AsyncIterator[ClientSession]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ecotone", "mcp", env, *flags], env=environ
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def http_session(
    server: RunningServer, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    base = server.url.partition("?")[0]
    async with (
        httpx2.AsyncClient(headers=headers or {}) as client,
        streamable_http_client(f"{base}/mcp", http_client=client) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _play(session: ClientSession, env: str) -> None:
    tool, arguments, field = PLAYS[env]
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert tool in listed, listed
    if tool == "step":
        assert listed["step"].output_schema is not None
        assert "reward" not in listed["step"].output_schema["properties"]
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    if env == "echo":
        assert result.content[0].text == "HI"  # type: ignore[union-attr]
        return
    assert result.structured_content is not None
    assert field in result.structured_content
    assert "reward" not in result.structured_content  # the orchestrator's
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]


@pytest.mark.parametrize("env", sorted(PLAYS))
async def test_every_bundled_env_plays_over_stdio_with_the_sdk_client(env: str) -> None:
    async with stdio_session(env) as session:
        await _play(session, env)
        await session.send_ping()


@pytest.mark.parametrize("env", sorted(PLAYS))
async def test_every_bundled_env_plays_over_streamable_http_with_the_sdk_client(env: str) -> None:
    with run_server(env, transport="http") as server:
        async with http_session(server) as session:
            await _play(session, env)
            await session.send_ping()


async def test_initialize_says_who_the_server_is_and_that_it_has_tools() -> None:
    with run_server("gridworld", transport="http") as server:
        base = server.url
        async with (
            httpx2.AsyncClient() as client,
            streamable_http_client(f"{base}/mcp", http_client=client) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "ecotone-gridworld"
            assert init.server_info.version == ecotone.__version__
            assert init.capabilities.tools is not None
            assert "orchestrator" in (init.instructions or "")


async def test_each_mcp_session_has_its_own_env_session_closed_when_it_ends() -> None:
    with run_server("wordle", transport="http") as server:
        async with http_session(server) as one, http_session(server) as two:
            await one.call_tool("step", {"guess": "crane"})
            await two.call_tool("step", {"guess": "slate"})
            assert len(server.recorder.opened) == 2
            first = await one.call_tool("step", {"guess": "house"})
            assert first.structured_content is not None
            assert [h["guess"] for h in first.structured_content["history"]] == ["crane", "house"]
        # The clients ended their MCP sessions (DELETE): their env sessions are closed.
        assert wait_until(lambda: server.recorder.open_sessions == set())


async def test_a_wrong_action_is_a_tool_error_the_model_can_read_and_the_session_goes_on() -> None:
    async with stdio_session("wordle") as session:
        wrong = await session.call_tool("step", {"guess": "zzzzz"})
        assert wrong.is_error
        text = wrong.content[0].text  # type: ignore[union-attr]
        assert "invalid_action" in text and "not in the word list" in text and "guess" in text
        typed = await session.call_tool("step", {"guess": 3})
        assert typed.is_error and "Expected `str`" in typed.content[0].text  # type: ignore[union-attr]
        ok = await session.call_tool("step", {"guess": "crane"})
        assert not ok.is_error
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("nope", {})
        assert unknown.value.error.code == types.INVALID_PARAMS


async def test_no_reset_tool_by_default_and_the_episode_end_is_said_to_the_agent() -> None:
    async with stdio_session("gridworld") as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert "reset" not in names
        # Walk until the episode ends (a pit, the goal, or the step limit): then a step is
        # refused with a reason, not silently passed to the env.
        for _ in range(200):
            result = await session.call_tool("step", {"move": "up"})
            if result.is_error:
                assert "episode" in result.content[0].text  # type: ignore[union-attr]
                break
        else:
            raise AssertionError("the episode never ended")


async def test_the_reset_tool_and_rewards_when_the_server_offers_them() -> None:
    options = McpConfig(reset_tool=True, reveal_reward=True)
    with run_server("gridworld", transport="http", mcp=options) as server:
        async with http_session(server) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert "reset" in tools
            assert tools["step"].output_schema is not None
            assert "reward" in tools["step"].output_schema["properties"]
            fresh = await session.call_tool("reset", {"seed": 3})
            assert fresh.structured_content is not None
            stepped = await session.call_tool("step", {"move": "left"})
            assert stepped.structured_content is not None
            assert "reward" in stepped.structured_content
    async with stdio_session("echo", "--actions") as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {"step", "shout"}  # the env's tools, and its action too


async def test_an_orchestrator_keeps_reset_and_reward_while_an_agent_acts_over_mcp() -> None:
    with run_server("wordle", transport="http") as server:
        async with ecotone.aconnect(server.ws_url) as orchestrator:
            await orchestrator.reset(seed=7)
            key = await orchestrator.share()
            async with http_session(server, {"x-ecotone-share": key}) as agent:
                for guess in ("crane", "house"):
                    seen = await agent.call_tool("step", {"guess": guess})
                    assert seen.structured_content is not None
                    assert "reward" not in seen.structured_content
            # The agent is gone; the episode is the orchestrator's, and so are the rewards.
            steps, following = await orchestrator.shared_steps()
            assert following == 2
            assert [s.observation["guess"] for s in steps] == ["crane", "house"]
            assert all(s.reward is not None for s in steps)
            state = await orchestrator.state()
            assert state["guesses"] == ["crane", "house"]
            assert len(server.recorder.opened) == 1  # the agent made no session of its own
        async with http_session(server, {"x-ecotone-share": key}) as late:
            refused = await late.list_tools()  # the orchestrator closed it: the key is dead
            with pytest.raises(MCPError) as dead:
                await late.call_tool("step", {"guess": "crane"})
            assert "share key" in dead.value.error.message
            assert refused.tools


def _post(http: Http, body: bytes | dict[str, Any], session: str = "") -> Any:
    headers = dict(MCP_HEADERS)
    if session:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return http.request("POST", "/mcp", data, headers)


def _message(reply: Any) -> dict[str, Any]:
    """The JSON-RPC message of a reply: a JSON body, or the first SSE `data:` line."""
    text = reply.body.decode()
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)


def test_bad_input_gets_the_specs_answers_and_the_server_goes_on() -> None:
    with run_server("wordle", transport="http") as server:
        http = Http(server.port)
        parse = _post(http, b"{not json")
        assert parse.status == 400 and _message(parse)["error"]["code"] == -32700
        batch = _post(http, b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]')
        assert batch.status == 400 and _message(batch)["error"]["code"] == -32600
        deep = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ' + b'{"a": ' * 5000
        nested = _post(http, deep + b"1" + b"}" * 5001)
        assert nested.status == 400 and _message(nested)["error"]["code"] in (-32700, -32600)
        early = _post(http, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert early.status == 400 and _message(early)["error"]["code"] == -32600
        init = _post(http, INITIALIZE)
        assert init.status == 200
        sid = init.headers["mcp-session-id"]
        note = _post(http, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        assert (note.status, note.body) == (202, b"")
        unknown = _post(http, {"jsonrpc": "2.0", "id": 2, "method": "foo/bar"}, sid)
        assert _message(unknown)["error"]["code"] == -32601
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
        no_name = _post(http, {**call, "params": {"arguments": {}}}, sid)
        assert _message(no_name)["error"]["code"] == -32602
        wrong = _post(http, {**call, "params": {"name": "step", "arguments": {"guess": 3}}}, sid)
        assert _message(wrong)["result"]["isError"] is True
        declared = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: application/json, text/event-stream\r\nmcp-session-id: %s\r\n"
            b"content-length: %d\r\n\r\n" % (sid.encode(), 5 << 20)
        )
        huge, _ = raw_exchange(server.port, declared)
        assert huge.startswith(b"HTTP/1.1 413"), huge
        ping = _post(http, {"jsonrpc": "2.0", "id": 5, "method": "ping"}, sid)
        assert _message(ping) == {"jsonrpc": "2.0", "id": 5, "result": {}}
        gone = http.request("DELETE", "/mcp", b"", {"mcp-session-id": sid})
        assert gone.status == 200
        after = _post(http, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, sid)
        assert after.status == 404
        # OpenEnv's dialect on the same path still answers plain POSTs.
        plain = http.request(
            "POST", "/mcp", {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
        )
        assert (plain.status == 200 and "result" in plain.json()) or "error" in plain.json()


async def test_mcp_over_http_needs_the_servers_token() -> None:
    with run_server("wordle", transport="http", auth=AuthConfig(token="mcp-test-token")) as s:
        http = Http(s.port)
        assert _post(http, INITIALIZE).status == 401
        async with http_session(s, {"authorization": "Bearer mcp-test-token"}) as session:
            assert (await session.call_tool("step", {"guess": "crane"})).is_error is False


async def test_a_cancelled_call_leaves_the_session_working() -> None:
    """The SDK client sends notifications/cancelled when the caller stops waiting; the server
    drops that answer, and the session answers the next call (once the env's step, which a
    worker thread cannot abandon midway, is over)."""
    import anyio

    with run_server("slow", transport="http") as server:
        async with http_session(server) as session:
            with anyio.move_on_after(0.3) as waited:
                await session.call_tool("step", {"sleep": 1.0, "tag": "given up"})
            assert waited.cancelled_caught
            after = await session.call_tool("step", {"sleep": 0.0, "tag": "next"})
            assert not after.is_error
            assert after.structured_content is not None
            assert after.structured_content["tag"] == "next"
            await session.send_ping()


class _Plugin:
    @ecotone.hookimpl
    def ecotone_environments(self) -> dict[str, type]:
        from ecotone.plugins.counter import CounterAction, CounterObservation, CounterState

        class ResetFails(ecotone.Environment[CounterAction, CounterObservation, CounterState]):
            def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Any:
                raise RuntimeError("no episode for you")

            def step(self, action: CounterAction) -> CounterObservation:
                raise AssertionError  # pragma: no cover

            def state(self) -> CounterState:
                return CounterState()

        return {"reset_fails": ResetFails}


async def test_an_env_that_cannot_start_an_episode_leaves_no_session_behind() -> None:
    with run_server("reset_fails", transport="http", plugins=[_Plugin()]) as server:
        async with http_session(server) as session:
            for _ in range(5):
                with pytest.raises(MCPError, match="no episode for you"):
                    await session.call_tool("step", {"delta": 1})
            assert wait_until(lambda: server.recorder.open_sessions == set())
            assert len(server.recorder.opened) == 5


async def test_an_episode_closed_while_idle_is_said_and_the_next_call_starts_another() -> None:
    from ecotone.kernel import Limits

    with run_server("wordle", transport="http", limits=Limits(lease=0.3)) as server:
        async with http_session(server) as session:
            assert not (await session.call_tool("step", {"guess": "crane"})).is_error
            assert wait_until(lambda: server.recorder.open_sessions == set())
            closed = await session.call_tool("step", {"guess": "slate"})
            assert closed.is_error
            assert "next call starts a new episode" in closed.content[0].text  # type: ignore[union-attr]
            again = await session.call_tool("step", {"guess": "slate"})
            assert again.structured_content is not None, again.content
            assert [h["guess"] for h in again.structured_content["history"]] == ["slate"]


async def test_a_share_key_alone_admits_an_agent_to_that_session_and_nothing_else() -> None:
    with run_server("wordle", transport="http", auth=AuthConfig(token="orchestrator-only")) as s:
        base = s.url.partition("?")[0]
        async with ecotone.aconnect(
            f"ws://{base.split('://')[1]}", token="orchestrator-only"
        ) as env:
            await env.reset(seed=1)
            key = await env.share()
            async with http_session(s, {"x-ecotone-share": key}) as agent:
                assert not (await agent.call_tool("step", {"guess": "crane"})).is_error
            async with http_session(s, {"x-ecotone-share": "a-guess"}) as stranger:
                with pytest.raises(MCPError, match="share key"):
                    await stranger.call_tool("step", {"guess": "crane"})
            # The key is for the MCP face only: not OpenEnv's dialect, not the native API.
            http = Http(s.port)
            header = {"x-ecotone-share": key}
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
            assert http.request("POST", "/mcp", rpc, header).status == 401
            assert http.request("POST", "/v1/sessions", b"", header).status == 401
            steps, _ = await env.shared_steps()
            assert [x.observation["guess"] for x in steps] == ["crane"]
            assert len(s.recorder.opened) == 1


def test_a_request_framed_two_ways_at_once_is_answered_then_closed_on_mcp_too() -> None:
    with run_server("wordle", transport="http") as server:
        body = json.dumps(INITIALIZE).encode()
        request = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"accept: application/json, text/event-stream\r\ncontent-length: %d\r\n"
            b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
            % (len(body), len(body), body)
        )
        from tests.httpraw import raw_exchange

        data, closed = raw_exchange(
            server.port, request + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        assert closed and data.count(b"HTTP/1.1 ") == 1, data
