"""The HTTPS server's TLS context, following certificate and client-CA changes without a restart.

The listener keeps one ``ssl.SSLContext`` for its life; its ``sni_callback`` (called for every
TLS handshake, with or without SNI) moves the new connection onto the context built from the
files and CAs in force now, so a rotated serving certificate or client CA applies to the next
handshake while connections already open finish on the context they started with.

Client certificates are requested (``CERT_OPTIONAL``) and verified at the handshake against the
x509 client CA and the request-header CA together; which of the two signed one is decided per
request (``kubernetes/gate.py``), so a front-proxy CN is only believed from the front-proxy CA.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Any

from rightsizer_core.logs import event

from .certdates import check_pem_dates
from .config import TlsSettings
from .filewatch import WatchedFiles
from .kubernetes.auth import load_pem_pair, self_signed_certificate, why
from .kubernetes.trust import ClientTrust

log = logging.getLogger("rightsizer.adapter.tls")


def _pair(cert_file: str, key_file: str) -> WatchedFiles[tuple[bytes, bytes]]:
    def load(files: list[bytes]) -> tuple[bytes, bytes]:
        cert, key = files
        try:
            load_pem_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the serving certificate {cert_file}: {why(exc)}") from None
        check_pem_dates(f"the serving certificate {cert_file}", cert)  # refused at start, kept out on reload
        return cert, key

    return WatchedFiles("serving certificate", [cert_file, key_file], load, min_interval=0)


class ServingTls:
    """``context`` goes to the listener; ``poll`` (called periodically) picks up changed files."""

    def __init__(self, tls: TlsSettings, trust: ClientTrust) -> None:
        self.trust = trust
        self.files: WatchedFiles[tuple[bytes, bytes]] | None = None
        self.names: list[str] = []  # the self-signed certificate's names (none: the files')
        if tls.cert_file and tls.private_key_file:
            try:
                self.files = _pair(tls.cert_file, tls.private_key_file)
            except ValueError as exc:  # a file that cannot be read (missing, a FIFO, too large), or dates
                reason = str(exc)
                if not reason.startswith(("cannot load the serving certificate", "the serving certificate")):
                    reason = f"cannot load the serving certificate: {reason}"
                raise ValueError(reason) from None
            self._self_signed: tuple[bytes, bytes] | None = None
        else:
            self.names = ["localhost", socket.gethostname(), "127.0.0.1", "::1", *tls.self_signed_names]
            self._self_signed = self_signed_certificate(self.names)
        self.current = self._build()
        self.builds = 1
        self.context = self._build()
        self.context.sni_callback = self._pick
        trust.on_change.append(self.rebuild)

    def _pair_now(self) -> tuple[bytes, bytes]:
        if self.files is not None:
            return self.files.current
        assert self._self_signed is not None
        return self._self_signed

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        try:
            load_pem_pair(ctx, *self._pair_now())
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the serving certificate: {why(exc)}") from None
        # Always ask for a client certificate: a CA may arrive later (the ConfigMap, a new file).
        ctx.verify_mode = ssl.CERT_OPTIONAL
        pem = self.trust.current.ca_pem
        if pem:
            try:
                ctx.load_verify_locations(cadata=pem)
            except ssl.SSLError as exc:
                raise ValueError(f"cannot use the client CAs: {why(exc)}") from None
        return ctx

    def rebuild(self) -> None:
        try:
            self.current = self._build()
        except ValueError as exc:
            event(log, logging.WARNING, "TLS context not rebuilt; keeping the previous one", reason=str(exc))
            return
        self.builds += 1

    def _pick(self, conn: Any, server_name: str | None, ctx: ssl.SSLContext) -> None:
        conn.context = self.current

    def poll(self) -> None:
        self.trust.poll_files()  # rebuilds through on_change when a CA file changed
        if self.files is not None and self.files.check(force=True):
            self.rebuild()
