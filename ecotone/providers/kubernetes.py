"""The `kubernetes` provider: an env server as a Pod (and a Service, and a Secret with its
token) created through the Kubernetes API with the official `kubernetes` client.

    with ecotone.launch("counter", provider="kubernetes", image="registry/ecotone-counter",
                        namespace="rl", reach="service") as env:
        env.reset(seed=0)

Needs `pip install 'ecotone[kubernetes]'`. The objects are `ecotone export k8s`'s
(`ecotone/providers/k8s_manifests.py`): a hardened Pod (non-root, read-only root, no capabilities,
seccomp RuntimeDefault, no service account token, resource limits from the spec, a readiness
probe on /health), a ClusterIP Service, a Secret holding a fresh token. The rules it keeps,
beyond the provider contract:

- Where: `kubeconfig` (a file; else `$KUBECONFIG`, else ~/.kube/config, else the in-cluster
  service account), `context`, `namespace` (default `default`); `port`: the server's port in
  the Pod and on the Service (8000).
- Ready: the Pod is Running with its Ready condition True (the kubelet's probe passed), then
  the provider probes the server itself from here. A container that waits with ErrImagePull,
  ImagePullBackOff or InvalidImageName is `ImageNotFound`; CrashLoopBackOff, a Pod that
  failed, or a refused object is `StartFailed` with what the API said.
- How the launcher reaches it (`reach`): `service` (default: the Service's cluster DNS name,
  for a launcher inside the cluster), or `pod` (the Pod's IP: a launcher on the cluster's
  network). The handle's URL carries the token.
- `stop()` deletes the Pod, the Service and the Secret. Each object has the owner labels
  (`ecotone.managed`, `ecotone.owner`, `ecotone.env`) and the Pod the owner's full label as an
  annotation; `gc()` (with a kubeconfig found, or in a cluster) deletes, in every namespace
  it may list, the objects of Pods whose owner is gone.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import attrs

from ecotone.providers.contract import (
    EngineUnavailable,
    ImageNotFound,
    LaunchSpec,
    ReadinessTimeout,
    StartFailed,
    check_spec,
    default_image,
)
from ecotone.providers.k8s_manifests import dns_name
from ecotone.providers.owner import LABEL_MANAGED, owner_alive, owner_label
from ecotone.providers.ready import wait_ready
from ecotone.specs.hookspecs import hookimpl

log = logging.getLogger("ecotone.launcher")

OPTIONS: Final = ("kubeconfig", "context", "namespace", "reach", "port")
REACH: Final = ("service", "pod")
OWNER_ANNOTATION: Final = "ecotone.dev/owner"
IMAGE_MISSING: Final = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CRASHING: Final = ("CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError")
POLL_S: Final = 0.25


def _client() -> Any:
    try:
        import kubernetes
    except ImportError as exc:
        raise EngineUnavailable(
            "the kubernetes provider needs the `kubernetes` package "
            "(pip install 'ecotone[kubernetes]')"
        ) from exc
    return kubernetes


def api(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A CoreV1Api for the cluster of `kubeconfig` (else $KUBECONFIG, ~/.kube/config, else
    the in-cluster service account); EngineUnavailable if there is none."""
    kubernetes = _client()
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        if Path(path).exists():
            client = kubernetes.config.new_client_from_config(config_file=path, context=context)
        else:
            kubernetes.config.load_incluster_config()
            client = kubernetes.client.ApiClient()
    except Exception as exc:
        raise EngineUnavailable(f"no Kubernetes cluster configured ({path}): {exc}") from exc
    return kubernetes.client.CoreV1Api(client)


def _options(spec: LaunchSpec) -> dict[str, Any]:
    check_spec(spec)
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"the kubernetes provider has no option {unknown[0]!r} (options: {', '.join(OPTIONS)})"
        )
    reach = spec.options.get("reach", "service")
    if reach not in REACH:
        raise ValueError(f"reach must be one of {', '.join(REACH)}, got {reach!r}")
    if spec.transport == "unix":
        raise ValueError("the kubernetes provider serves over the network: no `unix` transport")
    return dict(spec.options)


def objects(spec: LaunchSpec, name: str, token: str) -> list[dict[str, Any]]:
    """The Secret, Pod and Service for `spec` (the export's, with this run's owner)."""
    from ecotone.providers.contract import SERVE_PORT
    from ecotone.providers.k8s_manifests import manifests

    cpu = spec.resources.cpus
    memory = spec.resources.memory_mb
    args = ["--transport", spec.transport] if spec.transport != "websocket" else []
    if spec.max_sessions is not None:
        args += ["--max-sessions", str(spec.max_sessions)]
    made = manifests(
        spec.env,
        image=spec.image or default_image(spec.env),
        port=int(spec.options.get("port", SERVE_PORT)),
        name=name,
        owner=owner_label(),
        token=token,
        cpu=f"{cpu:g}" if cpu else "1",
        memory=f"{memory}Mi" if memory else "512Mi",
        args=args,
    )
    secret, pod, _service = made
    pod["metadata"]["annotations"] = {OWNER_ANNOTATION: owner_label()}
    for obj in made:
        obj["metadata"]["labels"].update(
            {k: v for k, v in spec.labels.items() if not k.startswith("ecotone.")}
        )
    containers = pod["spec"]["containers"]
    containers[0]["env"] += [{"name": k, "value": v} for k, v in spec.environment.items()]
    if spec.secrets:  # the spec's secrets travel in the Secret too, never in the Pod's text
        secret["stringData"].update(
            {k.lower().replace("_", "-"): v for k, v in spec.secrets.items()}
        )
        containers[0]["env"] += [
            {
                "name": k,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": secret["metadata"]["name"],
                        "key": k.lower().replace("_", "-"),
                    }
                },
            }
            for k in spec.secrets
        ]
    return made


def _waiting_reason(pod: Any) -> tuple[str, str]:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason:
            return str(waiting.reason), str(waiting.message or "")
    return "", ""


def _ready(pod: Any) -> bool:
    if pod.status is None or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@attrs.define(eq=False)
class KubernetesServer:
    url: str
    id: str
    namespace: str
    api: Any
    secret: str
    provider: str = "kubernetes"
    _stopped: bool = False
    _last_logs: str = ""

    async def alive(self) -> bool:
        if self._stopped:
            return False

        def ask() -> bool:
            try:
                pod = self.api.read_namespaced_pod(self.id, self.namespace)
            except Exception:
                return False
            return bool(pod.status and pod.status.phase in ("Pending", "Running"))

        return await anyio.to_thread.run_sync(ask)

    async def logs(self, tail: int | None = 200) -> str:
        if self._stopped:
            return self._last_logs

        def ask() -> str:
            try:
                kwargs = {"tail_lines": tail} if tail is not None else {}
                return str(self.api.read_namespaced_pod_log(self.id, self.namespace, **kwargs))
            except Exception as exc:
                return f"(no logs: {type(exc).__name__}: {exc})"

        return await anyio.to_thread.run_sync(ask)

    async def stop(self, timeout: float = 10.0) -> None:
        if self._stopped:
            return
        with anyio.CancelScope(shield=True):  # a cancelled caller still removes everything
            self._last_logs = await self.logs(200)
            self._stopped = True
            await anyio.to_thread.run_sync(
                _delete, self.api, self.namespace, self.id, self.secret, timeout
            )


def _delete(core: Any, namespace: str, name: str, secret: str, timeout: float) -> list[str]:
    removed = []
    grace = max(0, int(timeout))
    for kind, call, target in (
        ("pod", core.delete_namespaced_pod, name),
        ("service", core.delete_namespaced_service, name),
        ("secret", core.delete_namespaced_secret, secret),
    ):
        try:
            call(target, namespace, grace_period_seconds=grace)
            removed.append(f"{kind} {namespace}/{target}")
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                log.warning(
                    "kubernetes: deleting %s %s/%s failed: %s", kind, namespace, target, exc
                )
    return removed


class KubernetesProvider:
    name = "kubernetes"
    description = "env servers as hardened Pods, through the Kubernetes API"

    async def start(self, spec: LaunchSpec) -> KubernetesServer:
        options = _options(spec)
        namespace = str(options.get("namespace", "default"))
        core = await anyio.to_thread.run_sync(
            api, options.get("kubeconfig"), options.get("context")
        )
        # A DNS-1123 label of at most 63 characters whose random end survives: the Secret is
        # named NAME-token, so NAME keeps to 57.
        name = f"{dns_name(f'ecotone-{spec.env}', 48)}-{secrets.token_hex(4)}"
        token = secrets.token_urlsafe(24)
        secret, pod, service = objects(spec, name, token)
        name = pod["metadata"]["name"]
        secret_name = secret["metadata"]["name"]
        deadline = time.monotonic() + spec.ready_timeout

        def create() -> None:
            kubernetes = _client()
            try:
                core.create_namespaced_secret(namespace, secret)
                core.create_namespaced_pod(namespace, pod)
                core.create_namespaced_service(namespace, service)
            except kubernetes.client.ApiException as exc:
                raise StartFailed(
                    f"the API refused the {spec.env} server: {exc.status} {exc.reason}: {exc.body}"
                ) from exc

        def check() -> Any:
            """The Pod once ready, None while it is on its way; an error once it cannot be."""
            got = core.read_namespaced_pod(name, namespace)
            if _ready(got):
                return got
            reason, message = _waiting_reason(got)
            phase = got.status.phase if got.status else "?"
            if reason in IMAGE_MISSING:
                image = pod["spec"]["containers"][0]["image"]
                raise ImageNotFound(
                    f"the cluster cannot get the image {image!r} ({reason}: {message}): "
                    "push it to a registry the cluster pulls from"
                )
            if reason in CRASHING or phase in ("Failed", "Succeeded"):
                logs = ""
                try:
                    logs = str(core.read_namespaced_pod_log(name, namespace, tail_lines=40))
                except Exception:
                    pass
                raise StartFailed(
                    f"the {spec.env} server's Pod {reason or phase}: {message}\n{logs}"
                )
            if time.monotonic() > deadline:
                raise ReadinessTimeout(
                    f"the {spec.env} server's Pod was not ready in {spec.ready_timeout:g} s "
                    f"(phase {phase}, {reason or 'no reason given'})"
                )
            return None

        try:
            await anyio.to_thread.run_sync(create)
            while True:  # polling the API: nothing here to wait on instead
                ready = await anyio.to_thread.run_sync(check)
                if ready is not None:
                    break
                await anyio.sleep(POLL_S)  # a cancellation lands here, or after one read
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_delete, core, namespace, name, secret_name, 0.0)
            raise
        port = service["spec"]["ports"][0]["port"]
        if options.get("reach", "service") == "pod":
            host = ready.status.pod_ip
        else:
            host = f"{name}.{namespace}.svc.cluster.local"
        scheme = "http" if spec.transport == "http" else "tcp" if spec.transport == "tcp" else "ws"
        url = f"{scheme}://{host}:{port}?token={token}"
        server = KubernetesServer(url, name, namespace, core, secret_name)
        remaining = anyio.current_time() + max(deadline - time.monotonic(), 1.0)
        try:
            answered = await wait_ready(url, remaining, alive=server.alive)
        except TimeoutError as exc:
            await server.stop(0)
            raise ReadinessTimeout(
                f"the {spec.env} server's Pod is ready but does not answer at {host}:{port} from "
                f"here ({exc}): with reach=service the launcher must run inside the cluster"
            ) from exc
        except BaseException:
            await server.stop(0)
            raise
        if not answered:
            logs = await server.logs(40)
            await server.stop(0)
            raise StartFailed(f"the {spec.env} server's Pod stopped:\n{logs}")
        return server

    async def gc(self) -> list[str]:
        try:
            core = await anyio.to_thread.run_sync(api, None, None)
        except EngineUnavailable:
            return []
        return await anyio.to_thread.run_sync(_gc, core)


def _gc(core: Any) -> list[str]:
    removed: list[str] = []
    try:
        pods = core.list_pod_for_all_namespaces(label_selector=f"{LABEL_MANAGED}=true")
    except Exception as exc:
        log.warning("kubernetes gc: cannot list pods: %s", exc)
        return removed
    for pod in pods.items:
        meta = pod.metadata
        owner = (meta.annotations or {}).get(OWNER_ANNOTATION, "")
        if not owner or owner_alive(owner):
            continue
        secret = f"{meta.name}-token"
        removed += _delete(core, meta.namespace, meta.name, secret, 0.0)
    return removed


PROVIDER = KubernetesProvider()


@hookimpl
def ecotone_providers() -> Mapping[str, Any]:
    return {"kubernetes": PROVIDER}


__all__ = ["PROVIDER", "KubernetesProvider", "KubernetesServer", "api", "objects"]
