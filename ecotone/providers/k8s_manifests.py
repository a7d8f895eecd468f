"""Kubernetes manifests for an env server, and the parts both of its forms are made of.

Two forms. `manifests(env, image=...)` is the one-off run: a Secret (the token), a Pod and a
Service, as plain data (what the kubernetes provider makes through the API, and `ecotone
export k8s` writes). The Deployment form an operator commits (Deployment, autoscaler,
disruption budget, network policy, shared checkpoint storage) is `k8s_deployment.py`, on the
parts here. `render(objects)` writes objects as one YAML stream (PyYAML). What they hold:

* the container runs the image `ecotone build` made (`python3 -m ecotone serve ENV --host
  0.0.0.0`), hardened: non-root (65534), a read-only root file system with a size-capped
  in-memory /tmp, no capabilities, no privilege escalation, seccomp `RuntimeDefault`, no
  service account token; CPU and memory requests and limits; a readiness probe on
  `GET /ready` (ready while the server has room and is not draining) and a liveness probe on
  `GET /health`;
* the server requires its token (`ECOTONE_AUTH_TOKEN`, from the Secret); a client connects
  with `?token=` or `Authorization: Bearer`;
* the Service (ClusterIP) fronts the pods' port;
* every object carries the owner labels `ecotone gc` and the providers use
  (`ecotone.owner`, `ecotone.env`), so what a run made can be found and removed.

`ecotone export k8s ENV --image IMAGE` prints or writes them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final, Required, TypedDict, Unpack

import attrs

from ecotone.providers.contract import SERVE_PORT
from ecotone.providers.owner import LABEL_ENV, LABEL_MANAGED, LABEL_OWNER
from ecotone.specs.keywords import from_keywords

USER_ID: Final = 65534
TMP_SIZE: Final = "64Mi"


def dns_name(text: str, limit: int = 63) -> str:
    """`text` as a DNS-1123 label (lower case, digits, `-`), as object names must be."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name[:limit].rstrip("-")) or "env"


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return value[:63].rstrip("-_.") or "env"


class ManifestOptions(TypedDict, total=False):
    """`manifests`' keyword options, as its callers pass them (see `manifests`)."""

    image: Required[str]
    name: str | None
    owner: str
    port: int
    token: str | None
    cpu: str
    memory: str
    host_port: int | None
    args: Sequence[str]


@attrs.frozen(kw_only=True, slots=True)
class ManifestSettings:
    """What the manifests say: `manifests`' options once checked, with their defaults."""

    image: str
    name: str | None = None
    owner: str = "export"
    port: int = SERVE_PORT
    token: str | None = None
    cpu: str = "1"
    memory: str = "512Mi"
    host_port: int | None = None
    args: Sequence[str] = ()


def manifests(env: str, **options: Unpack[ManifestOptions]) -> list[dict[str, Any]]:
    """The Secret, Pod and Service that serve `env`.

    Keyword options (`ManifestOptions`; any other keyword is a TypeError that names it):

    - `image` (required): the image the Pod runs (`ecotone build` makes one);
    - `name` (None: "ecotone-ENV"): the objects' name, made a DNS-1123 label (the Secret's
      with `-token` after it);
    - `owner` ("export"): the `ecotone.owner` label's value;
    - `port` (`SERVE_PORT`, 8000): the port the server listens on and the Service fronts;
    - `token` (None: a new random one): the server's token, in the Secret;
    - `cpu` ("1"), `memory` ("512Mi"): the container's requests and limits;
    - `host_port` (None: none): also publish the port on the node (what `podman kube
      play` maps to the host; clusters reach the Service instead);
    - `args` (()): more `ecotone serve` arguments (`--transport`, `--max-sessions`...).
    """
    settings = from_keywords(ManifestSettings, options, "manifests")
    base = dns_name(settings.name or f"ecotone-{env}")
    labels = owner_labels(env, settings.owner)
    selector = {**labels, "app.kubernetes.io/name": base}
    secret = token_secret(f"{base}-token", labels, settings.token)
    container = server_container(
        env,
        ServerContainer(
            image=settings.image,
            port=settings.port,
            secret=secret["metadata"]["name"],
            cpu=settings.cpu,
            memory=settings.memory,
            host_port=settings.host_port,
            args=tuple(settings.args),
        ),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": base, "labels": selector},
        "spec": {"restartPolicy": "Always", **pod_spec([container])},
    }
    return [secret, pod, service(base, labels, selector, settings.port)]


def owner_labels(env: str, owner: str) -> dict[str, str]:
    """The labels every object carries: managed by ecotone, whose, which env."""
    return {
        LABEL_MANAGED: "true",
        LABEL_OWNER: _label_value(owner),
        LABEL_ENV: _label_value(env),
    }


def token_secret(name: str, labels: Mapping[str, str], token: str | None) -> dict[str, Any]:
    """The Secret holding the server's token (a new random one for None)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": dict(labels)},
        "type": "Opaque",
        "stringData": {"token": token or secrets.token_urlsafe(24)},
    }


@attrs.frozen(kw_only=True, slots=True)
class ServerContainer:
    """What the server's container is made of (`server_container`)."""

    image: str
    port: int
    secret: str
    """The Secret holding the token (key `token`)."""
    cpu: str
    memory: str
    host_port: int | None = None
    args: tuple[str, ...] = ()
    ready_path: str = "/ready"
    """The readiness probe's path: `/ready` (has room, not draining)."""
    mounts: tuple[Mapping[str, Any], ...] = ()
    """Volume mounts beside the in-memory /tmp."""
    lifecycle: Mapping[str, Any] | None = None


def server_container(env: str, c: ServerContainer) -> dict[str, Any]:
    """The hardened container running `ecotone serve ENV` (module docstring)."""
    command = ["python3", "-m", "ecotone", "serve", env, "--host", "0.0.0.0"]
    command += ["--port", str(c.port), *c.args]
    container_port: dict[str, Any] = {"containerPort": c.port, "name": "ecotone", "protocol": "TCP"}
    if c.host_port is not None:
        container_port["hostPort"] = c.host_port
    container: dict[str, Any] = {
        "name": "server",
        "image": c.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "ports": [container_port],
        "env": [
            {
                "name": "ECOTONE_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": c.secret, "key": "token"}},
            },
            {"name": "TMPDIR", "value": "/tmp"},
        ],
        "readinessProbe": {
            "httpGet": {"path": c.ready_path, "port": c.port},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 1,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": c.port},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "resources": {
            "requests": {"cpu": c.cpu, "memory": c.memory},
            "limits": {"cpu": c.cpu, "memory": c.memory},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *map(dict, c.mounts)],
    }
    if c.lifecycle is not None:
        container["lifecycle"] = dict(c.lifecycle)
    return container


def pod_spec(
    containers: Sequence[Mapping[str, Any]], volumes: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A pod's spec around `containers`: non-root, seccomp, no service account token, an
    in-memory /tmp (and `volumes`)."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": USER_ID,
            "runAsGroup": USER_ID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [dict(c) for c in containers],
        "volumes": [
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
            *map(dict, volumes),
        ],
    }


def service(
    name: str, labels: Mapping[str, str], selector: Mapping[str, str], port: int
) -> dict[str, Any]:
    """A ClusterIP Service fronting the server's port on the pods `selector` picks."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [{"name": "ecotone", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def render(objects: Sequence[Mapping[str, Any]]) -> str:
    """One YAML stream of `objects` (PyYAML, block style, keys in the order written)."""
    import yaml

    return yaml.safe_dump_all(
        [_plain(obj) for obj in objects], sort_keys=False, explicit_start=True, width=100
    )


def _plain(value: Any) -> Any:
    """`value` with every mapping a dict and every sequence a list (what `safe_dump` takes)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


__all__ = [
    "LABEL_ENV",
    "LABEL_OWNER",
    "ManifestOptions",
    "ManifestSettings",
    "ServerContainer",
    "dns_name",
    "manifests",
    "owner_labels",
    "pod_spec",
    "render",
    "server_container",
    "service",
    "token_secret",
]
