"""The adapter's authentication, authorization and TLS, assembled from the configuration.

``Security`` owns the Kubernetes API client, the client trust (ConfigMap + files), the reloading
serving context, the gRPC credentials and the request gate; ``start`` begins following the
ConfigMap and polling files, ``open_endpoints`` names what would answer without credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from rightsizer_core.logs import event

from .config import AdapterConfig
from .kubernetes.delegated import AccessReviewer, TokenReviewer
from .kubernetes.gate import Gate
from .kubernetes.kubeapi import KubeApi, api_base
from .kubernetes.trust import ClientTrust
from .tlsreload import ServingTls

if TYPE_CHECKING:  # grpc is imported only once GRPC_VERBOSITY is set (cli.serve)
    import grpc

    from .keda.grpctls import GrpcTls

log = logging.getLogger("rightsizer.adapter.security")


def _use(setting: str, api: KubeApi | None, what: str) -> bool:
    if setting == "on" and api is None:
        raise ValueError(f"{what}: on needs the Kubernetes API (run in a cluster, or set kubernetes.api_url)")
    return setting == "on" or (setting == "auto" and api is not None)


class Security:
    """Raises ValueError with a one-line reason for a bad file or setting."""

    def __init__(self, cfg: AdapterConfig) -> None:
        self.cfg = cfg
        base = api_base(cfg.kubernetes)
        self.api = KubeApi(cfg.kubernetes, base) if base else None
        self.trust: ClientTrust | None = None
        self.tls: ServingTls | None = None
        self.grpc_tls: GrpcTls | None = None
        self.follows_configmap = False
        self._tasks: list[asyncio.Task[None]] = []
        if cfg.insecure_http:
            self.gate = Gate.off()
            return
        authn, authz = cfg.authentication, cfg.authorization
        delegated_authn = _use(authn.delegated, self.api, "authentication.delegated")
        static = bool(authz.allowed_users or authz.allowed_groups)
        delegated_authz = _use(authz.delegated, self.api, "authorization.delegated") and not (
            static and authz.delegated == "auto"
        )
        self.trust = ClientTrust(authn, cfg.requestheader)
        self.tls = ServingTls(cfg.tls, self.trust)
        assert self.api is not None or not (delegated_authn or delegated_authz)
        tokens = (
            TokenReviewer(self.api, authn.token_success_ttl_seconds, authn.token_failure_ttl_seconds)
            if delegated_authn and self.api
            else None
        )
        access = (
            AccessReviewer(self.api, authz.allowed_ttl_seconds, authz.denied_ttl_seconds)
            if delegated_authz and self.api
            else None
        )
        self.follows_configmap = delegated_authn
        self.gate = Gate(authn, authz, self.trust, tokens, access)

    def grpc_credentials(self) -> grpc.ServerCredentials | None:
        """The gRPC server's TLS (None: plaintext); raises ValueError for a bad file."""
        if not self.cfg.grpc.tls_cert_file:
            return None
        from .keda.grpctls import GrpcTls

        self.grpc_tls = GrpcTls(self.cfg.grpc)
        return self.grpc_tls.credentials()

    def open_endpoints(self, metrics_api_secrets: bool, metrics_api_on: bool) -> list[str]:
        """Data endpoints that answer requests without credentials, for the start-up warning."""
        out = []
        if self.cfg.insecure_http:
            out.append("https-apis(plain http, no authentication)")
            if metrics_api_on and not metrics_api_secrets:
                out.append("keda-metrics-api")
        elif self.cfg.authentication.anonymous and self.gate.authorizer == "none":
            out.append("https-apis(anonymous, no authorization)")
        if self.cfg.grpc.listen and not self.cfg.grpc.client_ca_file:
            out.append("keda-grpc(no client certificate required)")
        return out

    def describe(self) -> dict[str, str]:
        gate = self.gate
        return {
            "authn": "off"
            if not gate.enabled
            else ",".join(
                ["x509", "requestheader"]
                + (["tokenreview"] if gate.tokens else [])
                + (["anonymous"] if gate.anonymous else [])
            ),
            "authz": "off" if not gate.enabled else gate.authorizer,
            **self.certificate(),
        }

    def certificate(self) -> dict[str, str]:
        """What the HTTPS listener serves, for the start line: a certificate made at start (no
        --tls-cert-file/--tls-private-key-file: clients verify nothing unless told to skip or
        trust it) or the files'."""
        if self.tls is None:
            return {}
        if self.tls.files is None:
            return {"certificate": "self-signed", "certificate_names": ",".join(self.tls.names)}
        return {"certificate": str(self.cfg.tls.cert_file)}

    async def start(self) -> None:
        if self.trust is not None and self.api is not None and self.follows_configmap:
            await self.trust.load_once(self.api)
            self._tasks.append(asyncio.create_task(self.trust.follow(self.api)))
        if self.tls is not None or self.cfg.grpc.tls_cert_file:
            self._tasks.append(asyncio.create_task(self._poll()))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.file_reload_interval_seconds)
            if self.tls is not None:
                self.tls.poll()
            if self.grpc_tls is not None:
                self.grpc_tls.poll()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.api is not None:
            await self.api.close()

    def warn(self, metrics_api_secrets: bool, metrics_api_on: bool) -> None:
        opened = self.open_endpoints(metrics_api_secrets, metrics_api_on)
        if opened:
            event(
                log,
                logging.WARNING,
                "data endpoints answer without authentication",
                endpoints=",".join(opened),
            )
        if self.gate.enabled and self.gate.authorizer == "none":
            event(
                log,
                logging.WARNING,
                "no authorization: every authenticated user reads every metric "
                "(no Kubernetes API for SubjectAccessReview, no authorization.allowed_users/groups)",
            )
