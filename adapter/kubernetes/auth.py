"""Pieces shared by the adapter's TLS and authentication: self-signed certificates, users, denials.

How requests are authenticated and authorized is in ``gate.py``; the serving TLS context, which
follows certificate and CA changes, in ``../tlsreload.py``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed_certificate(names: Iterable[str]) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``names`` (DNS names or IP addresses), valid for a year."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys(names))
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"rightsizer-adapter@{names[0]}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def load_pem_pair(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl only loads certificates from files: write them to a private directory for a moment."""
    with tempfile.TemporaryDirectory(prefix="rightsizer-adapter-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_path.write_bytes(cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(cert_path, key_path)


def why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or ''} {exc.strerror}".strip()
    return str(exc)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    uid: str = ""


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))
AUTHENTICATED = "system:authenticated"


class Denied(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
