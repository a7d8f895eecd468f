"""The Deployment form of `ecotone export k8s`: what an operator commits to serve an env.

`deployment_manifests(env, image=...)` gives the objects, by file name, as plain data;
`write_kustomization(objects, folder)` writes them as YAML files with a `kustomization.yaml`
listing them (`kubectl apply -k DIR`, or a base for overlays). The objects:

* a **Secret** with the server's token;
* a **PersistentVolumeClaim** (ReadWriteMany) for the checkpoint directory every replica
  shares: a session checkpointed by a draining pod is resumed by another
  (`connect(url, resume=True)`); the snapshot key is kept there too (`serve
  --checkpoint-dir`), so every replica opens what any of them sealed;
* a **Deployment** of `replicas` pods, each the hardened container of the Pod form
  (`k8s_manifests.server_container`), probed for readiness on `/ready` (ready while it has
  room for a session and is not draining) and for liveness on `/health`; a rolling update
  that never takes a ready pod away before its successor is ready; on deletion, `preStop`
  waits `prestop_seconds` (the endpoints stop routing to the pod), then SIGTERM drains the
  server (`drain_timeout`), checkpoints what is left and closes (`shutdown_timeout`, twice:
  checkpoints, then closes); `terminationGracePeriodSeconds` is at least their sum;
* a **Service** (ClusterIP) over the pods;
* a **HorizontalPodAutoscaler** (`autoscaling/v2`) between `min_replicas` and
  `max_replicas`, on CPU utilization and on the pods' session occupancy
  (`ecotone_sessions_occupancy`, open sessions over `max_sessions`, which `/metrics`
  exports): the latter reaches the autoscaler through the custom metrics API, which needs an
  adapter (prometheus-adapter) in the cluster (docs/providers.md);
* a **PodDisruptionBudget** (at most one pod voluntarily disrupted at a time);
* a **NetworkPolicy** admitting to the server's port only the pods `allow_from` selects (the
  trainer's), in the same namespace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Required, TypedDict, Unpack

import attrs

from ecotone.providers.contract import SERVE_PORT
from ecotone.providers.k8s_manifests import (
    ServerContainer,
    dns_name,
    owner_labels,
    pod_spec,
    render,
    server_container,
    service,
    token_secret,
)
from ecotone.specs.keywords import from_keywords

CHECKPOINT_DIR: Final = "/var/lib/ecotone/checkpoints"
"""Where the pods mount the shared checkpoint storage."""
OCCUPANCY_METRIC: Final = "ecotone_sessions_occupancy"
"""The custom metric the autoscaler reads: open sessions over capacity (0 to 1)."""
DEFAULT_CLIENT_LABEL: Final = {"ecotone.client": "true"}
"""The label of the pods the NetworkPolicy admits when none is given."""
HARD_EXIT_GRACE: Final = 5
"""Seconds the server itself adds past its timeouts before it exits whatever holds on
(`ecotone serve`): the grace period covers them too."""


class DeploymentOptions(TypedDict, total=False):
    """`deployment_manifests`' keyword options (see it)."""

    image: Required[str]
    name: str | None
    owner: str
    port: int
    token: str | None
    cpu: str
    memory: str
    replicas: int
    min_replicas: int | None
    max_replicas: int | None
    allow_from: Mapping[str, str] | None
    storage: str
    storage_class: str | None
    drain_timeout: float
    shutdown_timeout: float
    prestop_seconds: int
    target_cpu: int
    target_occupancy: float
    max_sessions: int | None
    host_port: int | None
    args: Sequence[str]


@attrs.frozen(kw_only=True, slots=True)
class DeploymentSettings:
    """`deployment_manifests`' options once checked, with their defaults."""

    image: str
    name: str | None = None
    owner: str = "export"
    port: int = SERVE_PORT
    token: str | None = None
    cpu: str = "1"
    memory: str = "512Mi"
    replicas: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    min_replicas: int | None = None
    max_replicas: int | None = None
    allow_from: Mapping[str, str] | None = None
    storage: str = "1Gi"
    storage_class: str | None = None
    drain_timeout: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    shutdown_timeout: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    prestop_seconds: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    target_cpu: int = attrs.field(default=70, validator=attrs.validators.in_(range(1, 101)))
    target_occupancy: float = attrs.field(default=0.8)
    max_sessions: int | None = None
    host_port: int | None = None
    args: Sequence[str] = ()

    @target_occupancy.validator
    def _occupancy(self, attribute: Any, value: float) -> None:
        if not 0 < value <= 1:
            raise ValueError(f"target_occupancy must be in (0, 1], got {value!r}")

    def bounds(self) -> tuple[int, int]:
        """The autoscaler's (min, max) replicas: `min_replicas` (else `replicas`) and
        `max_replicas` (else four times the minimum)."""
        low = self.min_replicas if self.min_replicas is not None else self.replicas
        high = self.max_replicas if self.max_replicas is not None else max(low * 4, low + 1)
        if low < 1 or high < low:
            raise ValueError(f"need 1 <= --min <= --max, got min {low}, max {high}")
        return low, high


def grace_seconds(s: DeploymentSettings) -> int:
    """`terminationGracePeriodSeconds`: preStop, the drain, the checkpoints and the closes
    (`shutdown_timeout` each), and the server's own margin, rounded up."""
    return math.ceil(s.prestop_seconds + s.drain_timeout + 2 * s.shutdown_timeout) + (
        HARD_EXIT_GRACE
    )


_LABEL_KEY: Final = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*)?$")
_LABEL_VALUE: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def parse_selector(text: str) -> dict[str, str]:
    """`KEY=VALUE[,KEY=VALUE...]` as matchLabels. Raises ValueError when it is not one."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ValueError(
                f"not a label selector: {text!r} (give KEY=VALUE[,KEY=VALUE...], the labels "
                "of the trainer's pods)"
            )
        labels[key] = value
    return labels


def deployment_manifests(env: str, **options: Unpack[DeploymentOptions]) -> dict[str, Any]:
    """The objects that serve `env` as an operator runs it, by file name (module docstring).

    Keyword options (`DeploymentOptions`; any other keyword is a TypeError that names it):

    - `image` (required), `name`, `owner`, `port`, `token`, `cpu`, `memory`, `host_port`,
      `args`: as `k8s_manifests.manifests`' (the objects are named after `name`, else
      "ecotone-ENV");
    - `replicas` (2): the Deployment's; `min_replicas`, `max_replicas` (`replicas`, and four
      times that): the autoscaler's bounds;
    - `allow_from` (None: `ecotone.client=true`): the labels of the pods the NetworkPolicy
      lets reach the server;
    - `storage` ("1Gi"), `storage_class` (None: the cluster's default): the checkpoint
      claim's size and class (the class must offer ReadWriteMany);
    - `drain_timeout` (30), `shutdown_timeout` (10), `prestop_seconds` (5): the shutdown's
      phases, in seconds (`grace_seconds` makes the grace period of them);
    - `target_cpu` (70, percent of the request) and `target_occupancy` (0.8 of
      `max_sessions`): the autoscaler's targets; `max_sessions` (None: the server's default)
      is passed to the server.
    """
    s = from_keywords(DeploymentSettings, options, "deployment_manifests")
    low, high = s.bounds()
    base = dns_name(s.name or f"ecotone-{env}")
    labels = owner_labels(env, s.owner)
    selector = {**labels, "app.kubernetes.io/name": base}
    secret = token_secret(f"{base}-token", labels, s.token)
    claim = f"{base}-checkpoints"
    args = ["--checkpoint-dir", CHECKPOINT_DIR, "--drain-timeout", f"{s.drain_timeout:g}"]
    args += ["--shutdown-timeout", f"{s.shutdown_timeout:g}"]
    if s.max_sessions is not None:
        args += ["--max-sessions", str(s.max_sessions)]
    container = server_container(
        env,
        ServerContainer(
            image=s.image,
            port=s.port,
            secret=secret["metadata"]["name"],
            cpu=s.cpu,
            memory=s.memory,
            host_port=s.host_port,
            args=(*args, *s.args),
            mounts=({"name": "checkpoints", "mountPath": CHECKPOINT_DIR},),
            lifecycle={"preStop": _prestop(s.prestop_seconds)},
        ),
    )
    spec = pod_spec(
        [container], [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}}]
    )
    spec["securityContext"]["fsGroup"] = spec["securityContext"]["runAsGroup"]
    spec["terminationGracePeriodSeconds"] = grace_seconds(s)
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(s.port),
        "prometheus.io/path": "/metrics",
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": base, "labels": labels},
        "spec": {
            "replicas": s.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": selector, "annotations": annotations},
                "spec": spec,
            },
        },
    }
    volume_claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": s.storage}},
        },
    }
    if s.storage_class is not None:
        volume_claim["spec"]["storageClassName"] = s.storage_class
    allowed = dict(s.allow_from or DEFAULT_CLIENT_LABEL)
    return {
        "secret.yaml": secret,
        "checkpoints.yaml": volume_claim,
        "deployment.yaml": deployment,
        "service.yaml": service(base, labels, selector, s.port),
        "autoscaler.yaml": _autoscaler(base, labels, (low, high), s),
        "disruption-budget.yaml": {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": base, "labels": labels},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
        },
        "network-policy.yaml": {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": base, "labels": labels},
            "spec": {
                "podSelector": {"matchLabels": selector},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": allowed}}],
                        "ports": [{"protocol": "TCP", "port": s.port}],
                    }
                ],
            },
        },
    }


def _prestop(seconds: int) -> dict[str, Any]:
    """Wait `seconds` before SIGTERM, so the endpoints stop routing to the pod first (with
    the image's python3: the hook runs in the container, which may have no `sleep`)."""
    return {"exec": {"command": ["python3", "-c", f"import time; time.sleep({seconds})"]}}


def _autoscaler(
    name: str, labels: Mapping[str, str], bounds: tuple[int, int], s: DeploymentSettings
) -> dict[str, Any]:
    low, high = bounds
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": s.target_cpu},
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": OCCUPANCY_METRIC},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": f"{round(s.target_occupancy * 1000)}m",
                        },
                    },
                },
            ],
            # Scale down slowly: a pod going away drains its sessions (and costs them a resume).
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                }
            },
        },
    }


def write_kustomization(objects: Mapping[str, Any], folder: str | Path) -> list[Path]:
    """Write `objects` (by file name) into `folder` (made if missing), one YAML file each, and
    a `kustomization.yaml` listing them. Returns the files written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, obj in objects.items():
        path = out / name
        path.write_text(render([obj]), encoding="utf-8")
        written.append(path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(objects),
    }
    path = out / "kustomization.yaml"
    path.write_text(render([kustomization]), encoding="utf-8")
    return [*written, path]


__all__ = [
    "CHECKPOINT_DIR",
    "OCCUPANCY_METRIC",
    "DeploymentOptions",
    "DeploymentSettings",
    "deployment_manifests",
    "grace_seconds",
    "parse_selector",
    "write_kustomization",
]
