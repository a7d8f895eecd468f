"""The `kubernetes` provider, with the official client, against an API that answers as the
Kubernetes v1 API does (the object and Status shapes of its reference: tests/k8s_api.py),
since no API server runs here. What the client sends is checked (the hardened Pod, the
Service, the Secret, the deletes), and the Pod "runs" as a real ecotone server on loopback
(its podIP), so the provider's own readiness probe and an episode go through it. Image pull
errors, crash loops, refusals, timeouts and gc of a dead owner's objects too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import ecotone
from ecotone.providers.kubernetes import OWNER_ANNOTATION, objects
from tests.conftest import run_server
from tests.k8s_api import FakeApi

pytest.importorskip("kubernetes")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeApi]:
    with FakeApi() as fake:
        fake.kubeconfig(tmp_path / "kubeconfig")
        yield fake


def spec(cluster: FakeApi, **more: Any) -> dict[str, Any]:
    return {
        "image": "registry.example/ecotone-counter:1",
        "kubeconfig": str(cluster.config_path),
        "namespace": "rl",
        "reach": "pod",
        "ready_timeout": 20,
        **more,
    }


def test_a_pod_service_and_secret_are_made_hardened_and_an_episode_plays(
    cluster: FakeApi,
) -> None:
    with run_server("counter") as server:
        cluster.pod_runs_at(server.url)
        port = urlsplit(server.url).port
        with ecotone.launch("counter", provider="kubernetes", **spec(cluster, port=port)) as env:
            env.reset(seed=0)
            assert env.step({"delta": 3}).observation["count"] == 3
            created = cluster.created()
            assert [c["kind"] for c in created] == ["Secret", "Pod", "Service"]
            secret, pod, service = created
            assert all(c["namespace"] == "rl" for c in cluster.calls if c["verb"] == "POST")
            container = pod["spec"]["containers"][0]
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
            }
            assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["spec"]["automountServiceAccountToken"] is False
            assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
            assert container["livenessProbe"]["httpGet"]["path"] == "/health"
            assert container["resources"]["limits"] == {"cpu": "1", "memory": "1024Mi"}
            assert container["image"] == "registry.example/ecotone-counter:1"
            assert pod["metadata"]["labels"]["ecotone.managed"] == "true"
            assert pod["metadata"]["annotations"][OWNER_ANNOTATION]
            token = secret["stringData"]["token"]
            assert token not in json.dumps(pod)  # it reaches the server through the Secret
            assert service["spec"]["selector"] == pod["metadata"]["labels"]
    deletes = sorted((c["resource"], c["name"]) for c in cluster.calls if c["verb"] == "DELETE")
    name = pod["metadata"]["name"]
    assert deletes == [("pods", name), ("secrets", f"{name}-token"), ("services", name)]


def test_names_are_dns_labels_whatever_the_env_is_called(cluster: FakeApi) -> None:
    long_name = "gymnasium:ALE/Very_Long.Game-Name-v5" + "x" * 80
    with run_server("counter") as server:
        cluster.pod_runs_at(server.url)
        port = urlsplit(server.url).port
        with ecotone.start_server(long_name, provider="kubernetes", **spec(cluster, port=port)):
            (secret, pod, service) = cluster.created()
    name = pod["metadata"]["name"]
    assert len(name) <= 57 and name == service["metadata"]["name"]
    assert secret["metadata"]["name"] == f"{name}-token"
    assert cluster.live_objects() == []  # and all three were deleted by those names


@pytest.mark.parametrize(
    ("reason", "error", "message"),
    [
        ("ErrImagePull", ecotone.ImageNotFound, "cannot get the image"),
        ("ImagePullBackOff", ecotone.ImageNotFound, "push it to a registry"),
        ("CrashLoopBackOff", ecotone.StartFailed, "CrashLoopBackOff"),
    ],
)
def test_a_pod_that_cannot_start_is_a_clear_error_and_leaves_nothing(
    cluster: FakeApi, reason: str, error: type[Exception], message: str
) -> None:
    cluster.pod_waits_with(reason)
    with pytest.raises(error, match=message):
        ecotone.start_server("counter", provider="kubernetes", **spec(cluster))
    assert cluster.live_objects() == []


def test_a_refused_object_says_what_the_api_said(cluster: FakeApi) -> None:
    cluster.refuse_pods(403, "Forbidden", 'pods is forbidden: User "ci" cannot create pods')
    with pytest.raises(ecotone.StartFailed, match=r"403 Forbidden.*cannot create pods"):
        ecotone.start_server("counter", provider="kubernetes", **spec(cluster))
    assert cluster.live_objects() == []  # the Secret made before the refusal is gone too


def test_a_pod_never_ready_times_out(cluster: FakeApi) -> None:
    cluster.pod_stays_pending()
    with pytest.raises(ecotone.ReadinessTimeout, match="not ready in 1 s"):
        ecotone.start_server("counter", provider="kubernetes", **spec(cluster, ready_timeout=1))
    assert cluster.live_objects() == []


def test_bad_options_are_refused_by_name(cluster: FakeApi) -> None:
    with pytest.raises(ValueError, match="no option 'nodes'"):
        ecotone.start_server("counter", provider="kubernetes", nodes=3, **spec(cluster))
    with pytest.raises(ValueError, match="reach must be one of service, pod"):
        ecotone.start_server("counter", provider="kubernetes", **spec(cluster, reach="ingress"))


def test_the_spec_secrets_go_in_the_secret_not_the_pod() -> None:
    from ecotone.launcher.compose import make_spec

    made = objects(
        make_spec("counter", image="x", secrets={"API_KEY": "s3cret"}, environment={"A": "1"}),
        "ecotone-counter-1",
        "tok",
    )
    secret, pod, _ = made
    assert secret["stringData"]["api-key"] == "s3cret"
    assert "s3cret" not in json.dumps(pod)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["A"]["value"] == "1"
    assert env["API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "api-key"


def test_gc_deletes_the_objects_of_a_dead_owners_pods_only(cluster: FakeApi) -> None:
    cluster.add_pod("rl", "ecotone-counter-dead", owner="gone")
    cluster.add_pod("rl", "ecotone-counter-live", owner="alive")
    env = dict(os.environ, KUBECONFIG=str(cluster.config_path))
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "gc", "--provider", "kubernetes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "pod rl/ecotone-counter-dead" in done.stdout
    assert "ecotone-counter-live" not in done.stdout
    names = [o["name"] for o in cluster.live_objects()]
    assert "ecotone-counter-live" in names and "ecotone-counter-dead" not in names
