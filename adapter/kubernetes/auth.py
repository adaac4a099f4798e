"""Serving TLS and front-proxy (request-header) authentication, as Kubernetes API servers do it.

The aggregator connects with its front-proxy client certificate and names the user in
``X-Remote-User``, ``X-Remote-Group`` and ``X-Remote-Extra-*``. Those headers are believed only
when the connection's client certificate verified against the request-header CA and its CN is
allowed; a certificate from another CA fails the TLS handshake, and a request without one gets a
401 Status. Without a request-header CA every TLS client is served as anonymous and the headers
are ignored. Delegated authorization (SubjectAccessReview) is not done: an optional static list
of users and groups gives 403 to everyone else.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rightsizer_core.files import checked_path

from ..config import AuthorizationSettings, RequestHeaderSettings, TlsSettings


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


def _load_pem_pair(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl only loads certificates from files: write them to a private directory for a moment."""
    with tempfile.TemporaryDirectory(prefix="rightsizer-adapter-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_path.write_bytes(cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(cert_path, key_path)


def serving_context(tls: TlsSettings, requestheader: RequestHeaderSettings) -> ssl.SSLContext:
    """The HTTPS server's context; raises ValueError with a one-line reason for bad files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        if tls.cert_file and tls.private_key_file:
            ctx.load_cert_chain(checked_path(tls.cert_file), checked_path(tls.private_key_file))
        else:
            names = ["localhost", socket.gethostname(), "127.0.0.1", "::1", *tls.self_signed_names]
            _load_pem_pair(ctx, *self_signed_certificate(names))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the serving certificate: {_why(exc)}") from None
    if requestheader.client_ca_file:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        try:
            ctx.load_verify_locations(cafile=checked_path(requestheader.client_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot load requestheader client CA {requestheader.client_ca_file}: {_why(exc)}"
            ) from None
    return ctx


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or ''} {exc.strerror}".strip()
    return str(exc)


def _common_name(peercert: dict[str, Any]) -> str | None:
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))


class Denied(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Authenticator:
    def __init__(
        self, requestheader: RequestHeaderSettings, authorization: AuthorizationSettings, enabled: bool
    ) -> None:
        self.rh = requestheader
        self.enabled = enabled and bool(requestheader.client_ca_file)
        self.allowed_names = frozenset(requestheader.allowed_names)
        self.users = frozenset(authorization.allowed_users)
        self.groups = frozenset(authorization.allowed_groups)

    def authenticate(self, peercert: dict[str, Any] | None, headers: Any) -> User:
        """The user a request acts as; raises Denied (401) when it cannot be trusted."""
        if not self.enabled:
            return ANONYMOUS
        if not peercert:
            raise Denied(401, "a client certificate signed by the request-header CA is required")
        cn = _common_name(peercert)
        if self.allowed_names and cn not in self.allowed_names:
            raise Denied(401, f"client certificate CN {cn!r} is not among the allowed request-header names")
        name = next((v for h in self.rh.username_headers for v in headers.getall(h, ()) if v), None)
        if not name:
            raise Denied(401, f"no user named in {', '.join(self.rh.username_headers)}")
        groups = tuple(v for h in self.rh.group_headers for v in headers.getall(h, ()) if v)
        extra: dict[str, list[str]] = {}
        for header, value in headers.items():
            for prefix in self.rh.extra_headers_prefix:
                if header.lower().startswith(prefix.lower()):
                    extra.setdefault(header[len(prefix) :].lower(), []).append(value)
        return User(name, groups, extra)

    def authorize(self, user: User) -> None:
        """Raises Denied (403) unless the static allow-lists (if any) admit the user."""
        if not (self.users or self.groups):
            return
        if user.name in self.users or self.groups.intersection(user.groups):
            return
        raise Denied(403, f"user {user.name!r} may not read metrics here")
