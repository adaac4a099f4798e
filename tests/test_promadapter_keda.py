"""KEDA (real gRPC, and the metrics-api JSON) on metrics of a prometheus-adapter file that are
queried per request: a rule whose ``metricsQuery`` cannot be batched, and a batched rule asked with
a selector on a label its query aggregates away. Both run prometheus-adapter's per-request query
against a real Prometheus scraping the exporter and two Redis queues, with the outage semantics of
every other metric: Prometheus down -> UNAVAILABLE, no series -> NOT_FOUND, a real 0 stays 0.

Expected values are the queues' lengths: ``busy`` holds 4 jobs, ``idle`` none.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from servers import Process, exporter, prom_query, prometheus, redis_server, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.keda.scaler import ExternalScaler, start_server
from adapter.kubernetes.gate import Gate
from adapter.promadapter import schema
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app

FILE = """\
externalRules:
# Aggregating the namespace away cannot be batched: queried per request.
- seriesQuery: '{__name__="rightsizer_queue_depth",queue!=""}'
  metricsQuery: sum without (namespace, instance, job) (<<.Series>>{<<.LabelMatchers>>})
  name: {as: "depth_per_request"}
  resources:
    overrides: {namespace: {resource: namespace}}
# Batched; a selector on `kind`, which by (queue) aggregates away, needs the query of its own.
- seriesQuery: '{__name__="rightsizer_queue_depth",queue!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)
  name: {as: "depth_by_queue"}
  resources:
    overrides: {namespace: {resource: namespace}}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, Process, Path]]:
    tmp = tmp_path_factory.mktemp("keda")
    with redis_server() as server:
        port = server.extra["port"]
        client = redis.Redis(port=port, socket_timeout=5)
        client.rpush("busy", *range(4))
        config = tmp / "exporter.yaml"
        config.write_text(
            "queues:\n"
            + "".join(
                f"  - {{name: {q}, kind: redis, url: 'redis://127.0.0.1:{port}/0', key: {q},"
                " labels: {namespace: prod}}\n"
                for q in ("busy", "idle")
            )
        )
        file = tmp / "adapter.yaml"
        file.write_text(FILE)
        with (
            exporter(["--simulate", "--config", str(config)]) as sim,
            prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as prom,
        ):
            wait_for(lambda: len(prom_query(prom.url, 'rightsizer_queue_depth{namespace="prod"}')) == 2, 30)
            yield sim, prom, file
        client.close()


async def serve(prom_url: str, file: Path) -> tuple[Cache, PromAdapterSource, Any, int]:
    cfg = load_config(
        None,
        {
            "prometheus": {"url": prom_url},
            "prometheus_adapter": {"config_file": str(file)},
            "grpc": {"listen": "127.0.0.1:0"},
        },
        environ={},
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, schema.load(str(file)), 600, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    await cache.refresh_once()
    server, port = await start_server(cfg.grpc, ExternalScaler(cache, metrics))
    return cache, source, server, port


@pytest.fixture
async def scaler(stack: tuple[Process, Process, Path]) -> AsyncIterator[tuple[Any, Cache]]:
    _, prom, file = stack
    cache, source, server, port = await serve(prom.url, file)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.ExternalScalerStub(channel), cache
    await server.stop(grace=0)
    await source.close()


def ref(metric: str, selector: str, namespace: str = "prod") -> pb.ScaledObjectRef:
    meta = {"metric": metric, "labelSelector": selector, "target": "1"}
    return pb.ScaledObjectRef(name="worker", namespace=namespace, scalerMetadata=meta)


async def get_metric(stub: Any, metric: str, selector: str, namespace: str = "prod") -> float:
    request = pb.GetMetricsRequest(scaledObjectRef=ref(metric, selector, namespace), metricName=metric)
    [value] = (await stub.GetMetrics(request)).metricValues
    return float(value.metricValueFloat)


async def code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value.code()


async def test_a_per_request_metric_is_served_to_keda(scaler: Any) -> None:
    stub, cache = scaler
    assert cache.states["depth_per_request"].vector is None  # not in the refresh: asked per request
    assert await get_metric(stub, "depth_per_request", "queue=busy") == 4
    assert (await stub.IsActive(ref("depth_per_request", "queue=busy"))).result is True


async def test_stream_is_active_pushes_for_a_per_request_metric(scaler: Any) -> None:
    """The stream checks at once, then after every refresh: the busy queue is active, so the first
    message is true (nothing is pushed while a metric has no value)."""
    stub, _ = scaler
    stream = stub.StreamIsActive(ref("depth_per_request", "queue=busy"))
    message = await asyncio.wait_for(stream.read(), 30)
    assert message.result is True
    stream.cancel()


async def test_a_real_zero_stays_zero_and_inactive(scaler: Any) -> None:
    stub, _ = scaler
    assert await get_metric(stub, "depth_per_request", "queue=idle") == 0
    assert (await stub.IsActive(ref("depth_per_request", "queue=idle"))).result is False


async def test_no_series_is_not_found_never_zero(scaler: Any) -> None:
    stub, _ = scaler
    request = pb.GetMetricsRequest(scaledObjectRef=ref("depth_per_request", "queue=nope"))
    assert await code_of(stub.GetMetrics(request)) == grpc.StatusCode.NOT_FOUND
    other_namespace = pb.GetMetricsRequest(scaledObjectRef=ref("depth_per_request", "queue=busy", "dev"))
    assert await code_of(stub.GetMetrics(other_namespace)) == grpc.StatusCode.NOT_FOUND
    assert await code_of(stub.IsActive(ref("depth_per_request", "queue=nope"))) == grpc.StatusCode.NOT_FOUND


async def test_a_selector_on_an_aggregated_label_gets_its_own_query(scaler: Any) -> None:
    """prometheus-adapter puts kind="redis" into the query, before `by (queue)` drops `kind`."""
    stub, _ = scaler
    assert await get_metric(stub, "depth_by_queue", "queue=busy") == 4  # from the refresh's vector
    assert await get_metric(stub, "depth_by_queue", "kind=redis,queue=busy") == 4
    request = pb.GetMetricsRequest(scaledObjectRef=ref("depth_by_queue", "kind=vllm,queue=busy"))
    assert await code_of(stub.GetMetrics(request)) == grpc.StatusCode.NOT_FOUND


async def test_metrics_api_json_serves_per_request_metrics(
    stack: tuple[Process, Process, Path], aiohttp_client: Any
) -> None:
    _, prom, file = stack
    cache, source, server, _ = await serve(prom.url, file)
    await server.stop(grace=0)
    cfg = load_config(None, {"prometheus": {"url": prom.url}}, environ={})
    client = await aiohttp_client(
        create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    )
    path = "/keda/v1/metrics/depth_per_request?namespace=prod&labelSelector="
    for selector, code, value in (
        ("queue%3Dbusy", 200, 4),
        ("queue%3Didle", 200, 0),
        ("queue%3Dnope", 404, None),
    ):
        resp = await client.get(path + selector)
        body = await resp.json()
        assert resp.status == code, body
        assert body.get("value") == value
    await source.close()


async def test_prometheus_down_is_unavailable(stack: tuple[Process, Process, Path]) -> None:
    sim, _, file = stack
    with prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as prom:
        wait_for(lambda: prom_query(prom.url, 'rightsizer_queue_depth{queue="busy"}'), 30)
        _, source, server, port = await serve(prom.url, file)
        prom.stop()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            request = pb.GetMetricsRequest(scaledObjectRef=ref("depth_per_request", "queue=busy"))
            assert await code_of(stub.GetMetrics(request)) == grpc.StatusCode.UNAVAILABLE
            request = pb.GetMetricsRequest(scaledObjectRef=ref("depth_by_queue", "kind=redis,queue=busy"))
            assert await code_of(stub.GetMetrics(request)) == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(grace=0)
        await source.close()
