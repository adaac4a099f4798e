"""HTTP handlers of the Kubernetes metrics APIs: discovery, external and custom metrics.

Handlers only look up answers memoized for the current refresh (``Cache.memo``); building one
happens on the first request for it after a refresh. Every error is a metav1.Status, and every
answer is JSON whatever ``Accept`` says (clients that ask for protobuf accept JSON too).
"""

from __future__ import annotations

from aiohttp import web

from ..cache import Answer, Cache
from . import answers
from .answers import CUSTOM_GROUP, EXTERNAL_GROUP, Failure, check_namespace, status
from .discovery import VERSIONS, Discovery
from .pods import PodLabels, PodLister, PodListError

CACHE = web.AppKey("cache", Cache)
DISCOVERY = web.AppKey("discovery", Discovery)
POD_LISTER = web.AppKey("pod_lister", PodLister)
JSON = "application/json"


def respond(answer: Answer) -> web.Response:
    code, body = answer
    return web.Response(status=code, body=body, content_type=JSON)


def _keep(answer: Answer) -> bool:
    return answer[0] != 400  # bad selectors are cheap to refuse and would only fill the memo


async def external(request: web.Request) -> web.Response:
    cache = request.app[CACHE]
    info = request.match_info
    metric, namespace = info["metric"], info["namespace"]
    per_request = getattr(cache.source, "answer_per_request", None)  # prometheus-adapter files
    if per_request is not None:
        answer = await per_request("external", "v1beta1", [namespace, metric], request.query)
        if answer is not None:
            return respond(answer)
    key = ("external", metric, namespace, request.query.get("labelSelector", ""))
    return respond(cache.memo(key, lambda: answers.external(cache, metric, namespace, request.query), _keep))


async def discovery(request: web.Request) -> web.Response:
    found, cache = request.app[DISCOVERY], request.app[CACHE]
    if found.generation != cache.rules_generation:
        listed = getattr(cache.source, "discovery_resources", None)  # prometheus-adapter files
        found.rebuild(list(cache.rules.values()), cache.rules_generation, listed() if listed else None)
    body = found.get(request.path)
    if body is None:
        return respond(status(404, f"the server could not find the requested resource {request.path[:200]}"))
    return web.Response(body=body, content_type=JSON)


def _is_pods_query(parts: list[str]) -> bool:
    return len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "pods"


def _custom(
    cache: Cache, version: str, parts: list[str], request: web.Request, pod_labels: PodLabels | None
) -> Answer:
    """Route the path below ``/apis/custom.metrics.k8s.io/{version}/``."""
    query = request.query
    if _is_pods_query(parts):
        _, ns, _, pod, metric = parts
        return answers.custom_pods(cache, version, ns, pod, metric, query, pod_labels)
    if len(parts) == 5 and parts[0] == "namespaces":
        _, ns, resource, name, metric = parts
        return answers.custom_object(cache, version, ns, resource, name, metric, query)
    if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "metrics":
        return answers.custom_object(cache, version, None, "namespaces", parts[1], parts[3], query)
    if len(parts) == 3 and parts[0] != "namespaces":
        resource, name, metric = parts
        return answers.custom_object(cache, version, None, resource, name, metric, query)
    return status(404, f"the server could not find the requested resource {request.path[:200]}")


async def apis(request: web.Request) -> web.Response:
    """Everything under /apis that is not an external-metrics value: discovery and custom metrics."""
    path = request.path.rstrip("/")
    if request.method != "GET":
        return respond(status(405, f"{request.method} is not allowed; the metrics APIs are read-only"))
    parts = path.split("/")[2:]  # "", "apis", group, version, ...
    if len(parts) <= 2:
        return await discovery(request)
    group, version, rest = parts[0], parts[1], parts[2:]
    if group == CUSTOM_GROUP and version in VERSIONS[CUSTOM_GROUP] and all(rest):
        cache = request.app[CACHE]
        lister = request.app.get(POD_LISTER)
        pod_labels: PodLabels | None = None
        listed_at = None
        if lister is not None and _is_pods_query(rest) and request.query.get("labelSelector", "").strip():
            try:
                check_namespace(rest[1])
                listed_at, pod_labels = await lister.pods(rest[1])
            except Failure as exc:
                return respond(status(exc.code, exc.message))
            except PodListError as exc:
                return respond(status(503, str(exc)))
        per_request = getattr(cache.source, "answer_per_request", None)  # prometheus-adapter files
        if per_request is not None:
            answer = await per_request("custom", version, rest, request.query, pod_labels)
            if answer is not None:
                return respond(answer)
        query = request.query
        key = ("custom", version, path, query.get("labelSelector", ""), query.get("metricLabelSelector", ""),
               listed_at)  # fmt: skip
        return respond(cache.memo(key, lambda: _custom(cache, version, rest, request, pod_labels), _keep))
    if group == EXTERNAL_GROUP and version in VERSIONS[EXTERNAL_GROUP]:
        return respond(status(404, "external metrics are read at namespaces/{namespace}/{metric}"))
    return respond(status(404, f"the server could not find the requested resource {request.path[:200]}"))


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"/apis/{EXTERNAL_GROUP}/v1beta1/namespaces/{{namespace}}/{{metric}}", external)
    app.router.add_route("*", "/apis", apis)
    app.router.add_route("*", "/apis/{tail:.*}", apis)
