"""A stand-in for the Kubernetes API server, for tests of the `kubernetes` provider: a real
HTTP server on 127.0.0.1 that answers the v1 calls the provider makes with objects shaped as
the API reference gives them (Pod with status, conditions and containerStatuses; Service
with clusterIP; Secret; PodList; Status for errors), and records every call. Scenarios say
how a Pod behaves: it becomes ready at a given address, waits with a reason, stays pending,
or its creation is refused."""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ecotone.providers.owner import owner_label

NOW = "2026-12-01T12:00:00Z"
NAMESPACED = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|services|secrets)(?:/([^/]+))?(/log)?$")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
KINDS = {"pods": "Pod", "services": "Service", "secrets": "Secret"}


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def dead_owner() -> str:
    """An owner label of this machine, boot and pid namespace whose process is gone."""
    parts = owner_label().split("/")
    parts[-2] = "4194303"  # above any pid_max: no such process
    return "/".join(parts)


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self.reads: dict[str, int] = {}
        self.scenario: dict[str, Any] = {"mode": "ready", "ip": "127.0.0.1"}
        self.lock = threading.Lock()
        self.config_path = Path()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("content-length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _send(self, code: int, payload: Any, content: str = "application/json") -> None:
                data = (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                )
                self.send_response(code)
                self.send_header("content-type", content)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                code, payload = fake.handle("POST", self.path, self._body())
                self._send(code, payload)

            def do_GET(self) -> None:
                code, payload = fake.handle("GET", self.path, None)
                self._send(
                    code, payload, "text/plain" if isinstance(payload, str) else "application/json"
                )

            def do_DELETE(self) -> None:
                code, payload = fake.handle("DELETE", self.path, None)
                self._send(code, payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- scenarios -----------------------------------------------------------------------------

    def pod_runs_at(self, url: str) -> None:
        """Pods become Running and Ready, with the IP of `url` (a real server there)."""
        self.scenario = {"mode": "ready", "ip": urlsplit(url).hostname}

    def pod_waits_with(self, reason: str) -> None:
        self.scenario = {"mode": "waiting", "reason": reason}

    def pod_stays_pending(self) -> None:
        self.scenario = {"mode": "pending"}

    def refuse_pods(self, code: int, reason: str, message: str) -> None:
        self.scenario = {"mode": "refuse", "code": code, "reason": reason, "message": message}

    def add_pod(self, namespace: str, name: str, owner: str) -> None:
        label = dead_owner() if owner == "gone" else owner_label()
        for resource, obj_name in (
            ("pods", name),
            ("services", name),
            ("secrets", f"{name}-token"),
        ):
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": KINDS[resource],
                "metadata": {"name": obj_name, "labels": {"ecotone.managed": "true"}},
            }
            if resource == "pods":
                body["metadata"]["annotations"] = {"ecotone.dev/owner": label}
                body["spec"] = {"containers": [{"name": "server", "image": "x"}]}
            if resource == "services":
                body["spec"] = {"ports": [{"port": 8000}], "selector": {"app": name}}
            self._store(namespace, resource, body)

    # --- what happened -------------------------------------------------------------------------

    def created(self) -> list[dict[str, Any]]:
        return [c["body"] for c in self.calls if c["verb"] == "POST"]

    def live_objects(self) -> list[dict[str, str]]:
        return [{"resource": r, "namespace": ns, "name": n} for (ns, r, n) in self.objects]

    def kubeconfig(self, path: Path) -> Path:
        host, port = self.server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}"}}],
            "users": [{"name": "ci", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "ci"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        self.config_path = path
        return path

    # --- the API -------------------------------------------------------------------------------

    def _store(self, namespace: str, resource: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=str(len(self.objects) + 1),
            creationTimestamp=NOW,
        )
        if resource == "pods":
            obj["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        if resource == "services":
            obj["spec"].setdefault("clusterIP", "10.96.12.34")
            obj["spec"]["clusterIPs"] = [obj["spec"]["clusterIP"]]
            obj["spec"]["ipFamilies"] = ["IPv4"]
            obj["status"] = {"loadBalancer": {}}
        if resource == "secrets":  # the API keeps stringData as base64 data
            import base64

            data = obj.pop("stringData", {})
            obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        self.objects[(namespace, resource, meta["name"])] = obj
        return obj

    def _pod_now(self, pod: dict[str, Any]) -> dict[str, Any]:
        name = pod["metadata"]["name"]
        self.reads[name] = self.reads.get(name, 0) + 1
        mode = self.scenario["mode"]
        container = pod["spec"]["containers"][0]
        base_status = {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
        }
        if mode == "pending" or (self.reads[name] == 1 and mode == "ready"):
            waiting = {"waiting": {"reason": "ContainerCreating"}}
            pod["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{**base_status, "state": waiting}],
                "qosClass": "Guaranteed",
            }
        elif mode == "waiting":
            reason = self.scenario["reason"]
            waiting = {
                "waiting": {"reason": reason, "message": f"{reason} for {container['image']}"}
            }
            pod["status"] = {
                "phase": "Pending" if "Image" in reason else "Running",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                ],
                "containerStatuses": [{**base_status, "state": waiting, "restartCount": 3}],
                "qosClass": "Guaranteed",
            }
        else:
            pod["status"] = {
                "phase": "Running",
                "podIP": self.scenario["ip"],
                "podIPs": [{"ip": self.scenario["ip"]}],
                "hostIP": "10.0.0.7",
                "startTime": NOW,
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": NOW},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodScheduled", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        **base_status,
                        "ready": True,
                        "started": True,
                        "imageID": "registry.example/ecotone-counter@sha256:" + "0" * 64,
                        "containerID": "containerd://" + "1" * 64,
                        "state": {"running": {"startedAt": NOW}},
                    }
                ],
                "qosClass": "Guaranteed",
            }
        return pod

    def handle(self, verb: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        parts = urlsplit(path)
        with self.lock:
            if parts.path == "/api/v1/pods" and verb == "GET":
                selector = parse_qs(parts.query).get("labelSelector", [""])[0]
                key, _, value = selector.partition("=")
                items = [
                    o
                    for (ns, r, n), o in self.objects.items()
                    if r == "pods"
                    and (not key or o["metadata"].get("labels", {}).get(key) == value)
                ]
                self.calls.append({"verb": verb, "resource": "pods", "list": selector})
                return 200, {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(len(self.objects))},
                    "items": items,
                }
            match = NAMESPACED.match(parts.path)
            if match is None:
                return 404, status(404, "NotFound", f"the server could not find {parts.path}")
            namespace, resource, name, log = match.groups()
            self.calls.append(
                {
                    "verb": verb,
                    "namespace": namespace,
                    "resource": resource,
                    "name": name,
                    "body": body,
                }
            )
            if verb == "POST":
                assert body is not None
                if resource == "pods" and self.scenario["mode"] == "refuse":
                    s = self.scenario
                    return s["code"], status(s["code"], s["reason"], s["message"], kind="pods")
                name = body["metadata"]["name"]
                if not DNS_LABEL.fullmatch(name):
                    message = (
                        f'{KINDS[resource]} "{name}" is invalid: metadata.name: Invalid value: '
                        f'"{name}": a lowercase RFC 1123 label must consist of lower case '
                        "alphanumeric characters or '-'"
                    )
                    return 422, status(422, "Invalid", message, name=name, kind=resource)
                if (namespace, resource, name) in self.objects:
                    message = f'{resource} "{name}" already exists'
                    return 409, status(409, "AlreadyExists", message, name=name, kind=resource)
                return 201, self._store(namespace, resource, body)
            obj = self.objects.get((namespace, resource, name or ""))
            if obj is None:
                message = f'{resource} "{name}" not found'
                return 404, status(404, "NotFound", message, name=name, kind=resource)
            if verb == "DELETE":
                del self.objects[(namespace, resource, name or "")]
                if resource == "secrets":
                    return 200, status(200, "", "", name=name, kind=resource)
                return 200, obj
            if log:
                return 200, "ecotone: serving 'counter' over websocket at ws://0.0.0.0:8000\n"
            return 200, self._pod_now(obj) if resource == "pods" else obj

    def __enter__(self) -> FakeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
