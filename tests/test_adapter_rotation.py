"""Certificates and CAs change under a running adapter: client CAs through the ConfigMap watch,
the serving certificate through a Kubernetes-style ``..data`` symlink swap. Real adapter process,
fake API server over HTTPS."""

from __future__ import annotations

import http.client
import json
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from adapter_support import adapter, exporter_with_queues, get
from cryptography import x509
from fake_apiserver import FakeApiServer, Identity, rbac
from servers import Process, wait_for
from test_adapter_delegated import PROD, bearer, write_config

POLICY = rbac(
    {"group_name": "team-c", "verbs": ["list"], "group": "external.metrics.k8s.io", "resources": ["*"]},
    {"user": "hpa", "verbs": ["list"], "group": "external.metrics.k8s.io", "resources": ["*"]},
    {"user": "alice", "verbs": ["list"], "group": "external.metrics.k8s.io", "resources": ["*"]},
)


def client_context(ca: trustme.CA | None, cn: str, org: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if ca is not None:
        ca.issue_cert(common_name=cn, organization_name=org).configure_cert(ctx)
    return ctx


def trust_data(client_ca: trustme.CA, front_proxy: trustme.CA) -> dict[str, str]:
    """The ConfigMap's data as kube-apiserver writes it (PEM bundles, JSON string arrays)."""
    return {
        "client-ca-file": client_ca.cert_pem.bytes().decode(),
        "requestheader-client-ca-file": front_proxy.cert_pem.bytes().decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }


def code_via(p: Process, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> int:
    try:
        return get(p.url + PROD, headers, context=ctx)[0]
    except OSError:  # ssl.SSLError and URLError: the handshake refused the certificate
        return 0


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    # a queue in prod and in dev: queue rules answer 404 where there is none
    with exporter_with_queues(tmp_path_factory.mktemp("queues")) as p:
        yield p


def test_client_ca_rotation_through_the_configmap(tmp_path: Path, sim: Process) -> None:
    ca1, ca2, front_proxy = trustme.CA(), trustme.CA(), trustme.CA()
    api = FakeApiServer(tmp_path, {}, POLICY, trust_data(ca1, front_proxy))
    try:
        with adapter(["--exporter", sim.url, "--config", write_config(tmp_path, api)]) as p:
            carol1 = client_context(ca1, "carol", "team-c")
            wait_for(lambda: code_via(p, carol1) == 200, timeout=10, what="client CA from the ConfigMap")
            # the front proxy's certificate names the user in headers; only from its CA and CN
            proxy = client_context(front_proxy, "front-proxy-client")
            assert code_via(p, proxy, {"X-Remote-User": "hpa"}) == 200
            assert code_via(p, client_context(front_proxy, "intruder"), {"X-Remote-User": "hpa"}) == 401
            # a client-CA certificate with the front proxy's CN is a user, and its headers are ignored
            spoof = client_context(ca1, "front-proxy-client")
            assert code_via(p, spoof, {"X-Remote-User": "alice"}) == 403
            host, port = p.url.removeprefix("https://").split(":")
            kept = http.client.HTTPSConnection(host, int(port), context=carol1)
            kept.request("GET", PROD)
            assert kept.getresponse().read() and True
            api.set_configmap(trust_data(ca2, front_proxy))
            carol2 = client_context(ca2, "carol", "team-c")
            wait_for(lambda: code_via(p, carol2) == 200, timeout=10, what="new client CA accepted")
            assert code_via(p, carol1) == 0  # a new connection with the old CA's certificate: refused
            kept.request("GET", PROD)  # the connection made before the rotation: its user is gone
            answer = kept.getresponse()
            assert answer.status == 401 and b"not signed by a CA trusted now" in answer.read()
            kept.close()
            assert code_via(p, proxy, {"X-Remote-User": "hpa"}) == 200
            assert api.watches >= 1 and "client trust changed" in p.log()
    finally:
        api.stop()


def publish(secret_dir: Path, version: str, files: dict[str, bytes]) -> None:
    """Write ``files`` as a Kubernetes secret volume does: a new timestamped directory, then an
    atomic rename of the ``..data`` symlink onto it; the visible names link through ``..data``."""
    target = secret_dir / f"..{version}"
    target.mkdir()
    for name, content in files.items():
        (target / name).write_bytes(content)
        if not (secret_dir / name).is_symlink():
            (secret_dir / name).symlink_to(f"..data/{name}")
    tmp = secret_dir / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, secret_dir / "..data")


def serving(ca: trustme.CA) -> dict[str, bytes]:
    cert = ca.issue_cert("127.0.0.1")
    return {"tls.crt": cert.cert_chain_pems[0].bytes(), "tls.key": cert.private_key_pem.bytes()}


def verifying(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


def test_serving_certificate_rotates_while_open_connections_finish(tmp_path: Path, sim: Process) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    secret = tmp_path / "tls"
    secret.mkdir()
    publish(secret, "2026_01", serving(old_ca))
    api = FakeApiServer(tmp_path, {"alice-token": Identity("alice")}, POLICY)
    args = ["--exporter", sim.url, "--config", write_config(tmp_path, api)]
    args += ["--tls-cert-file", str(secret / "tls.crt"), "--tls-private-key-file", str(secret / "tls.key")]
    try:
        with adapter(args) as p:
            host, port = p.url.removeprefix("https://").split(":")
            kept = http.client.HTTPSConnection(host, int(port), context=verifying(old_ca))
            kept.request("GET", PROD, headers=bearer("alice-token"))
            assert kept.getresponse().read()
            publish(secret, "2026_02", serving(new_ca))

            def new_certificate_served() -> bool:
                try:
                    return get(p.url + PROD, bearer("alice-token"), context=verifying(new_ca))[0] == 200
                except OSError:
                    return False

            wait_for(new_certificate_served, timeout=10, what="the new serving certificate")
            with pytest.raises(OSError):  # new connections no longer get the old certificate
                get(p.url + PROD, bearer("alice-token"), context=verifying(old_ca))
            kept.request("GET", PROD, headers=bearer("alice-token"))  # the old connection finishes
            answer = kept.getresponse()
            assert answer.status == 200 and json.loads(answer.read())["kind"] == "ExternalMetricValueList"
            assert kept.sock is not None
            der = kept.sock.getpeercert(binary_form=True)  # type: ignore[attr-defined]
            old_root = x509.load_pem_x509_certificate(old_ca.cert_pem.bytes())
            x509.load_der_x509_certificate(der).verify_directly_issued_by(old_root)  # still the old one
            kept.close()
            # a broken new certificate keeps the working one and says why, once
            publish(secret, "2026_03", {"tls.crt": b"not a certificate", "tls.key": b"nor a key"})
            wait_for(lambda: "reload failed" in p.log(), timeout=10, what="the reload failure")
            assert new_certificate_served()
            publish(secret, "2026_04", serving(new_ca) | {"tls.key": b"still broken"})
            wait_for(lambda: p.log().count("reload failed") == 2, timeout=10, what="the second failure")
            assert new_certificate_served()
            assert "Traceback" not in p.log()
    finally:
        api.stop()
