"""TLS and front-proxy authentication of the adapter, run as a real process with CAs made here."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from adapter_support import adapter, get
from cryptography import x509
from servers import ROOT, Process, exporter

EXT = "/apis/external.metrics.k8s.io/v1beta1"
VALUE = f"{EXT}/namespaces/llm/rightsizer_gpu_utilization_ratio"  # the default fleet's GPUs
HPA = {
    "X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    "X-Remote-Group": "readers",
}


class Pki:
    def __init__(self, tmp: Path) -> None:
        self.front_proxy = trustme.CA()
        self.other = trustme.CA()
        self.serving_ca = trustme.CA()
        self.tmp = tmp
        self.front_proxy.cert_pem.write_to_path(str(tmp / "front-proxy-ca.pem"))
        serving = self.serving_ca.issue_cert("127.0.0.1", "rightsizer-adapter.rightsizer.svc")
        serving.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
        serving.private_key_pem.write_to_path(str(tmp / "tls.key"))

    def client(
        self, ca: trustme.CA | None = None, cn: str = "front-proxy-client", verify: trustme.CA | None = None
    ) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        if verify is None:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            verify.configure_trust(ctx)
        if ca is not None:
            ca.issue_cert(common_name=cn).configure_cert(ctx)
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sim() -> Iterator[Process]:
    with exporter(["--simulate"]) as p:
        yield p


@pytest.fixture(scope="module")
def secured(pki: Pki, sim: Process) -> Iterator[Process]:
    config = pki.tmp / "adapter.yaml"
    config.write_text("authorization:\n  allowed_groups: [readers]\n")
    args = [
        "--exporter",
        sim.url,
        "--config",
        str(config),
        "--requestheader-client-ca-file",
        str(pki.tmp / "front-proxy-ca.pem"),
        "--requestheader-allowed-names",
        "front-proxy-client,aggregator",
    ]
    with adapter(args) as p:
        yield p


def status_of(body: bytes) -> dict[str, Any]:
    status = json.loads(body)
    assert status["kind"] == "Status" and status["status"] == "Failure"
    return dict(status)


def test_front_proxy_certificate_and_headers_are_accepted(secured: Process, pki: Pki) -> None:
    assert secured.url.startswith("https://")
    ctx = pki.client(pki.front_proxy)
    code, _, body = get(secured.url + VALUE, HPA, context=ctx)
    assert code == 200 and json.loads(body)["kind"] == "ExternalMetricValueList"
    code, _, body = get(secured.url + EXT, HPA, context=ctx)
    assert code == 200 and json.loads(body)["kind"] == "APIResourceList"


def test_no_client_certificate_is_401(secured: Process, pki: Pki) -> None:
    for path in (VALUE, EXT, "/apis", "/metrics", "/keda/v1/metrics/rightsizer_queue_depth"):
        code, _, body = get(secured.url + path, HPA, context=pki.client())
        assert code == 401 and status_of(body)["reason"] == "Unauthorized", path
    for path in ("/healthz", "/livez", "/readyz"):
        assert get(secured.url + path, context=pki.client())[0] == 200


def test_certificate_from_another_ca_is_refused_at_the_handshake(secured: Process, pki: Pki) -> None:
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        get(secured.url + VALUE, HPA, context=pki.client(pki.other))


def test_spoofed_headers_are_never_believed(secured: Process, pki: Pki) -> None:
    spoofed = {"X-Remote-User": "admin", "X-Remote-Group": "readers"}
    code, _, body = get(secured.url + VALUE, spoofed, context=pki.client())  # no certificate
    assert code == 401
    code, _, body = get(secured.url + VALUE, spoofed, context=pki.client(pki.front_proxy, cn="intruder"))
    assert code == 401 and "'intruder' is not among the allowed" in status_of(body)["message"]
    code, _, body = get(secured.url + VALUE, {}, context=pki.client(pki.front_proxy))  # trusted, but no user
    assert code == 401 and "X-Remote-User" in status_of(body)["message"]


def test_static_authorization_is_403_for_other_groups(secured: Process, pki: Pki) -> None:
    other = {"X-Remote-User": "someone", "X-Remote-Group": "developers"}
    code, _, body = get(secured.url + VALUE, other, context=pki.client(pki.front_proxy, cn="aggregator"))
    assert code == 403 and status_of(body)["reason"] == "Forbidden"


def test_self_signed_serving_certificate_names_loopback(secured: Process) -> None:
    host, port = secured.url.removeprefix("https://").split(":")
    der = ssl.get_server_certificate((host, int(port)))
    cert = x509.load_pem_x509_certificate(der.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    # Its start line says so: clients verify nothing unless told to skip verification or trust it.
    (line,) = [line for line in secured.log().splitlines() if "msg=listening" in line]
    assert " scheme=https " in line and " certificate=self-signed " in line, line
    assert "certificate_names=localhost," in line and ",127.0.0.1,::1" in line, line


def test_given_serving_certificate_verifies_with_its_ca(pki: Pki, sim: Process) -> None:
    args = [
        "--exporter",
        sim.url,
        "--tls-cert-file",
        str(pki.tmp / "tls.crt"),
        "--tls-private-key-file",
        str(pki.tmp / "tls.key"),
    ]
    with adapter(args) as p:
        (line,) = [line for line in p.log().splitlines() if "msg=listening" in line]
        assert line.endswith(f" certificate={pki.tmp / 'tls.crt'}") and "self-signed" not in line, line
        ctx = pki.client(verify=pki.serving_ca)
        code, _, body = get(p.url + EXT, context=ctx)  # verified; no CA, no API: anonymous is refused
        assert code == 401 and "authentication required" in status_of(body)["message"]


def test_insecure_http_is_loopback_only(sim: Process) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "adapter", "--exporter", sim.url, "--insecure-http", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert run.returncode == 2
    assert "listens on loopback only" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    with adapter(["--exporter", sim.url, "--insecure-http"]) as p:
        assert p.url.startswith("http://")
        code, _, body = get(p.url + VALUE, {"X-Remote-User": "admin"})
        assert code == 200 and json.loads(body)["kind"] == "ExternalMetricValueList"
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with adapter(
        ["--exporter", sim.url, "--insecure-http", "--allow-insecure-remote", "--listen", f"0.0.0.0:{port}"]
    ):
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
