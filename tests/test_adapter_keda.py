"""KEDA's external scaler over real gRPC, with a client generated from the project's own proto."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import trustme
from adapter_support import ExpositionServer, exposition

from adapter.cache import Cache
from adapter.config import GrpcSettings, load_config
from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.scaler import ExternalScaler, start_server
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.scrape import ScrapeSource


def queues(jobs: float) -> str:
    """Queue ``jobs`` (prod) at ``jobs`` items, queue ``x`` (dev) at 50, and the SLO latency ratio of
    workload ``llama3-8b`` (prod) at ``jobs`` too (docs/slos.md's trigger reads it)."""
    jobs_queue, x_queue = {"queue": "jobs", "namespace": "prod"}, {"queue": "x", "namespace": "dev"}
    chat = {"namespace": "prod", "workload": "llama3-8b"}
    return exposition(
        {
            "rightsizer_queue_depth": [(jobs_queue, jobs), (x_queue, 50)],
            "rightsizer_queue_source_up": [(jobs_queue, 1), (x_queue, 1)],
            "rightsizer_workload_slo_scaling_latency_ratio": [(chat, jobs)],
            "rightsizer_workload_slo_scaling_up": [(chat, 1)],
        }
    )


@dataclass
class Scaler:
    stub: Any
    exporter: ExpositionServer
    cache: Cache
    metrics: AdapterMetrics


@contextlib.asynccontextmanager
async def running(
    grpc_cfg: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Cache, ExpositionServer, int, AdapterMetrics]]:
    async with ExpositionServer(queues(5)) as exporter:
        cfg = load_config(
            None,
            {
                "direct": {
                    "exporters": [exporter.url],
                    "scrape_interval_seconds": 0.1,
                    "stale_after_seconds": 0,
                },
                "grpc": {"listen": "127.0.0.1:0", **(grpc_cfg or {})},
            },
            environ={},
        )
        metrics = AdapterMetrics()
        source = ScrapeSource(cfg.direct, metrics)
        await source.start()
        cache = Cache(cfg.effective_rules, source, metrics)
        await cache.refresh_once()
        refresher = asyncio.create_task(cache.run())
        server, port = await start_server(cfg.grpc, ExternalScaler(cache, metrics))
        try:
            yield cache, exporter, port, metrics
        finally:
            refresher.cancel()
            await server.stop(grace=0)
            await source.close()


@pytest.fixture
async def scaler() -> AsyncIterator[Scaler]:
    async with (
        running() as (cache, exporter, port, metrics),
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        yield Scaler(pb_grpc.ExternalScalerStub(channel), exporter, cache, metrics)


def ref(namespace: str = "prod", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="worker", namespace=namespace, scalerMetadata=metadata)


async def test_get_metric_spec_fills_both_target_fields(scaler: Scaler) -> None:
    answer = await scaler.stub.GetMetricSpec(ref(metric="rightsizer_queue_depth", target="2.5"))
    [spec] = answer.metricSpecs
    assert (spec.metricName, spec.targetSizeFloat, spec.targetSize) == ("rightsizer_queue_depth", 2.5, 2)


async def test_get_metrics_fills_both_value_fields_and_respects_namespace(scaler: Scaler) -> None:
    scaler.exporter.text = queues(7.4)
    await scaler.cache.refresh_once()
    request = pb.GetMetricsRequest(
        scaledObjectRef=ref(metric="rightsizer_queue_depth"), metricName="s0-queue"
    )
    [value] = (await scaler.stub.GetMetrics(request)).metricValues
    assert (value.metricName, value.metricValueFloat, value.metricValue) == ("s0-queue", 7.4, 7)
    request = pb.GetMetricsRequest(
        scaledObjectRef=ref("dev", metric="rightsizer_queue_depth"), metricName="m"
    )
    assert (await scaler.stub.GetMetrics(request)).metricValues[0].metricValueFloat == 50
    selector = ref(metric="rightsizer_queue_depth", labelSelector="queue=none")
    request = pb.GetMetricsRequest(scaledObjectRef=selector, metricName="m")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await scaler.stub.GetMetrics(request)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND  # a typo is not an empty queue


async def test_is_active_compares_with_the_activation_threshold(scaler: Scaler) -> None:
    for threshold, active in (("4.9", True), ("5", False), ("", True)):
        meta = {"metric": "rightsizer_queue_depth", "activationThreshold": threshold}
        assert (await scaler.stub.IsActive(ref(**meta))).result is active


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({}, "scalerMetadata.metric is required"),
        ({"metric": "nope"}, "scalerMetadata.metric 'nope' is not served here"),
        ({"metric": "rightsizer_queue_depth", "labelSelector": "a in ("}, "scalerMetadata.labelSelector"),
        ({"metric": "rightsizer_queue_depth", "target": "ten"}, "scalerMetadata.target must be a number"),
        ({"metric": "rightsizer_queue_depth", "target": "0"}, "must be greater than 0"),
        ({"metric": "rightsizer_queue_depth", "activationThreshold": "nan"}, "must be a finite number"),
        ({"metric": "rightsizer_queue_depth"}, "scalerMetadata.target is required"),
        (  # a typo must not widen the selection to every queue of the namespace
            {"metric": "rightsizer_queue_depth", "labelselector": "queue=jobs", "target": "1"},
            "scalerMetadata has unknown keys: 'labelselector' (did you mean 'labelSelector'?); "
            "known: metric, labelSelector, target, activationThreshold (and KEDA's own: scalerAddress,",
        ),
        ({"metric": "rightsizer_queue_depth", "target": "1", "metricType": "Value"}, "'metricType'"),
    ],
)
async def test_bad_metadata_is_invalid_argument(
    scaler: Scaler, metadata: dict[str, str], message: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await scaler.stub.GetMetricSpec(ref(**metadata))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (exc.value.details() or "")


async def test_kedas_own_trigger_keys_are_accepted(scaler: Scaler) -> None:
    """KEDA passes every key of the trigger's metadata, its own included (external_scaler.go)."""
    keda = {"scalerAddress": "rightsizer-adapter.rightsizer.svc:9443", "enableTLS": "true",
            "unsafeSsl": "false", "caCert": "-----BEGIN CERTIFICATE-----", "tlsClientCert": "c",
            "tlsClientKey": "k", "tlsCertFile": "/c.pem"}  # fmt: skip
    meta = ref(metric="rightsizer_queue_depth", labelSelector="queue=jobs", target="1", **keda)
    request = pb.GetMetricsRequest(scaledObjectRef=meta, metricName="m")
    [value] = (await scaler.stub.GetMetrics(request)).metricValues
    assert value.metricValueFloat == 5


async def test_backend_down_is_unavailable(scaler: Scaler) -> None:
    scaler.exporter.status = 500
    await scaler.cache.refresh_once()
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await scaler.stub.IsActive(ref(metric="rightsizer_queue_depth"))
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE and "HTTP 500" in (exc.value.details() or "")


async def test_stream_metric_spec_is_unimplemented(scaler: Scaler) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        async for _ in scaler.stub.StreamMetricSpec(ref(metric="rightsizer_queue_depth", target="1")):
            pass
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_stream_is_active_pushes_true_on_each_rise(scaler: Scaler) -> None:
    stream = scaler.stub.StreamIsActive(ref(metric="rightsizer_queue_depth", activationThreshold="10"))
    received: asyncio.Queue[bool] = asyncio.Queue()

    async def read() -> None:
        async for message in stream:
            await received.put(message.result)

    reader = asyncio.create_task(read())
    try:
        await wait_until(
            lambda: scaler.metrics.registry.get_sample_value("rightsizer_adapter_keda_streams") == 1
        )
        await asyncio.sleep(0.3)  # several refreshes at 5 (inactive): nothing is pushed
        assert received.empty()
        scaler.exporter.text = queues(20)
        assert await asyncio.wait_for(received.get(), 10) is True
        scaler.exporter.text = queues(3)  # falling is not pushed
        await wait_until(lambda: scaler.cache.states["rightsizer_queue_depth"].vector.series[0].value == 3)
        scaler.exporter.text = queues(11)
        assert await asyncio.wait_for(received.get(), 10) is True
        assert received.empty()
    finally:
        stream.cancel()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await reader
    await wait_until(lambda: scaler.metrics.registry.get_sample_value("rightsizer_adapter_keda_streams") == 0)


async def wait_until(predicate: Any, timeout: float = 10) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


async def test_tls_and_client_certificates(tmp_path: Any) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    server_cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    server_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client_cert = ca.issue_cert("keda-operator")
    tls = {
        "tls_cert_file": str(tmp_path / "cert.pem"),
        "tls_private_key_file": str(tmp_path / "key.pem"),
        "client_ca_file": str(tmp_path / "ca.pem"),
    }
    async with running(tls) as (_, _, port, _):
        with_cert = grpc.ssl_channel_credentials(
            ca.cert_pem.bytes(), client_cert.private_key_pem.bytes(), client_cert.cert_chain_pems[0].bytes()
        )
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", with_cert) as channel:
            answer = await pb_grpc.ExternalScalerStub(channel).IsActive(ref(metric="rightsizer_queue_depth"))
            assert answer.result is True
        without = grpc.ssl_channel_credentials(ca.cert_pem.bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", without) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await pb_grpc.ExternalScalerStub(channel).IsActive(
                    ref(metric="rightsizer_queue_depth"), timeout=5
                )
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_grpc_settings_checked() -> None:
    with pytest.raises(ValueError, match="go together"):
        GrpcSettings(listen=":1", tls_cert_file="x").validate()


async def test_a_grpc_call_tells_a_refresh_s_workers_to_give_way(
    scaler: Scaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter import giveway

    monkeypatch.setattr(giveway, "_served", float("-inf"))
    before = giveway._monotonic()
    await scaler.stub.GetMetricSpec(ref(metric="rightsizer_queue_depth", target="2"))
    assert before <= giveway._served <= giveway._monotonic()
