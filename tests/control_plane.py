"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

The binaries come from scripts/kube-control-plane (Kubernetes 1.20.2 built from Debian's source
package, etcd from Debian; scripts/test runs it). Everything listens on 127.0.0.1, on free ports,
except what the aggregator must reach: the adapter's APIServices name the Service port 443, and the
loopback rig registers that Service as ``ExternalName: localhost`` (Endpoints may not hold loopback
addresses), so the adapter listens on 127.0.0.1:443 (the tests run as root; if the port is taken
they are skipped, saying so).

What differs from a cluster (docs/development.md): no kubelet and no scheduler, so pods stay
unscheduled and ``control_plane_kube.Kubelet`` marks them Running and Ready through the status
subresource; the apiserver runs ``--enable-aggregator-routing=false`` and
``--endpoint-reconciler-type=none``; the ServiceAccount admission plugin is off (pods need no token
secret); 1.20's HPA controller role lacks ``external.metrics.k8s.io``, so ``control_plane`` grants
it (added upstream in 1.24). The HPA controller syncs every ``SYNC_SECONDS``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from control_plane_pki import client_context, kubeconfig, write_pki
from k8s_tools import TOOLS, tool
from servers import free_port, wait_for

SYNC_SECONDS = 3
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
BUILD_FAILED = TOOLS / "kube-control-plane.failed"  # scripts/test writes why the build failed


def binaries() -> dict[str, str]:
    """The three binaries; skips (naming the build's error) only when scripts/kube-control-plane
    could not build them here, and fails when it was simply not run."""
    missing = [b for b in BINARIES if not (TOOLS / b).exists()]
    if not missing:
        return {b: str(TOOLS / b) for b in BINARIES}
    if BUILD_FAILED.is_file():
        pytest.skip(f"the control plane could not be built here: {BUILD_FAILED.read_text().strip()[-400:]}")
    pytest.fail(f"{', '.join(missing)} not in .tools/bin: run scripts/kube-control-plane (scripts/test does)")


def port_443_free() -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", 443))
        except OSError as exc:
            pytest.skip(f"the adapter must listen on 127.0.0.1:443 (the APIServices' Service port): {exc}")


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _daemon(name: str, argv: list[str], tmp: Path) -> Daemon:
    log_path = tmp / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Daemon(name, proc, log_path)


@dataclass
class Cluster:
    tmp: Path
    url: str
    ca: trustme.CA
    kubeconfig: Path
    daemons: list[Daemon] = field(default_factory=list)

    def context(self, user: str | None = "rig-admin", group: str | None = "system:masters") -> ssl.SSLContext:
        """TLS to the apiserver (verified) as ``user`` in ``group`` (a client certificate from the
        cluster's CA), or with no certificate when ``user`` is None."""
        return client_context(self.ca, self.ca, user, group)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctx: ssl.SSLContext | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx or self._admin) as resp:
                raw = resp.read()
                code = resp.status
        except urllib.error.HTTPError as exc:
            raw, code = exc.read(), exc.code
        try:
            return code, json.loads(raw)
        except ValueError:
            return code, raw.decode(errors="replace")

    def get(self, path: str) -> Any:
        code, body = self.request("GET", path)
        assert code == 200, f"GET {path}: {code} {body}"
        return body

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [tool("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}{result.stdout}"
        return result

    def apply(self, objects: list[dict[str, Any]], *extra: str) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", *extra, "-f", "-", stdin=yaml.safe_dump_all(objects))

    @functools.cached_property
    def _admin(self) -> ssl.SSLContext:
        return self.context()

    def token(self, namespace: str, service_account: str) -> str:
        """The token of a ServiceAccount's secret (made by the controller-manager's token controller)."""

        def find() -> str | None:
            for s in self.get(f"/api/v1/namespaces/{namespace}/secrets")["items"]:
                ann = s["metadata"].get("annotations", {})
                if (
                    s["type"] == "kubernetes.io/service-account-token"
                    and ann.get("kubernetes.io/service-account.name") == service_account
                    and "token" in s.get("data", {})
                ):
                    return base64.b64decode(s["data"]["token"]).decode()
            return None

        return str(wait_for(find, 60, 0.5, what=f"a token for {namespace}/{service_account}"))

    def logs(self) -> str:
        return "\n".join(
            f"--- {d.name} (last lines)\n" + "\n".join(d.log().splitlines()[-15:]) for d in self.daemons
        )


# 1.20's system:controller:horizontal-pod-autoscaler cannot read external metrics (kubernetes#104244).
HPA_EXTERNAL_METRICS = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "rig:hpa-external-metrics"},
        "rules": [{"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "rig:hpa-external-metrics"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "rig:hpa-external-metrics",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
        ],
    },
]


@contextlib.contextmanager
def control_plane(tmp: Path) -> Iterator[Cluster]:
    """etcd + kube-apiserver + kube-controller-manager, ready: the API answers, the HPA controller
    has its identity and may read external metrics. Stopped (all three) on exit."""
    bins = binaries()
    ca, _ = write_pki(tmp)
    etcd_port, peer_port, api_port, cm_port = free_port(), free_port(), free_port(), free_port()
    url = f"https://127.0.0.1:{api_port}"
    cluster = Cluster(tmp, url, ca, kubeconfig(tmp, "admin", url, ca, "rig-admin", "system:masters"))
    try:
        cluster.daemons.append(
            _daemon(
                "etcd",
                [
                    bins["etcd"],
                    "--name",
                    "rig",
                    "--data-dir",
                    str(tmp / "etcd"),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-cluster",
                    f"rig=http://127.0.0.1:{peer_port}",
                    "--log-level",
                    "warn",
                    "--logger",
                    "zap",
                ],
                tmp,
            )
        )
        cluster.daemons.append(
            _daemon(
                "kube-apiserver",
                [
                    bins["kube-apiserver"],
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    "--insecure-port=0",
                    f"--cert-dir={tmp}",
                    "--endpoint-reconciler-type=none",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--authorization-mode=RBAC",
                    f"--client-ca-file={tmp / 'ca.crt'}",
                    f"--tls-cert-file={tmp / 'apiserver.crt'}",
                    f"--tls-private-key-file={tmp / 'apiserver.key'}",
                    f"--service-account-key-file={tmp / 'sa.pub'}",
                    f"--service-account-signing-key-file={tmp / 'sa.key'}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    "--disable-admission-plugins=ServiceAccount",
                    "--allow-privileged=true",  # as kubeadm, kind and the managed services run it
                    f"--requestheader-client-ca-file={tmp / 'front-proxy-ca.crt'}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={tmp / 'front-proxy-client.crt'}",
                    f"--proxy-client-key-file={tmp / 'front-proxy-client.key'}",
                    "--enable-aggregator-routing=false",
                    "--profiling=false",
                    "--v=1",
                ],
                tmp,
            )
        )
        wait_for(lambda: _healthy(cluster), 120, 0.5, what="kube-apiserver /readyz")
        cm_kubeconfig = kubeconfig(tmp, "controller-manager", url, ca, "system:kube-controller-manager", None)
        cluster.daemons.append(
            _daemon(
                "kube-controller-manager",
                [
                    bins["kube-controller-manager"],
                    f"--kubeconfig={cm_kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={cm_port}",
                    "--port=0",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={tmp / 'sa.key'}",
                    f"--root-ca-file={tmp / 'ca.crt'}",
                    "--controllers=serviceaccount-token,serviceaccount,horizontalpodautoscaling,deployment,replicaset,"
                    "statefulset",
                    f"--horizontal-pod-autoscaler-sync-period={SYNC_SECONDS}s",
                    "--profiling=false",
                    "--v=1",
                ],
                tmp,
            )
        )
        cluster.apply(HPA_EXTERNAL_METRICS)
        cluster.token("kube-system", "horizontal-pod-autoscaler")
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for d in reversed(cluster.daemons):
            d.stop()


def _healthy(cluster: Cluster) -> bool:
    for d in cluster.daemons:
        if d.proc.poll() is not None:
            raise AssertionError(f"{d.name} exited {d.proc.returncode}:\n{d.log()[-3000:]}")
    return cluster.request("GET", "/readyz")[0] == 200
