"""A read-only fake Kubernetes API server for ``helm template --dry-run=server``: what Helm asks
(``/version``, legacy discovery ``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>/<version>``, and a
GET of each object it renders, through which the chart's ``lookup`` reads), in the API server's
JSON. ``objects`` are served by their path; any other object is a 404 ``Status``, as in an empty
cluster. Plain HTTP on loopback, in a thread; only GET.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# group/version -> (resource, kind, namespaced): the kinds the chart renders by default
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("daemonsets", "DaemonSet", True), ("deployments", "Deployment", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "apiregistration.k8s.io/v1": [("apiservices", "APIService", False)],
}


def path_of(obj: dict[str, Any]) -> str:
    """The object's URL path, as a client GETs it."""
    group_version = obj["apiVersion"]
    (resource,) = [r for r, kind, _ in RESOURCES[group_version] if kind == obj["kind"]]
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{resource}/{obj['metadata']['name']}"


def _discovery(path: str) -> dict[str, Any] | None:
    if path == "/version":
        return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    groups = [gv for gv in RESOURCES if gv != "v1"]
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": gv.split("/")[0],
                    "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                    "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]},
                }
                for gv in groups
            ],
        }
    group_version = "v1" if path == "/api/v1" else path.removeprefix("/apis/")
    if group_version in RESOURCES and (path == "/api/v1" or path.startswith("/apis/")):
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [
                {"name": r, "singularName": "", "namespaced": ns, "kind": k, "verbs": ["get", "list"]}
                for r, k, ns in RESOURCES[group_version]
            ],
        }
    return None


@contextlib.contextmanager
def discovery_server(tmp: Path, objects: list[dict[str, Any]]) -> Iterator[Path]:
    """Serve ``objects``; yields a kubeconfig naming the server."""
    stored = {path_of(o): o for o in objects}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            body = _discovery(path) or stored.get(path)
            code = 200 if body is not None else 404
            if body is None:
                body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                        "message": f"{path} not found", "code": 404}  # fmt: skip
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = tmp / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
        "users: [{name: fake, user: {}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\ncurrent-context: fake\n"
    )
    try:
        yield config
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
