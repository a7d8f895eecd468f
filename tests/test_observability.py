"""What a server tells its operator: Prometheus metrics at /metrics (both TCP transports,
behind admission), and a JSON log line per session event."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import ecotone
from ecotone.kernel.config import AuthConfig, MetricsConfig, ServerConfig
from ecotone.serving import BackgroundServer
from tests.conftest import make_registry, run_server, wait_until
from tests.httpraw import Http


def _scrape(port: int, headers: dict[str, str] | None = None) -> dict[str, float]:
    reply = Http(port).request("GET", "/metrics", headers=headers)
    assert reply.status == 200, reply
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def _play(url: str) -> None:
    with ecotone.connect(url) as env:
        env.reset()
        for delta in (1, 2, 3):
            env.step({"delta": delta})
        with pytest.raises(ecotone.InvalidActionError):
            env.step({"delta": "x"})
        with ecotone.connect(url) as other:
            other.reset()
            other.step({"delta": 1})


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_metrics_count_sessions_steps_errors_and_connections(transport: str) -> None:
    with run_server("counter", transport=transport) as server:
        url = server.url
        _play(url)
        with ecotone.connect(url) as held:
            held.reset()
            seen = _scrape(server.port)
            assert seen["ecotone_sessions_open"] == 1
            assert seen["ecotone_connections_open"] >= 1
        assert seen["ecotone_steps_total"] == 4
        assert seen["ecotone_errors_total{code=invalid_action}"] == 1
        assert seen["ecotone_sessions_opened_total"] == 3
        assert seen["ecotone_sessions_closed_total{reason=client}"] == 2
        assert seen["ecotone_info{env=counter,version=" + ecotone.__version__ + "}"] == 1
        assert seen["ecotone_env_calls_hung"] == 0
        assert "ecotone_step_seconds_count{env=counter}" not in seen  # not asked for


def test_step_latency_is_a_histogram_when_asked_for() -> None:
    config = ServerConfig(
        env="slow", transport="http", port=0, metrics=MetricsConfig(step_latency=True)
    )
    with BackgroundServer(config, registry=make_registry()) as server:
        with ecotone.connect(server.url) as env:
            env.reset()
            env.step({"sleep": 0.02, "tag": "a"})
            env.step({"sleep": 0.0, "tag": "b"})
            env.state()
        port = int(server.url.rsplit(":", 1)[1])
        seen = _scrape(port)
    assert seen["ecotone_step_seconds_count{env=slow}"] == 2
    assert seen["ecotone_step_seconds_bucket{env=slow,le=0.01}"] == 1
    assert seen["ecotone_step_seconds_bucket{env=slow,le=+Inf}"] == 2
    assert 0.02 <= seen["ecotone_step_seconds_sum{env=slow}"] < 1.0
    # every other op has its own histogram: one open, one reset, one close, one state
    for op in ("open", "reset", "state", "close"):
        assert seen[f"ecotone_call_seconds_count{{env=slow,op={op}}}"] == 1, op
    assert 0.0 < seen["ecotone_call_seconds_sum{env=slow,op=reset}"] < 1.0


def test_metrics_are_behind_the_token_like_every_route() -> None:
    with run_server("counter", transport="http", auth=AuthConfig(token="metrics-token")) as s:
        assert Http(s.port).request("GET", "/metrics").status == 401
        seen = _scrape(s.port, {"authorization": "Bearer metrics-token"})
        assert seen["ecotone_sessions_open"] == 0


def test_json_logs_have_a_line_per_session_event_with_its_fields() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECOTONE_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ecotone",
            "-v",
            "serve",
            "counter",
            "--port",
            "0",
            "--log-format",
            "json",
        ],
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        early = [proc.stderr.readline()]
        while not (found := re.search(r"at (ws://\S+)", early[-1])):
            assert early[-1], early
            early.append(proc.stderr.readline())
        with ecotone.connect(found.group(1)) as env:
            env.reset(seed=5, episode_id="ep-1")
            env.step({"delta": 1})
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events: list[dict[str, Any]] = []
    for line in [*early, *rest.splitlines()]:
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
        else:
            assert line.startswith("ecotone: "), line  # the CLI's own plain lines
    by_event = {e.get("event"): e for e in events if "event" in e}
    assert set(by_event) >= {"session_opened", "episode_started", "session_closed"}
    started = by_event["episode_started"]
    assert (started["env"], started["episode_id"], started["seed"]) == ("counter", "ep-1", 5)
    assert by_event["session_closed"]["reason"] == "client"
    assert by_event["session_opened"]["session"] == started["session"]
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in events)


class NapAction(ecotone.Action, kw_only=True):
    seconds: float


class NappingEnv(ecotone.Environment[NapAction, ecotone.Observation, ecotone.State]):
    """A thread env whose steps outlive a 0.2 s deadline by a little."""

    call_timeout = 0.2

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None
    ) -> ecotone.Observation:
        return ecotone.Observation()

    def step(self, action: NapAction) -> ecotone.Observation:
        time.sleep(action.seconds)
        return ecotone.Observation(reward=0.0)

    def state(self) -> ecotone.State:
        return ecotone.State()


class NapPlugin:
    @ecotone.hookimpl
    def ecotone_environments(self) -> dict[str, type]:
        return {"napping": NappingEnv}


def test_abandoned_calls_are_counted_once_and_uncounted_when_they_end() -> None:
    with run_server("napping", transport="http", plugins=[NapPlugin()]) as server:
        clients = [ecotone.connect(server.url) for _ in range(5)]
        try:
            for client in clients:
                client.reset()
                with pytest.raises(ecotone.ServerError, match="did not end within"):
                    client.step({"seconds": 0.6})
            seen = _scrape(server.port)
            assert seen["ecotone_env_calls_abandoned_total"] == 5
            assert 0 < seen["ecotone_env_calls_hung"] <= 5
            assert wait_until(lambda: _scrape(server.port)["ecotone_env_calls_hung"] == 0, 10)
        finally:
            for client in clients:
                client.close()
