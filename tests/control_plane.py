"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

The binaries come from scripts/kube-control-plane (Kubernetes 1.20.2 built from Debian's source
package, etcd from Debian; scripts/test runs it). Everything listens on 127.0.0.1, on free ports,
except what the aggregator must reach: the adapter's APIServices name the Service port 443, and the
loopback rig registers that Service as ``ExternalName: localhost`` (Endpoints may not hold loopback
addresses), so the adapter listens on 127.0.0.1:443 (the tests run as root; if the port is taken
they are skipped, saying so).

What differs from a cluster (docs/development.md): no kubelet and no scheduler, so pods stay
unscheduled and ``Kubelet`` marks them Running and Ready through the status subresource; the
apiserver runs ``--enable-aggregator-routing=false`` and ``--endpoint-reconciler-type=none``; the
ServiceAccount admission plugin is off (pods need no token secret); 1.20's HPA controller role lacks
``external.metrics.k8s.io``, so ``start`` grants it (added upstream in 1.24). The HPA controller
syncs every ``SYNC_SECONDS``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
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

    @property
    def _admin(self) -> ssl.SSLContext:
        if not hasattr(self, "_admin_ctx"):
            self._admin_ctx = self.context()
        return self._admin_ctx

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


def client_cert(ca: trustme.CA, user: str, group: str | None = None) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a client certificate from ``ca``: CN ``user``, O ``group``, no SAN
    (Go refuses trustme's leaf certificates without identities: a critical, empty SAN)."""
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    if group:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(names))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # type: ignore[arg-type]
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def client_context(
    ca: trustme.CA, verify: trustme.CA | None, user: str | None, group: str | None = None
) -> ssl.SSLContext:
    """TLS as ``user`` (a client certificate from ``ca``; none when ``user`` is None), verifying the
    server against ``verify`` (no verification when None)."""
    ctx = ssl.create_default_context()
    if verify is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        verify.configure_trust(ctx)
    if user is not None:
        cert, key = client_cert(ca, user, group)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c.pem").write_bytes(cert + key)
            ctx.load_cert_chain(str(Path(tmp) / "c.pem"))
    return ctx


def _write_pki(tmp: Path) -> tuple[trustme.CA, trustme.CA]:
    ca, front_proxy = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.crt"))
    ca.private_key_pem.write_to_path(str(tmp / "ca.key"))
    front_proxy.cert_pem.write_to_path(str(tmp / "front-proxy-ca.crt"))
    serving = ca.issue_cert("127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc")
    serving.cert_chain_pems[0].write_to_path(str(tmp / "apiserver.crt"))
    serving.private_key_pem.write_to_path(str(tmp / "apiserver.key"))
    cert, key = client_cert(front_proxy, "front-proxy-client")
    (tmp / "front-proxy-client.crt").write_bytes(cert)
    (tmp / "front-proxy-client.key").write_bytes(key)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = serialization.Encoding.PEM
    (tmp / "sa.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (tmp / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ca, front_proxy


def _kubeconfig(tmp: Path, name: str, url: str, ca: trustme.CA, user: str, groups: str | None) -> Path:
    cert, key = client_cert(ca, user, groups)
    (tmp / f"{name}.crt").write_bytes(cert)
    (tmp / f"{name}.key").write_bytes(key)
    path = tmp / f"{name}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "rig",
                "clusters": [
                    {"name": "rig", "cluster": {"server": url, "certificate-authority": str(tmp / "ca.crt")}}
                ],
                "users": [
                    {
                        "name": name,
                        "user": {
                            "client-certificate": str(tmp / f"{name}.crt"),
                            "client-key": str(tmp / f"{name}.key"),
                        },
                    }
                ],
                "contexts": [{"name": "rig", "context": {"cluster": "rig", "user": name}}],
            }
        )
    )
    return path


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
    ca, _ = _write_pki(tmp)
    etcd_port, peer_port, api_port, cm_port = free_port(), free_port(), free_port(), free_port()
    url = f"https://127.0.0.1:{api_port}"
    cluster = Cluster(tmp, url, ca, _kubeconfig(tmp, "admin", url, ca, "rig-admin", "system:masters"))
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
        cm_kubeconfig = _kubeconfig(
            tmp, "controller-manager", url, ca, "system:kube-controller-manager", None
        )
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
                    "--controllers=serviceaccount-token,serviceaccount,horizontalpodautoscaling,deployment,replicaset",
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


class Kubelet:
    """What the rig has instead of kubelets: every pod of ``namespace`` is marked Running and Ready
    (status subresource) soon after the ReplicaSet controller creates it, as HPA's Value targets
    count only ready pods."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self.mark_ready()

    def mark_ready(self) -> None:
        pods = self.cluster.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for pod in pods:
            status = pod.get("status", {})
            if status.get("phase") == "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            pod["status"] = {
                **status,
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now}
                    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
            }
            self.cluster.request(
                "PUT", f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status", pod
            )


def hpa_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    hpa = cluster.get(f"/apis/autoscaling/v2beta2/namespaces/{namespace}/horizontalpodautoscalers/{name}")
    return dict(hpa.get("status", {}))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


class Timeline:
    """The replicas an HPA's target has over time, as the test observed them (for the report)."""

    def __init__(self, cluster: Cluster, namespace: str, deployment: str) -> None:
        self.cluster, self.path = cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}"
        self.start = time.monotonic()
        self.points: list[tuple[float, int]] = []

    def replicas(self) -> int:
        n = int(self.cluster.get(self.path)["spec"]["replicas"])
        t = round(time.monotonic() - self.start, 1)
        if not self.points or self.points[-1][1] != n:
            self.points.append((t, n))
        return n

    def __str__(self) -> str:
        return " -> ".join(f"{n} (t={t:.0f}s)" for t, n in self.points)


def env_without_proxy() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
