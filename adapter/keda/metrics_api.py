"""KEDA's metrics-api scaler endpoint: ``GET /keda/v1/metrics/{metric}?labelSelector=…&namespace=…``.

Answers ``{"value": <number>, "timestamp": "<RFC3339>"}`` with the value HPA would compute from the
external answer (the sum of the selected series); point the trigger's ``valueLocation`` at
``value``. No value is never 0: a selection matching nothing is a 404 Status, one with a queue
down or stale (or the backend down) a 503, both errors to KEDA. Optional authentication: an API
key in ``X-API-KEY`` and/or a bearer token, as KEDA's ``authMode`` apiKey and bearer send them.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from aiohttp import web

from ..cache import Answer, Cache
from ..config import MetricsApiSettings
from ..kubernetes.answers import Failure, dumps, rfc3339, selected, status, total
from ..kubernetes.apis import CACHE, respond


class MetricsApiAuth:
    """The secrets a metrics-api request must carry (read once at start)."""

    def __init__(self, cfg: MetricsApiSettings) -> None:
        self.api_key = self._read(cfg.api_key_file, "metrics_api.api_key_file")
        self.bearer = self._read(cfg.bearer_token_file, "metrics_api.bearer_token_file")

    @staticmethod
    def _read(path: str | None, what: str) -> bytes | None:
        if path is None:
            return None
        try:
            secret = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
        if not secret:
            raise ValueError(f"{what}: {path} is empty")
        return secret

    def check(self, request: web.Request) -> Answer | None:
        """None when the request may be served, else the 401/403 Status to send."""
        offered = False
        if self.api_key is not None:
            given = request.headers.get("X-API-KEY")
            if given is not None:
                offered = True
                if hmac.compare_digest(given.encode(), self.api_key):
                    return None
        if self.bearer is not None:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "bearer" and token:
                offered = True
                if hmac.compare_digest(token.strip().encode(), self.bearer):
                    return None
        if self.api_key is None and self.bearer is None:
            return None
        if offered:
            return status(403, "the API key or bearer token is not the one configured")
        return status(401, "this endpoint needs an X-API-KEY header or an Authorization: Bearer token")


METRICS_API_AUTH = web.AppKey("metrics_api_auth", MetricsApiAuth)


def value_answer(cache: Cache, metric: str, namespace: str | None, selector: str) -> Answer:
    try:
        series, stamp = selected(cache, metric, namespace, selector)
    except Failure as exc:
        return status(exc.code, exc.message)
    return 200, dumps({"value": total(series), "timestamp": rfc3339(stamp)})


async def metric_value(request: web.Request) -> web.Response:
    denied = request.app[METRICS_API_AUTH].check(request)
    if denied is not None:
        return respond(denied)
    cache = request.app[CACHE]
    metric = request.match_info["metric"]
    query = request.query
    namespace = query.get("namespace") or None
    key = ("keda", metric, request.query_string)
    return respond(
        cache.memo(
            key,
            lambda: value_answer(cache, metric, namespace, query.get("labelSelector", "")),
            lambda a: a[0] != 400,
        )
    )


def add_routes(app: web.Application, auth: MetricsApiAuth) -> None:
    app[METRICS_API_AUTH] = auth
    app.router.add_get("/keda/v1/metrics/{metric}", metric_value)
