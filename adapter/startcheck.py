"""What ``--check-config`` checks beyond the schema: every file the start reads, read the way the
start reads it (serving and gRPC certificates and keys, client and request-header CAs, the
metrics-api secrets, Prometheus's TLS files), so a configuration it calls OK does not then stop
the start with exit 2. Nothing listens and no server is called.
"""

from __future__ import annotations

import os

from rightsizer_core.files import read_secret

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
    problem = token_problem(cfg)
    if problem:
        problems.append(problem)
    return problems


def token_problem(cfg: AdapterConfig) -> str | None:
    """Why Prometheus's bearer token file cannot be sent (missing, unreadable, empty):
    it is read again on every refresh, but one that is unusable at start is a mistake, not a
    rotation, and every query would fail (401 at best)."""
    path = cfg.prometheus.bearer_token_file
    if cfg.mode != "prometheus" or not path:
        return None
    try:
        token = read_secret(path)  # what else it holds (a line break) is refused by each refresh
    except OSError as exc:
        return f"prometheus.bearer_token_file {path}: cannot read it: {exc.strerror or exc}"
    return None if token else f"prometheus.bearer_token_file {path}: it is empty (a bearer token is one line)"
