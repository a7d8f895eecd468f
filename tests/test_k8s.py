"""Kubernetes manifests (`ecotone export k8s`): valid against the Kubernetes schemas
(`kubernetes-validate`), hardened, labelled for gc, and run for real by `podman kube play`
(a real consumer of Pod YAML) with an episode played against the result. No API server runs
here: what a cluster would do beyond that is not tested (docs/providers.md says so)."""

from __future__ import annotations

import base64
import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import kubernetes_validate
import pytest
import yaml

import ecotone
from ecotone.providers.k8s_manifests import (
    ManifestOptions,
    ManifestSettings,
    dns_name,
    manifests,
    render,
)
from tests.engines import env_image, podman_engine  # noqa: F401 - fixtures


def last_minors(count: int = 3) -> tuple[str, ...]:
    """The last `count` Kubernetes minor versions kubernetes-validate ships schemas for."""
    latest = kubernetes_validate.latest_version()
    major, minor, _ = (int(part) for part in latest.split("."))
    return tuple(f"{major}.{minor - back}.0" for back in range(count))


KUBERNETES_VERSIONS = ("1.29.0", *last_minors())


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_manifests_are_valid_kubernetes_objects(version: str) -> None:
    objects = manifests("counter", image="localhost/ecotone-counter:latest")
    for obj in documents(render(objects)):
        kubernetes_validate.validate(obj, version, strict=True)  # raises on any fault


def test_the_pod_is_hardened_probed_limited_and_labelled() -> None:
    secret, pod, service = manifests(
        "gymnasium:CartPole-v1", image="img", token="t0k", owner="run-7", cpu="500m"
    )
    assert pod["metadata"]["name"] == "ecotone-gymnasium-cartpole-v1"  # a DNS-1123 name
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8000}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    assert container["command"][:5] == [
        "python3",
        "-m",
        "ecotone",
        "serve",
        "gymnasium:CartPole-v1",
    ]
    token_ref = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert token_ref == {"name": secret["metadata"]["name"], "key": "token"}
    assert secret["stringData"] == {"token": "t0k"}
    for obj in (secret, pod, service):
        labels = obj["metadata"]["labels"]
        assert labels["ecotone.managed"] == "true" and labels["ecotone.owner"] == "run-7"
        assert labels["ecotone.env"] == "gymnasium-CartPole-v1"  # a valid label value
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert dns_name("--Hello World!--") == "hello-world"
    assert len(manifests("x", image="i")[0]["stringData"]["token"]) >= 32  # made when not given


def test_the_cli_writes_the_manifests(tmp_path: Path) -> None:
    out = tmp_path / "counter.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "export", "k8s", "counter", "--image", "img:1",
         "--cpu", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    objects = documents(out.read_text())
    assert [o["kind"] for o in objects] == ["Secret", "Pod", "Service"]
    assert objects[1]["spec"]["containers"][0]["image"] == "img:1"
    assert "kubectl apply -f" in done.stderr and "token" in done.stderr
    printed = subprocess.run(
        [sys.executable, "-m", "ecotone", "export", "k8s", "counter", "--image", "img:1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert [o["kind"] for o in documents(printed.stdout)] == ["Secret", "Pod", "Service"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def podman(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        ["podman", *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def test_the_manifests_options_each_land_and_an_unknown_one_is_a_type_error() -> None:
    keys = ManifestOptions.__required_keys__ | ManifestOptions.__optional_keys__
    assert keys == {f.name for f in attrs.fields(ManifestSettings)}
    with pytest.raises(
        TypeError, match=r"^manifests\(\) got unexpected keyword argument 'memroy';"
    ):
        manifests("counter", image="i", memroy="1Gi")  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"^manifests\(\) missing required keyword argument\(s\) 'image'"
    ):
        manifests("counter")  # type: ignore[call-arg]
    secret, pod, service = manifests(
        "counter", image="i", name="My Env", port=9000, memory="1Gi", host_port=30000,
        args=["--transport", "tcp"],
    )  # fmt: skip
    assert secret["metadata"]["name"] == "my-env-token" and pod["metadata"]["name"] == "my-env"
    (container,) = pod["spec"]["containers"]
    assert container["command"][-4:] == ["--port", "9000", "--transport", "tcp"]
    assert container["ports"] == [
        {"containerPort": 9000, "name": "ecotone", "protocol": "TCP", "hostPort": 30000}
    ]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert service["spec"]["ports"][0]["targetPort"] == 9000


def test_podman_kube_play_runs_the_pod_and_an_episode_plays_against_it(
    podman_engine: str,  # noqa: F811
    env_image: Callable[[str, str], str],  # noqa: F811
    tmp_path: Path,
) -> None:
    image = env_image("podman", "counter")
    port, token = free_port(), secrets.token_urlsafe(16)
    name = f"ecotone-kube-{secrets.token_hex(4)}"
    secret, pod, service = manifests(
        "counter", image=image, name=name, token=token, host_port=port, owner="pytest"
    )
    # podman 4.3 reads a secretKeyRef from a podman secret that holds the Secret's `data`
    # (values in base64, as JSON); a cluster takes the Secret object itself.
    data = {k: base64.b64encode(v.encode()).decode() for k, v in secret["stringData"].items()}
    podman("secret", "create", secret["metadata"]["name"], "-", stdin=json.dumps(data))
    path = tmp_path / "pod.yaml"
    path.write_text(render([pod, service]))
    try:
        podman("kube", "play", str(path))
        container = f"{name}-server"
        inspected = json.loads(podman("inspect", container))[0]
        assert inspected["HostConfig"]["ReadonlyRootfs"] is True
        assert inspected["Config"]["User"].startswith("65534")
        url = f"ws://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                env = ecotone.connect(url, token=token)
                break
            except (ecotone.ConnectionLost, OSError):
                if time.monotonic() > deadline:
                    raise AssertionError(podman("logs", container, check=False)) from None
                time.sleep(0.2)
        with env:
            env.reset(seed=0, target=3)
            steps = [env.step({"delta": 1}) for _ in range(3)]
            assert [s.observation["count"] for s in steps] == [1, 2, 3] and steps[-1].done
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(url)  # the Secret's token guards it
        labels = inspected["Config"]["Labels"] or {}
        del labels  # podman puts the pod's labels on the pod, not on each container
        pod_labels = json.loads(podman("pod", "inspect", name))
        pod_labels = pod_labels[0] if isinstance(pod_labels, list) else pod_labels
        assert pod_labels["Labels"]["ecotone.managed"] == "true"
    finally:
        podman("kube", "down", str(path), check=False)
        podman("secret", "rm", secret["metadata"]["name"], check=False)
