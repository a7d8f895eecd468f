"""What a server does, for Prometheus: `GET /metrics` on the http and websocket transports.

The engine and the runner keep plain counters (an increment on the hot path, nothing more);
this module reads them when scraped, plus what lifecycle hooks count (sessions closed, by
reason), and writes Prometheus' text format with `prometheus_client`. Latency needs a hook on
every env call, which also turns off the `step_many` fast path: it is measured only when
asked (`[metrics] step_latency = true`), for steps and for every other op.

    ecotone_sessions_open, ecotone_sessions_busy, ecotone_requests_queued
    ecotone_sessions_capacity, ecotone_sessions_occupancy (open over capacity: the
                                     autoscaler's custom metric), ecotone_ready, ecotone_draining
    ecotone_sessions_opened_total, ecotone_sessions_closed_total{reason}
    ecotone_sessions_reclaimed_total, ecotone_seats_reclaimed_total (their lease ran out)
    ecotone_leases{kind}             (held now: session, loose, seat), ecotone_lease_seconds
                                     (the lease's length), ecotone_lease_oldest_seconds (since
                                     the least recent renewal of an idle one)
    ecotone_steps_total, ecotone_errors_total{code}
    ecotone_connections_open, ecotone_connections_refused_total
    ecotone_env_calls_hung, ecotone_env_calls_abandoned_total
    ecotone_step_seconds{env}        (histogram; with step_latency)
    ecotone_call_seconds{env, op}    (histogram of open, reset, state, close, list_tools,
                                      call_tool, render; with step_latency)
    ecotone_info{env, version}
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterator
from typing import Any, Final

from ecotone.kernel import hookimpl
from ecotone.specs.version import VERSION

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of the step latency histogram's buckets, +Inf besides."""


class SessionCounts:
    """Hook plugin: sessions closed, by reason."""

    def __init__(self) -> None:
        self.closed: collections.Counter[str] = collections.Counter()

    @hookimpl
    def ecotone_session_closed(self, session_id: str, env: str, reason: str) -> None:
        self.closed[reason] += 1


class StepLatency:
    """Hook plugin: a histogram of step durations per env (`[metrics] step_latency`)."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = collections.defaultdict(float)

    @hookimpl
    def ecotone_step_completed(
        self, session_id: str, env: str, action: Any, observation: Any, duration_s: float
    ) -> None:
        counts = self.counts.get(env)
        if counts is None:
            counts = self.counts[env] = [0] * (len(BUCKETS) + 1)
        counts[bisect.bisect_left(BUCKETS, duration_s)] += 1
        self.sums[env] += duration_s


class CallLatency:
    """Hook plugin: histograms of the other env calls' durations, per env and op."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = collections.defaultdict(float)

    @hookimpl
    def ecotone_call_completed(
        self, session_id: str | None, env: str, op: str, duration_s: float
    ) -> None:
        key = (env, op)
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0] * (len(BUCKETS) + 1)
        counts[bisect.bisect_left(BUCKETS, duration_s)] += 1
        self.sums[key] += duration_s


def _buckets(counts: list[int]) -> list[tuple[str, float]]:
    running = 0
    out: list[tuple[str, float]] = []
    for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
        running += count
        out.append(("+Inf" if bound == float("inf") else str(bound), running))
    return out


class Metrics:
    """One server's metrics: its hook plugins (register them before the engine is built)
    and, once `runner` is set, the text a scrape gets."""

    def __init__(self, step_latency: bool = False) -> None:
        self.sessions = SessionCounts()
        self.latency = StepLatency() if step_latency else None
        self.calls = CallLatency() if step_latency else None
        self.runner: Any = None

    def plugins(self) -> list[object]:
        return [p for p in (self.sessions, self.latency, self.calls) if p is not None]

    def render(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return generate_latest(registry)


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
            InfoMetricFamily,
        )

        runner = self.metrics.runner
        engine = runner.engine
        sessions = list(engine.sessions)
        yield InfoMetricFamily(
            "ecotone", "The server.", value={"env": engine.default_env, "version": VERSION}
        )
        yield GaugeMetricFamily("ecotone_sessions_open", "Sessions open.", value=len(sessions))
        held, capacity = len(engine.sessions), engine.limits.max_sessions
        yield GaugeMetricFamily(
            "ecotone_sessions_capacity", "Sessions the server may hold (max_sessions).", capacity
        )
        yield GaugeMetricFamily(
            "ecotone_sessions_occupancy",
            "Sessions held (being opened included) over capacity, 0 to 1: the autoscaler's "
            "custom metric.",
            value=held / capacity,
        )
        yield GaugeMetricFamily(
            "ecotone_ready",
            "1 while the server has room for a new session and is not draining (/ready).",
            value=int(engine.readiness() is None),
        )
        yield GaugeMetricFamily(
            "ecotone_draining", "1 while the server is stopping.", value=int(engine.draining)
        )
        yield GaugeMetricFamily(
            "ecotone_sessions_busy",
            "Sessions running a call or holding queued requests.",
            value=sum(1 for s in sessions if s.busy),
        )
        yield GaugeMetricFamily(
            "ecotone_requests_queued",
            "Requests waiting for their session.",
            value=sum(len(s.queue) for s in sessions if s.queue),
        )
        yield CounterMetricFamily(
            "ecotone_sessions_opened", "Sessions opened.", value=engine.opened_total
        )
        closed = CounterMetricFamily(
            "ecotone_sessions_closed", "Sessions closed, by reason.", labels=["reason"]
        )
        for reason, count in sorted(self.metrics.sessions.closed.items()):
            closed.add_metric([reason], count)
        yield closed
        yield from _leases(engine, sessions)
        yield CounterMetricFamily(
            "ecotone_steps", "Steps answered with an observation.", value=engine.steps_total
        )
        errors = CounterMetricFamily(
            "ecotone_errors", "Error frames answered, by code.", labels=["code"]
        )
        for code, count in sorted(engine.errors.items()):
            errors.add_metric([str(code)], count)
        yield errors
        yield GaugeMetricFamily(
            "ecotone_connections_open", "Connections open.", value=runner.gate.open
        )
        yield CounterMetricFamily(
            "ecotone_connections_refused",
            "Connections refused at max_connections or max_connections_per_ip.",
            value=runner.gate.refused,
        )
        yield GaugeMetricFamily(
            "ecotone_env_calls_hung",
            "Env calls still running past their deadline (abandoned worker threads).",
            value=runner.hung,
        )
        yield CounterMetricFamily(
            "ecotone_env_calls_abandoned",
            "Env calls abandoned past their deadline.",
            value=runner.abandoned_total,
        )
        latency = self.metrics.latency
        if latency is not None:
            histogram = HistogramMetricFamily(
                "ecotone_step_seconds", "Step duration, in the env.", labels=["env"]
            )
            for env, counts in sorted(latency.counts.items()):
                histogram.add_metric([env], _buckets(counts), sum_value=latency.sums[env])
            yield histogram
        calls = self.metrics.calls
        if calls is not None:
            histogram = HistogramMetricFamily(
                "ecotone_call_seconds",
                "Env call duration (open, reset, state, close, tools, render).",
                labels=["env", "op"],
            )
            for key, counts in sorted(calls.counts.items()):
                histogram.add_metric(list(key), _buckets(counts), sum_value=calls.sums[key])
            yield histogram


def _leases(engine: Any, sessions: list[Any]) -> Iterator[Any]:
    """The lease metrics (`ecotone.kernel.leases`)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    leases = engine.leases
    yield CounterMetricFamily(
        "ecotone_sessions_reclaimed",
        "Sessions reclaimed: their lease ran out, nothing from their client renewing it.",
        value=leases.reclaimed,
    )
    yield CounterMetricFamily(
        "ecotone_seats_reclaimed",
        "Seats taken with join released as their lease ran out.",
        value=leases.seats_reclaimed,
    )
    length = leases.length
    yield GaugeMetricFamily(
        "ecotone_lease_seconds",
        "How long a lease lasts (limits.lease; +Inf: nothing is reclaimed).",
        value=float("inf") if length is None else length,
    )
    now = engine.clock()
    renewed = [s.last_used for s in sessions if not s.busy]
    seats = 0
    for session in sessions:
        seating = session.seating
        if seating is not None and seating.renewed:
            seats += len(seating.renewed)
            renewed.extend(seating.renewed.values())
    held = GaugeMetricFamily(
        "ecotone_leases", "Leases held now, by kind: session, loose, seat.", labels=["kind"]
    )
    loose = leases.loose
    held.add_metric(["session"], len(sessions) - loose)
    held.add_metric(["loose"], loose)
    held.add_metric(["seat"], seats)
    yield held
    yield GaugeMetricFamily(
        "ecotone_lease_oldest_seconds",
        "Seconds since the least recently renewed lease of an idle session or seat was "
        "renewed (0: none).",
        value=max(0.0, now - min(renewed)) if renewed else 0.0,
    )
