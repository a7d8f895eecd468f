"""The Deployment form of `ecotone export k8s` (what an operator commits): every object valid
against the Kubernetes schemas of the last three minor versions kubernetes-validate knows,
hardened as the Pod form is, with the shutdown's timings matched, written as a kustomize
folder; and `podman kube play` runs the Deployment with its Secret and checkpoint claim, an
episode playing through the published port and checkpointing onto the claim. Service routing,
the autoscaler, the budget and the network policy are validated against the schemas only (no
cluster runs here: docs/providers.md)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import kubernetes_validate
import pytest
import yaml

import ecotone
from ecotone.providers.k8s_deployment import (
    CHECKPOINT_DIR,
    OCCUPANCY_METRIC,
    DeploymentOptions,
    DeploymentSettings,
    deployment_manifests,
    grace_seconds,
    parse_selector,
)
from ecotone.providers.k8s_manifests import manifests, render
from tests.engines import env_image, podman_engine  # noqa: F401 - fixtures
from tests.test_k8s import documents, free_port, last_minors, podman

KINDS = [
    "Secret",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "NetworkPolicy",
]


@pytest.mark.parametrize("version", last_minors())
def test_every_object_is_valid_for_the_last_three_kubernetes_minors(version: str) -> None:
    objects = deployment_manifests(
        "counter", image="localhost/ecotone-counter:latest", replicas=3, max_replicas=12,
        allow_from={"app.kubernetes.io/part-of": "trainer"}, storage_class="nfs",
        max_sessions=256,
    )  # fmt: skip
    parsed = documents(render(list(objects.values())))
    assert [o["kind"] for o in parsed] == KINDS
    for obj in parsed:
        kubernetes_validate.validate(obj, version, strict=True)  # raises on any fault


def test_the_deployment_is_the_pods_hardened_server_with_matched_shutdown_timings() -> None:
    objects = deployment_manifests(
        "counter", image="img", token="t0k", owner="run-7", cpu="500m", replicas=3,
        drain_timeout=45, shutdown_timeout=8, prestop_seconds=4, max_sessions=100,
    )  # fmt: skip
    _, pod, _ = manifests("counter", image="img", owner="run-7", cpu="500m")
    deployment = objects["deployment.yaml"]
    template = deployment["spec"]["template"]
    spec = template["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["selector"]["matchLabels"] == template["metadata"]["labels"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {**pod["spec"]["securityContext"], "fsGroup": 65534}
    (container,) = spec["containers"]
    (pod_container,) = pod["spec"]["containers"]
    for same in ("securityContext", "resources", "readinessProbe", "livenessProbe", "image"):
        assert container[same] == pod_container[same], same
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    command = container["command"]
    assert command[command.index("--checkpoint-dir") + 1] == CHECKPOINT_DIR
    assert command[command.index("--shutdown-timeout") + 1] == "8"
    assert command[command.index("--drain-timeout") + 1] == "45"
    assert command[command.index("--max-sessions") + 1] == "100"
    assert {"name": "checkpoints", "mountPath": CHECKPOINT_DIR} in container["volumeMounts"]
    claim = objects["checkpoints.yaml"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    } in spec["volumes"]
    # preStop, then the drain, the checkpoints and the closes, then the server's margin.
    prestop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop[:2] == ["python3", "-c"] and "sleep(4)" in prestop[2]
    assert spec["terminationGracePeriodSeconds"] == grace_seconds(
        DeploymentSettings(image="i", drain_timeout=45, shutdown_timeout=8, prestop_seconds=4)
    )
    assert spec["terminationGracePeriodSeconds"] >= 4 + 45 + 2 * 8
    secret = objects["secret.yaml"]
    assert secret["stringData"] == {"token": "t0k"}
    token_ref = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert token_ref == {"name": secret["metadata"]["name"], "key": "token"}
    assert objects["service.yaml"]["spec"]["selector"] == template["metadata"]["labels"]
    for obj in objects.values():
        labels = obj["metadata"]["labels"]
        assert labels["ecotone.managed"] == "true" and labels["ecotone.owner"] == "run-7"


def test_the_autoscaler_the_budget_and_the_network_policy() -> None:
    objects = deployment_manifests(
        "counter", image="img", replicas=2, min_replicas=1, max_replicas=7, target_cpu=60,
        target_occupancy=0.75, allow_from={"app": "trainer", "team": "rl"},
    )  # fmt: skip
    hpa = objects["autoscaler.yaml"]["spec"]
    name = objects["deployment.yaml"]["metadata"]["name"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 7)
    cpu, occupancy = hpa["metrics"]
    assert cpu["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 60},
    }
    assert occupancy["type"] == "Pods"
    assert occupancy["pods"]["metric"]["name"] == OCCUPANCY_METRIC == "ecotone_sessions_occupancy"
    assert occupancy["pods"]["target"] == {"type": "AverageValue", "averageValue": "750m"}
    selector = objects["deployment.yaml"]["spec"]["selector"]
    assert objects["disruption-budget.yaml"]["spec"] == {"maxUnavailable": 1, "selector": selector}
    policy = objects["network-policy.yaml"]["spec"]
    assert policy["podSelector"] == selector and policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule == {
        "from": [{"podSelector": {"matchLabels": {"app": "trainer", "team": "rl"}}}],
        "ports": [{"protocol": "TCP", "port": 8000}],
    }
    defaults = deployment_manifests("counter", image="img")
    assert defaults["deployment.yaml"]["spec"]["replicas"] == 2
    hpa = defaults["autoscaler.yaml"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 8)
    ingress = defaults["network-policy.yaml"]["spec"]["ingress"][0]
    assert ingress["from"] == [{"podSelector": {"matchLabels": {"ecotone.client": "true"}}}]


def test_the_options_are_checked() -> None:
    keys = DeploymentOptions.__required_keys__ | DeploymentOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(DeploymentSettings)}
    with pytest.raises(TypeError, match="unexpected keyword argument 'replica'"):
        deployment_manifests("counter", image="i", replica=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="min <= --max"):
        deployment_manifests("counter", image="i", min_replicas=5, max_replicas=2)
    with pytest.raises(ValueError, match="target_occupancy"):
        deployment_manifests("counter", image="i", target_occupancy=1.5)
    assert parse_selector("app=trainer, example.com/team=rl") == {
        "app": "trainer",
        "example.com/team": "rl",
    }
    for wrong in ("app", "app=train er", "=x", "a=b,"):
        with pytest.raises(ValueError, match="not a label selector"):
            parse_selector(wrong)


def ecotone_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ecotone", *args], capture_output=True, text=True, timeout=60
    )


def test_the_cli_writes_a_kustomize_folder(tmp_path: Path) -> None:
    out = tmp_path / "base"
    done = ecotone_cli(
        "export", "k8s", "counter", "--image", "img:1", "--form", "deployment",
        "--replicas", "3", "--min", "2", "--max", "10", "--allow-from", "app=trainer",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "kubectl apply -k" in done.stderr and "app=trainer" in done.stderr
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = kustomization["resources"]
    assert sorted(files) == sorted(p.name for p in out.iterdir() if p.name != "kustomization.yaml")
    kinds = [yaml.safe_load((out / name).read_text())["kind"] for name in files]
    assert kinds == KINDS
    deployment = yaml.safe_load((out / "deployment.yaml").read_text())
    assert deployment["spec"]["replicas"] == 3
    hpa = yaml.safe_load((out / "autoscaler.yaml").read_text())["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    printed = ecotone_cli("export", "k8s", "counter", "--image", "i", "--form", "deployment")
    assert printed.returncode == 0, printed.stderr
    assert [o["kind"] for o in documents(printed.stdout)] == KINDS
    wrong = ecotone_cli("export", "k8s", "counter", "--image", "i", "--replicas", "3")
    assert wrong.returncode != 0 and "--replicas: only with --form deployment" in wrong.stderr
    wrong = ecotone_cli(
        "export", "k8s", "counter", "--image", "i", "--form", "deployment", "--allow-from", "x"
    )
    assert wrong.returncode != 0 and "not a label selector" in wrong.stderr


def test_podman_kube_play_runs_the_deployment_and_an_episode_checkpoints_onto_its_claim(
    podman_engine: str,  # noqa: F811
    env_image: Callable[[str, str], str],  # noqa: F811
    tmp_path: Path,
) -> None:
    image = env_image("podman", "counter")
    port, token = free_port(), secrets.token_urlsafe(16)
    name = f"ecotone-deploy-{secrets.token_hex(4)}"
    objects = deployment_manifests(
        "counter", image=image, name=name, token=token, host_port=port, owner="pytest",
        replicas=1,
    )  # fmt: skip
    secret, claim = objects["secret.yaml"], objects["checkpoints.yaml"]
    # podman 4.3 reads a secretKeyRef from a podman secret that holds the Secret's `data`
    # (values in base64, as JSON); a cluster takes the Secret object itself.
    data = {k: base64.b64encode(v.encode()).decode() for k, v in secret["stringData"].items()}
    podman("secret", "create", secret["metadata"]["name"], "-", stdin=json.dumps(data))
    path = tmp_path / "deployment.yaml"
    path.write_text(render([claim, objects["deployment.yaml"]]))
    volume = claim["metadata"]["name"]
    try:
        podman("kube", "play", str(path))
        names = podman("ps", "--all", "--format", "{{.Names}}").split()
        (container,) = [n for n in names if n.startswith(name) and n.endswith("-server")]
        inspected = json.loads(podman("inspect", container))[0]
        assert inspected["HostConfig"]["ReadonlyRootfs"] is True
        assert inspected["Config"]["User"].startswith("65534")
        url = f"ws://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                env = ecotone.connect(url, token=token, resume=True, checkpoint_every=1)
                break
            except (ecotone.ConnectionLost, OSError):
                if time.monotonic() > deadline:
                    raise AssertionError(podman("logs", container, check=False)) from None
                time.sleep(0.2)
        with env:
            assert env.resume_key is not None  # the server keeps checkpoints
            env.reset(seed=0, target=3)
            steps = [env.step({"delta": 1}) for _ in range(3)]
            assert [s.observation["count"] for s in steps] == [1, 2, 3] and steps[-1].done
            # The non-root server wrote its key and the episode's checkpoint on the claim.
            mount = json.loads(podman("volume", "inspect", volume))[0]["Mountpoint"]
            assert sorted(os.listdir(mount)) != [] and "key" in os.listdir(mount)
            assert len(os.listdir(mount)) >= 2, os.listdir(mount)
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(url)  # the Secret's token guards it
    finally:
        podman("kube", "down", str(path), check=False)
        podman("volume", "rm", "--force", volume, check=False)
        podman("secret", "rm", secret["metadata"]["name"], check=False)
