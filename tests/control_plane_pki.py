"""Certificates for the control-plane rig (tests/control_plane.py): the cluster's CA and the
aggregator's front-proxy CA, the apiserver's serving certificate, client certificates (a user is
CN, a group O, as kube-apiserver reads them), ServiceAccount keys and kubeconfig files."""

from __future__ import annotations

import datetime
import ssl
import tempfile
from pathlib import Path

import trustme
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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


def write_pki(tmp: Path) -> tuple[trustme.CA, trustme.CA]:
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


def kubeconfig(tmp: Path, name: str, url: str, ca: trustme.CA, user: str, groups: str | None) -> Path:
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
