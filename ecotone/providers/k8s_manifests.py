"""Kubernetes manifests for an env server: a Secret (its token), a Pod and a Service.

`manifests(env, image=...)` gives the objects as plain data; `render(objects)` writes them as
one YAML stream (each document in JSON, which is YAML: no YAML library needed, and every
consumer reads it). What they hold:

* the Pod runs the image `ecotone build` made (`python3 -m ecotone serve ENV --host 0.0.0.0`),
  hardened: non-root (65534), a read-only root file system with a size-capped in-memory /tmp,
  no capabilities, no privilege escalation, seccomp `RuntimeDefault`, no service account
  token; CPU and memory requests and limits; a readiness probe on `GET /health`;
* the server requires its token (`ECOTONE_AUTH_TOKEN`, from the Secret); a client connects
  with `?token=` or `Authorization: Bearer`;
* the Service (ClusterIP) fronts the Pod's port;
* every object carries the owner labels `ecotone gc` and the providers use
  (`ecotone.owner`, `ecotone.env`), so what a run made can be found and removed.

`ecotone export k8s ENV --image IMAGE` prints or writes them.
"""

from __future__ import annotations

import json
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
    port = settings.port
    base = dns_name(settings.name or f"ecotone-{env}")
    labels = {
        LABEL_MANAGED: "true",
        LABEL_OWNER: _label_value(settings.owner),
        LABEL_ENV: _label_value(env),
    }
    selector = {**labels, "app.kubernetes.io/name": base}
    secret_name = f"{base}-token"
    command = ["python3", "-m", "ecotone", "serve", env, "--host", "0.0.0.0"]
    command += ["--port", str(port), *settings.args]
    container_port: dict[str, Any] = {"containerPort": port, "name": "ecotone", "protocol": "TCP"}
    if settings.host_port is not None:
        container_port["hostPort"] = settings.host_port
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name, "labels": labels},
        "type": "Opaque",
        "stringData": {"token": settings.token or secrets.token_urlsafe(24)},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": base, "labels": selector},
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": USER_ID,
                "runAsGroup": USER_ID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "server",
                    "image": settings.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "ports": [container_port],
                    "env": [
                        {
                            "name": "ECOTONE_AUTH_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "token"}},
                        },
                        {"name": "TMPDIR", "value": "/tmp"},
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/health", "port": port},
                        "periodSeconds": 2,
                        "timeoutSeconds": 2,
                        "failureThreshold": 3,
                    },
                    "resources": {
                        "requests": {"cpu": settings.cpu, "memory": settings.memory},
                        "limits": {"cpu": settings.cpu, "memory": settings.memory},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": base, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "ecotone", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return [secret, pod, service]


def render(objects: Sequence[Mapping[str, Any]]) -> str:
    """One YAML stream of `objects`, each document written as JSON (valid YAML)."""
    return "".join("---\n" + json.dumps(obj, indent=2) + "\n" for obj in objects)


__all__ = [
    "LABEL_ENV",
    "LABEL_OWNER",
    "ManifestOptions",
    "ManifestSettings",
    "dns_name",
    "manifests",
    "render",
]
