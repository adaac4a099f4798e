"""Support for the adapter tests: the adapter as a subprocess, an exposition server, HPA's maths.

Builds on ``servers.py`` (Process, wait_for, free ports) rather than copying it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from servers import Process, exporter, http_get, redis_server, start_module, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.kubernetes.pods import PodLister, wanted
from adapter.kubernetes.quantities import parse_quantity
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.scrape import ScrapeSource


def keda_get_metrics(
    address: str, namespace: str, name: str, metric: str, selector: str, target: str
) -> tuple[str, Any]:
    """KEDA's GetMetrics over plain gRPC: ("OK", the value) or (status code name, details)."""
    meta = {"metric": metric, "labelSelector": selector, "target": target}
    ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)
    with grpc.insecure_channel(address) as channel:
        try:
            answer = pb_grpc.ExternalScalerStub(channel).GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName="m"), timeout=5)  # fmt: skip
            return "OK", answer.metricValues[0].metricValueFloat
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()


@functools.cache
def insecure_context() -> ssl.SSLContext:
    """TLS that does not verify the server (the adapters' self-signed serving certificates): one
    context for every request, with no trust store (loading the system's took 40 ms a request)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def get(
    url: str,
    headers: Mapping[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], bytes]:
    """GET over HTTP or HTTPS (``context`` for HTTPS; default: no verification)."""
    if url.startswith("http://"):
        return http_get(url, headers, timeout)
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context or insecure_context()) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def strict_json(body: bytes | str) -> Any:
    """JSON as JSON.parse reads it: NaN, Infinity and -Infinity are not JSON, so they fail."""

    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON: {body[:200]!r}")

    return json.loads(body, parse_constant=refuse)


def get_json(url: str, **kw: Any) -> tuple[int, Any]:
    code, _, body = get(url, **kw)
    return code, strict_json(body)


@contextlib.contextmanager
def exporter_with_queues(tmp: Path, namespaces: Sequence[str] = ("prod", "dev")) -> Iterator[Process]:
    """The simulated exporter polling one empty Redis queue (``jobs-<namespace>``, labels
    ``namespace`` and ``workload: worker``) per namespace on a real redis-server, once each is up:
    queue rules answer there (0 while empty), since a namespace with no queue is a 404."""
    with redis_server() as rds:
        url = f"redis://127.0.0.1:{rds.extra['port']}/0"
        config = tmp / "exporter-queues.yaml"
        config.write_text(
            "queues:\n"
            + "".join(
                f"  - {{name: jobs-{ns}, kind: redis, url: '{url}', key: jobs-{ns},"
                f" labels: {{namespace: {ns}, workload: worker}}}}\n"
                for ns in namespaces
            )
        )
        with exporter(["--simulate", "--config", str(config)]) as p:

            def all_up() -> bool:
                text = http_get(p.url + "/metrics")[2].decode()
                up = r'^rightsizer_queue_source_up\{{[^}}]*queue="jobs-{}"[^}}]*\}} 1'
                return all(re.search(up.format(ns), text, re.M) for ns in namespaces)

            wait_for(all_up, 30, what="the exporter's queues up")
            yield p


# Serves requests without credentials as system:anonymous (no authorizer is configured in the
# tests that use it, so every request is allowed); for tests about the data path, not about auth.
ANONYMOUS = {"RIGHTSIZER_ADAPTER_AUTHENTICATION_ANONYMOUS": "true"}
# Prometheus-mode queries of a refresh of the built-in rules: one per rule, but one for gpu_idle and
# gpu_busy together (adapter/sources/flagpairs.py), and the evidence query
BUILTIN_QUERIES = len(BUILTIN_RULES) - 1 + 1


def start_adapter(
    args: Sequence[str], ready: bool = True, timeout: float = 30, env: Mapping[str, str] | None = None
) -> Process:
    """Run ``python -m adapter`` (``--listen 127.0.0.1:0`` unless given); wait for it to listen
    and, with ``ready``, for ``/readyz``. ``.url`` is its base URL, ``.extra['grpc']`` its gRPC address.
    Requests need credentials unless ``env`` holds ``ANONYMOUS``."""

    def listening(p: Process) -> str | None:
        m = re.search(r"msg=listening address=([0-9.]+):(\d+) scheme=(\w+)", p.log())
        if not m:
            return None
        g = re.search(r"grpc_address=([0-9.]+):(\d+)", p.log())
        if g:
            p.extra["grpc"] = f"127.0.0.1:{g.group(2)}"
        return f"{m.group(3)}://{m.group(1)}:{m.group(2)}"

    return start_module("adapter", args, listening, lambda url: get(url + "/readyz")[0], env, ready, timeout)


@contextlib.contextmanager
def adapter(
    args: Sequence[str], ready: bool = True, env: Mapping[str, str] | None = None
) -> Iterator[Process]:
    p = start_adapter(args, ready, env=env)
    try:
        yield p
    finally:
        p.stop()


def hpa_desired_replicas(items: Sequence[Mapping[str, Any]], target: float) -> int:
    """HPA's External AverageValue maths (PROTOCOLS §5): ceil(sum of item values / target)."""
    if not items:
        raise AssertionError("HPA: no metrics returned (items is empty), it would not scale")
    total = sum(parse_quantity(item["value"]) for item in items)
    return math.ceil(total / target)


def hpa_value_desired_replicas(items: Sequence[Mapping[str, Any]], target: float, ready: int) -> int:
    """HPA's External Value maths (PROTOCOLS-4 §15): ceil(ready x sum of item values / target),
    unchanged within the 10 % tolerance."""
    if not items:
        raise AssertionError("HPA: no metrics returned (items is empty), it would not scale")
    ratio = sum(parse_quantity(item["value"]) for item in items) / target
    return ready if abs(ratio - 1) <= 0.1 else math.ceil(ready * ratio)


class ExpositionServer:
    """A real aiohttp server whose /metrics serves ``text`` (set it to change what it serves) and,
    as a Rightsizer exporter does, ``rightsizer_last_sample_timestamp_seconds``: the time of each
    request unless ``stamp`` holds a fixed value (a frozen exporter) or None (left out)."""

    AUTO = -1.0

    def __init__(self, text: str = "") -> None:
        self.text = text
        self.stamp: float | None = self.AUTO
        self.status = 200
        self.requests = 0
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.server = TestServer(app, host="127.0.0.1")

    async def _metrics(self, request: web.Request) -> web.Response:
        self.requests += 1
        text = self.text
        if self.stamp is not None:
            stamp = time.time() if self.stamp == self.AUTO else self.stamp
            text += f"# TYPE rightsizer_last_sample_timestamp_seconds gauge\n" \
                    f"rightsizer_last_sample_timestamp_seconds {stamp!r}\n"
        return web.Response(status=self.status, text=text, content_type="text/plain")

    @property
    def url(self) -> str:
        return str(self.server.make_url("/metrics"))

    async def __aenter__(self) -> ExpositionServer:
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()


def exposition(samples: Mapping[str, Sequence[tuple[Mapping[str, str], float]]]) -> str:
    """Exposition text for ``{family: [(labels, value), ...]}`` (gauges)."""
    lines = []
    for family, rows in samples.items():
        lines.append(f"# TYPE {family} gauge")
        for labels, value in rows:
            inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{family}{{{inner}}} {value}")
    return "\n".join(lines) + "\n"


# --- the real app in-process, fed by a real exposition server (direct mode) ---

EXT = "/apis/external.metrics.k8s.io/v1beta1"
POD_A = {"gpu": "0", "UUID": "GPU-a", "pod": "chat-7d9c5b6f8b-x2x4z", "namespace": "prod", "container": "srv"}
POD_B = {"gpu": "1", "UUID": "GPU-b", "pod": "chat-7d9c5b6f8b-q9q9q", "namespace": "prod", "container": "srv"}
QUEUES = [
    {"queue": "jobs", "kind": "redis", "namespace": "prod", "workload": "worker"},
    {"queue": "chat", "kind": "vllm", "namespace": "prod", "workload": "chat"},
    {"queue": "shared", "kind": "redis"},
]
FLEET = {
    "rightsizer_queue_depth": list(zip(QUEUES, [7, 3, 2], strict=True)),
    "rightsizer_queue_source_up": [(q, 1) for q in QUEUES],
    "DCGM_FI_DEV_GPU_UTIL": [(POD_A, 80), (POD_B, 40), ({"gpu": "2", "UUID": "GPU-c"}, 10)],
    "rightsizer_gpu_fit_score": [(POD_A, float("nan")), (POD_B, 0.5)],
    "rightsizer_gpu_verdict": [
        ({**POD_A, "verdict": "idle"}, 1),
        ({**POD_A, "verdict": "rightsized"}, 0),
        ({**POD_B, "verdict": "idle"}, 0),
        ({**POD_B, "verdict": "rightsized"}, 1),
    ],
}
Make = Callable[..., Awaitable[tuple[TestClient, Cache, ExpositionServer]]]


@pytest.fixture
async def make(aiohttp_client: Any) -> AsyncIterator[Make]:
    servers: list[ExpositionServer] = []
    closing: list[PodLister] = []

    async def build(
        text: str = exposition(FLEET), refresh: bool = True, **settings: Any
    ) -> tuple[TestClient, Cache, ExpositionServer]:
        srv = await ExpositionServer(text).__aenter__()
        servers.append(srv)
        flags = {
            "direct": {"exporters": [srv.url], "stale_after_seconds": 0},
            "kubernetes": {"pod_labels": "series"},
            "insecure_http": True,
            "listen": "127.0.0.1:0",
            **settings,
        }
        cfg = load_config(None, flags, environ={})
        metrics = AdapterMetrics()
        source = ScrapeSource(cfg.direct, metrics)
        await source.start()
        cache = Cache(
            cfg.effective_rules, source, metrics, cfg.max_cached_answers, cfg.max_cached_answer_bytes
        )
        if refresh:
            await cache.refresh_once()
        lister = PodLister(cfg.kubernetes) if wanted(cfg.kubernetes) else None
        if lister is not None:
            await lister.start()
            closing.append(lister)
        app = create_app(
            cache,
            Gate.off(),
            metrics,
            MetricsApiAuth(cfg.metrics_api),
            lister,
        )
        app.on_cleanup.append(lambda _: source.close())
        return await aiohttp_client(app), cache, srv

    yield build
    for srv in servers:
        await srv.__aexit__()
    for lister in closing:
        await lister.close()


async def client_get(client: TestClient, path: str, **headers: str) -> tuple[int, Any]:
    resp = await client.get(path, headers=headers)
    assert resp.content_type == "application/json", (path, resp.content_type)
    return resp.status, strict_json(await resp.read())


def assert_status(answer: tuple[int, Any], code: int, reason: str) -> None:
    status, body = answer
    assert status == code
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert (body["code"], body["reason"]) == (code, reason) and body["message"]


@contextlib.asynccontextmanager
async def recording_adapter(
    url: str, aiohttp_client: Any, **prometheus: Any
) -> AsyncIterator[tuple[Any, Cache, list[str]]]:
    """The adapter's app on the engine at ``url`` (its cache refreshed by the test), its client, and
    every query a refresh sends, in order (the source's ``_post``, which every query goes through)."""
    cfg = load_config(None, {"prometheus": {"url": url, **prometheus}}, environ={})
    source = PrometheusSource(cfg.prometheus, AdapterMetrics())
    sent: list[str] = []
    post = source._post

    async def sending(promql: str, at: float | None = None) -> Any:
        sent.append(promql)
        return await post(promql, at)

    source._post = sending  # type: ignore[method-assign]
    await source.start()
    try:
        cache = Cache(cfg.effective_rules, source, AdapterMetrics())
        app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
        yield await aiohttp_client(app), cache, sent
    finally:
        await source.close()


async def refreshes(cache: Cache, sent: list[str], count: int = 3) -> AsyncIterator[int]:
    """Refreshes ``cache`` ``count`` times (``sent``: what ``recording_adapter`` records), yielding
    each refresh's index once it is done, having sent one query per built-in rule (the flag pair:
    one) and one evidence query."""
    for refresh in range(count):
        sent.clear()
        await cache.refresh_once()
        assert len(sent) == BUILTIN_QUERIES, sent
        yield refresh
