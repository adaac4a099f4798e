"""Why the gRPC server cannot start, in words: grpcio only says "Failed to bind to address".

``check_tls_files`` reads the certificate, key and client CA (through ``rightsizer_core.files``),
loads them as grpcio would and names the file and the fault; ``check_pair`` and
``check_client_ca`` do the same for contents already read (``grpctls.py`` re-reads them when they
change); ``bind_problem`` finds why an address cannot be bound (in use, not local, denied).
"""

from __future__ import annotations

import socket

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from rightsizer_core.files import MAX_TLS_BYTES, read_bytes

from ..certdates import check_dates


def _read(key: str, path: str) -> bytes:
    try:
        return read_bytes(path, MAX_TLS_BYTES)
    except OSError as exc:
        raise ValueError(f"{key} {path}: cannot read it: {exc.strerror or exc}") from None


def _certificates(key: str, path: str, data: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ValueError(f"{key} {path}: no PEM certificate in it") from None


def check_pair(cert_file: str, cert_pem: bytes, key_file: str, key_pem: bytes) -> None:
    """ValueError naming the file and the fault unless ``cert_pem`` is a PEM chain whose first
    certificate belongs to the unencrypted PEM private key ``key_pem``, each of the chain valid now
    (``certdates.py``)."""
    chain = _certificates("grpc.tls_cert_file", cert_file, cert_pem)
    try:
        private_key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        why = "it is encrypted" if isinstance(exc, TypeError) else "no PEM private key in it"
        raise ValueError(f"grpc.tls_private_key_file {key_file}: {why}") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != private_key.public_key().public_bytes(*spki):
        raise ValueError(
            f"grpc.tls_private_key_file {key_file} is not the key of the certificate in {cert_file}"
        )
    check_dates(f"grpc.tls_cert_file {cert_file}", chain)


def check_client_ca(ca_file: str, ca_pem: bytes) -> None:
    """ValueError naming the file unless ``ca_pem`` holds a PEM certificate."""
    _certificates("grpc.client_ca_file", ca_file, ca_pem)


def check_tls_files(cert_file: str, key_file: str, ca_file: str | None) -> tuple[bytes, bytes, bytes | None]:
    """(certificate chain, key, client CA) as PEM bytes; ValueError naming the file and the fault."""
    cert_pem = _read("grpc.tls_cert_file", cert_file)
    key_pem = _read("grpc.tls_private_key_file", key_file)
    check_pair(cert_file, cert_pem, key_file, key_pem)
    ca_pem = None
    if ca_file:
        ca_pem = _read("grpc.client_ca_file", ca_file)
        check_client_ca(ca_file, ca_pem)
    return cert_pem, key_pem, ca_pem


def bind_problem(host: str | None, port: int) -> str:
    """Why HOST:PORT cannot be bound, found by binding it the way grpcio does (no SO_REUSEPORT)."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"cannot resolve {host}: {exc.strerror}"
    for family, type_, proto, _, address in infos:
        try:
            with socket.socket(family, type_, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
        except OSError as exc:
            return (exc.strerror or str(exc)).lower()
    return "the gRPC library refused the address"
