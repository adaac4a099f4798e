"""TLS of KEDA's external-scaler gRPC service, re-read when the files change on disk.

grpcio's dynamic server credentials ask ``_fetch`` at each new handshake whether the certificate
configuration changed; ``poll`` (run periodically on the event loop) re-reads the files, so the
fetcher only compares version numbers. Connections already open keep their session. With a
client CA, KEDA must present a certificate it signed (TriggerAuthentication ``tlsClientCert``,
``tlsClientKey``, ``caCert``), else the handshake is refused.
"""

from __future__ import annotations

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ..config import GrpcSettings
from ..filewatch import WatchedFiles
from ..kubernetes.trust import parse_bundle


class GrpcTls:
    def __init__(self, cfg: GrpcSettings) -> None:
        assert cfg.tls_cert_file and cfg.tls_private_key_file
        self.pair = WatchedFiles(
            "gRPC certificate", [cfg.tls_private_key_file, cfg.tls_cert_file], _check_pair, min_interval=0
        )
        self.ca = (
            WatchedFiles("gRPC client CA", [cfg.client_ca_file], _check_ca, min_interval=0)
            if cfg.client_ca_file
            else None
        )
        self.version = 1
        self._served = 1

    def _config(self) -> grpc.ServerCertificateConfiguration:
        key, cert = self.pair.current
        ca = self.ca.current if self.ca is not None else None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            # the fetcher returns None for "unchanged", as grpcio documents; the stub says otherwise
            self._config(),
            self._fetch,  # type: ignore[arg-type]
            require_client_authentication=self.ca is not None,
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        if self._served == self.version:
            return None
        self._served = self.version
        return self._config()

    def poll(self) -> None:
        changed = self.pair.check(force=True)
        if self.ca is not None:
            changed = self.ca.check(force=True) or changed
        if changed:
            self.version += 1


def _check_pair(files: list[bytes]) -> tuple[bytes, bytes]:
    key, cert = files
    if b"PRIVATE KEY" not in key:
        raise ValueError("the gRPC private key file holds no PEM private key")
    if b"CERTIFICATE" not in cert:
        raise ValueError("the gRPC certificate file holds no PEM certificate")
    _same_key(key, cert)
    return key, cert


def _same_key(key_pem: bytes, cert_pem: bytes) -> None:
    try:
        key = serialization.load_pem_private_key(key_pem, None)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the gRPC certificate or key cannot be read: {exc}") from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, spki) != cert.public_key().public_bytes(
        serialization.Encoding.DER, spki
    ):
        raise ValueError("the gRPC certificate does not match its private key")


def _check_ca(files: list[bytes]) -> bytes:
    if not parse_bundle(files[0], "the gRPC client CA"):
        raise ValueError("the gRPC client CA file holds no certificate")
    return files[0]
