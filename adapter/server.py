"""The adapter's HTTP(S) app: metrics APIs under /apis, KEDA's metrics-api, health and own metrics.

One middleware authenticates and authorizes every request (``kubernetes/gate.py``; KEDA's
metrics-api also takes its static secrets, ``keda/metrics_api.py``), turns unexpected faults into
a 500 Status, and records every request's endpoint, code and latency. Only the always-allowed
paths (``/healthz``, ``/livez``, ``/readyz`` by default) need no credentials.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from .cache import Cache
from .giveway import serving
from .keda import metrics_api
from .keda.metrics_api import MetricsApiAuth
from .kubernetes import apis
from .kubernetes.answers import status
from .kubernetes.apis import CACHE, DISCOVERY, JSON, POD_LISTER, respond
from .kubernetes.auth import Denied
from .kubernetes.discovery import Discovery
from .kubernetes.gate import Gate
from .kubernetes.openapi import openapi_v2
from .kubernetes.pods import PodLister
from .selfmetrics import AdapterMetrics

log = logging.getLogger("rightsizer.adapter.server")
METRICS = web.AppKey("metrics", AdapterMetrics)
AUTH = web.AppKey("auth", Gate)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EXTERNAL_PREFIX = "/apis/external.metrics.k8s.io/v1beta1/namespaces/"


def endpoint_of(path: str) -> str:
    """The ``endpoint`` label of a request (a fixed, small set)."""
    if path.startswith(EXTERNAL_PREFIX):
        return "external"
    if path.startswith("/apis/custom.metrics.k8s.io/") and path.count("/") > 4:
        return "custom"
    if path == "/apis" or path.startswith("/apis/"):
        return "discovery"
    if path.startswith("/keda/"):
        return "keda_metrics_api"
    if path in ("/healthz", "/livez", "/readyz"):
        return "health"
    if path == "/metrics":
        return "metrics"
    return "other"


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    serving()
    endpoint = endpoint_of(request.path)
    try:
        if endpoint == "keda_metrics_api" and metrics_api.METRICS_API_AUTH in request.app:
            await metrics_api.admit(request, request.app[AUTH])
        else:
            await request.app[AUTH].admit(request)
        response = await handler(request)
    except Denied as exc:
        response = respond(status(exc.code, exc.message))
    except web.HTTPException as exc:
        response = respond(status(exc.status, exc.reason))
    except Exception:
        log.exception("request failed unexpectedly", extra={"path": request.path[:200]})
        response = respond(status(500, "internal error; see the adapter's log"))
    request.app[METRICS].request(endpoint, response.status, time.perf_counter() - started)
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    if request.app[CACHE].ready:
        return web.Response(text="ok")
    return web.Response(status=503, text="no successful refresh yet")


async def own_metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def status_body(code: int, reason: str) -> tuple[bytes, str]:
    """A request refused before any handler (malformed, too long, no HTTP/1.x), as a metav1.Status."""
    return status(code, reason)[1], JSON


async def not_found(request: web.Request) -> web.Response:
    return respond(status(404, f"the server could not find the requested resource {request.path[:200]}"))


def create_app(
    cache: Cache,
    auth: Gate,
    metrics: AdapterMetrics,
    metrics_api_auth: MetricsApiAuth | None,
    pod_lister: PodLister | None = None,
) -> web.Application:
    """The app; ``metrics_api_auth`` None turns KEDA's metrics-api endpoint off; ``pod_lister`` None
    matches pods queries' labelSelector against the series' own labels."""
    app = web.Application(middlewares=[middleware], client_max_size=64 * 1024)
    app[CACHE] = cache
    app[DISCOVERY] = Discovery(list(cache.rules.values()))
    app[AUTH] = auth
    app[METRICS] = metrics
    if pod_lister is not None:
        app[POD_LISTER] = pod_lister
    for path in ("/healthz", "/livez"):
        app.router.add_get(path, healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", own_metrics)
    apis.add_routes(app)
    if metrics_api_auth is not None:
        metrics_api.add_routes(app, metrics_api_auth)
    app.router.add_get("/openapi/v2", openapi_v2)  # what kube-apiserver's aggregator downloads
    app.router.add_route("*", "/{tail:.*}", not_found)  # /openapi/v3 (skipped quietly on 404) and the rest
    return app
