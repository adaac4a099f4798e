"""What ``--check-config`` checks beyond the schema: every file the start reads, read the way the
start reads it (serving and gRPC certificates and keys, client and request-header CAs, the
metrics-api secrets, Prometheus's TLS files), so a configuration it calls OK does not then stop
the start with exit 2. Nothing listens and no server is called.
"""

from __future__ import annotations

import os

from .config import AdapterConfig
from .keda.metrics_api import MetricsApiAuth
from .security import Security
from .sources.prometheus import ssl_context


async def start_problems(cfg: AdapterConfig) -> list[str]:
    """One line per file the start would refuse."""
    problems: list[str] = []
    try:
        security = Security(cfg)
    except ValueError as exc:
        problems.append(str(exc))
    else:
        try:
            if cfg.grpc.listen:
                os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # as the start does: our line, not grpc's
                security.grpc_credentials()
        except ValueError as exc:
            problems.append(str(exc))
        finally:
            await security.close()
    if cfg.metrics_api.enabled:
        try:
            MetricsApiAuth(cfg.metrics_api)
        except ValueError as exc:
            problems.append(str(exc))
    if cfg.mode == "prometheus":
        try:
            ssl_context(cfg.prometheus)
        except ValueError as exc:
            problems.append(str(exc))
    return problems
