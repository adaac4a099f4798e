"""``/openapi/v2``: the OpenAPI (Swagger 2.0) document kube-apiserver's aggregator downloads.

The aggregator's OpenAPI controller (``k8s.io/kube-aggregator/pkg/controllers/openapi/aggregator``)
GETs ``/openapi/v2`` from every APIService's backend about every 30 s, as ``system:aggregator``
with ``Accept: application/json`` and, once it has one, the last ``ETag`` in ``If-None-Match``.
It takes 200 with a Swagger document (and its ``ETag``) or 304 for "unchanged"; a 404 makes it log
"failed to download" on every round, so the document is served. It names the paths of the two
metrics APIs, their parameters and their answers; the same body and ``ETag`` for as long as the
adapter runs (the served metrics are listed by discovery, not here). The request is authenticated
and authorized like any other: the aggregator's user comes with ``system:authenticated``, which
kube-apiserver's default ``system:discovery`` role allows ``get`` on ``/openapi/*``.

``/openapi/v3`` stays 404: the aggregator (1.27+) reads 404 there as "this server provides no v3
spec" and skips it quietly (``OpenAPIV3Root``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from .answers import CUSTOM_GROUP, EXTERNAL_GROUP

JSON = "application/json"


def _param(name: str, where: str = "path", what: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "in": where, "type": "string", "required": where == "path"}
    if what:
        out["description"] = what
    return out


SELECTOR = _param("labelSelector", "query", "Kubernetes label selector on the series' labels.")
METRIC_SELECTOR = _param("metricLabelSelector", "query", "Label selector on the metric's labels.")
ANSWERS = {
    "200": {"description": "The values."},
    "400": {"description": "A bad namespace or selector (metav1.Status)."},
    "401": {"description": "No or bad credentials (metav1.Status)."},
    "403": {"description": "Not allowed (metav1.Status)."},
    "404": {"description": "No such metric, or nothing matches the selection (metav1.Status)."},
    "503": {"description": "A source of the selection is down, stale or unknown (metav1.Status)."},
}


def _get(summary: str, op: str, params: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "operationId": op,
            "produces": [JSON],
            "schemes": ["https"],
            "parameters": params,
            "responses": {**ANSWERS, "200": {"description": f"A {kind}."}},
        }
    }


def document() -> dict[str, Any]:
    ext, cus = f"/apis/{EXTERNAL_GROUP}/v1beta1", f"/apis/{CUSTOM_GROUP}"
    ns, metric = _param("namespace"), _param("metric")
    resource, name = _param("resource"), _param("name")
    paths: dict[str, Any] = {
        f"{ext}/namespaces/{{namespace}}/{{metric}}": _get(
            "External metric values",
            "listExternalMetricValue",
            [ns, metric, SELECTOR],
            "ExternalMetricValueList",
        ),
    }
    for version in ("v1beta1", "v1beta2"):
        tag = version.capitalize()
        paths[f"{cus}/{version}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}"] = _get(
            "Custom metric of a namespaced object, or of pods (name *)",
            f"readNamespacedCustomMetricValue{tag}",
            [ns, resource, name, metric, SELECTOR, METRIC_SELECTOR],
            "MetricValueList",
        )
        paths[f"{cus}/{version}/{{resource}}/{{name}}/{{metric}}"] = _get(
            "Custom metric of a cluster-scoped object",
            f"readCustomMetricValue{tag}",
            [resource, name, metric, METRIC_SELECTOR],
            "MetricValueList",
        )
    return {
        "swagger": "2.0",
        "info": {"title": "Rightsizer adapter: external and custom metrics APIs", "version": "v1beta1"},
        "paths": paths,
    }


BODY = json.dumps(document(), separators=(",", ":"), sort_keys=True, allow_nan=False).encode()
ETAG = '"' + hashlib.sha256(BODY).hexdigest() + '"'


async def openapi_v2(request: web.Request) -> web.Response:
    if ETAG in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
        return web.Response(status=304, headers={"ETag": ETAG})
    return web.Response(body=BODY, content_type=JSON, headers={"ETag": ETAG})
