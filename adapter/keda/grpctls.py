"""TLS of KEDA's external-scaler gRPC service, re-read when the files change on disk.

grpcio's dynamic server credentials ask ``_fetch`` at each new handshake whether the certificate
configuration changed; ``poll`` (run periodically on the event loop) re-reads the files, so the
fetcher only compares version numbers. Connections already open keep their session. With a
client CA, KEDA must present a certificate it signed (TriggerAuthentication ``tlsClientCert``,
``tlsClientKey``, ``caCert``), else the handshake is refused. The files are read through
``rightsizer_core.files`` (``filewatch.py``) and checked as at start (``grpc_checks.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from ..config import GrpcSettings
from ..filewatch import WatchedFiles
from .grpc_checks import check_client_ca, check_pair, check_tls_files


class GrpcTls:
    def __init__(self, cfg: GrpcSettings) -> None:
        assert cfg.tls_cert_file and cfg.tls_private_key_file
        # At start, a bad file stops the adapter with the setting, the file and the fault named.
        check_tls_files(cfg.tls_cert_file, cfg.tls_private_key_file, cfg.client_ca_file)
        pair = [cfg.tls_private_key_file, cfg.tls_cert_file]
        self.pair = WatchedFiles("gRPC certificate", pair, _check_pair(cfg), min_interval=0)
        ca = cfg.client_ca_file
        self.ca = WatchedFiles("gRPC client CA", [ca], _check_ca(ca), min_interval=0) if ca else None
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


def _check_pair(cfg: GrpcSettings) -> Callable[[list[bytes]], tuple[bytes, bytes]]:
    def load(files: list[bytes]) -> tuple[bytes, bytes]:
        key, cert = files
        assert cfg.tls_cert_file and cfg.tls_private_key_file
        check_pair(cfg.tls_cert_file, cert, cfg.tls_private_key_file, key)
        return key, cert

    return load


def _check_ca(path: str) -> Callable[[list[bytes]], bytes]:
    def load(files: list[bytes]) -> bytes:
        check_client_ca(path, files[0])
        return files[0]

    return load
