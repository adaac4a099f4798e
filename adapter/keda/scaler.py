"""KEDA external scaler (gRPC, grpcio asyncio), including the push of ``external-push``.

Trigger metadata: ``metric`` (required, a served external metric), ``labelSelector``, ``target``
(a number in (0, 1e18]; needed by GetMetricSpec), ``activationThreshold`` (float, default 0), and
KEDA's own keys of the trigger, which it passes along (``scalerAddress``, the TLS ones). Any other
key is refused with INVALID_ARGUMENT listing the known ones: a typo such as ``labelselector`` would
otherwise select every series of the namespace. The value is what HPA would
compute from the external answer: the sum of the selected series. Active means value >
activationThreshold. StreamIsActive sends ``true`` whenever the trigger goes from inactive to
active, checked after every cache refresh (every exporter scrape in direct mode).

Unknown is never 0 and partial is never smaller: a selector matching nothing is NOT_FOUND; a
selection whose source is down, stale, frozen or answered partially (or the backend down) is
UNAVAILABLE, so KEDA counts a failure and applies its ``fallback`` instead of scaling to zero;
StreamIsActive pushes nothing while there is no value.

Metrics of a prometheus-adapter file that are queried per request (the source's ``keda_series``)
are asked of Prometheus for each call, with the same semantics.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from rightsizer_core.limits import ListenerLimits
from rightsizer_core.listen import parse_listen

from ..cache import Cache
from ..config import GrpcSettings
from ..giveway import serving
from ..kubernetes.answers import Failure, selected, total
from ..kubernetes.selectors import SelectorError, parse
from ..selfmetrics import AdapterMetrics
from . import externalscaler_pb2 as pb
from . import externalscaler_pb2_grpc as pb_grpc
from . import unknown_keys
from .grpc_checks import bind_problem, check_tls_files

MAX_TARGET = 1e18  # GetMetricSpec also sends the target rounded into an int64 (targetSize)


@dataclass(frozen=True)
class Trigger:
    metric: str
    selector: str
    target: float | None
    activation: float
    namespace: str


def _number(meta: Any, key: str) -> float | None:
    text = meta.get(key)
    if text is None or text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"scalerMetadata.{key} must be a number; got {text[:60]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"scalerMetadata.{key} must be a finite number; got {text[:60]!r}")
    return value


OWN_KEYS = ("metric", "labelSelector", "target", "activationThreshold")
# KEDA's own keys of an external / external-push trigger, which it passes along too
# (pkg/scalers/external_scaler.go; tlsCertFile is the deprecated spelling of tlsClientCert).
KEDA_KEYS = (
    "scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey", "tlsCertFile",
)  # fmt: skip


def parse_trigger(ref: pb.ScaledObjectRef, cache: Cache) -> Trigger:
    """The trigger a ScaledObjectRef describes; raises ValueError with a message for KEDA's events."""
    meta = ref.scalerMetadata
    unknown = unknown_keys(meta.keys(), OWN_KEYS, KEDA_KEYS, "scalerMetadata")
    if unknown:  # a typo (labelselector) would otherwise widen the selection to everything
        raise ValueError(unknown)
    served = sorted(n for n, s in cache.states.items() if "external" in s.rule.apis)
    metric = meta.get("metric", "").strip()
    if not metric:
        raise ValueError(f"scalerMetadata.metric is required (one of: {', '.join(served)})")
    if metric not in served:
        raise ValueError(
            f"scalerMetadata.metric {metric[:100]!r} is not served here (one of: {', '.join(served)})"
        )
    selector = meta.get("labelSelector", "")
    try:
        parse(selector)
    except SelectorError as exc:
        raise ValueError(f"scalerMetadata.labelSelector {selector[:100]!r}: {exc}") from None
    target = _number(meta, "target")
    if target is not None and not 0 < target <= MAX_TARGET:
        raise ValueError(
            f"scalerMetadata.target must be greater than 0 and at most {MAX_TARGET:g}; "
            f"got {meta.get('target', '')[:60]!r}"
        )
    activation = _number(meta, "activationThreshold")
    return Trigger(metric, selector, target, activation or 0.0, ref.namespace)


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, cache: Cache, metrics: AdapterMetrics) -> None:
        self.cache = cache
        self.metrics = metrics

    async def _trigger(self, ref: pb.ScaledObjectRef, context: Any, method: str) -> Trigger:
        serving()  # a refresh's workers give way meanwhile, as for the HTTP APIs' requests
        try:
            return parse_trigger(ref, self.cache)
        except ValueError as exc:
            self.metrics.grpc(method, "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # not reached: abort raises

    async def value(self, trigger: Trigger) -> float:
        """The trigger's current value; raises Failure (503 when the backend is down)."""
        own = getattr(self.cache.source, "keda_series", None)  # prometheus-adapter files, per request
        if own is not None:
            found = await own(trigger.metric, trigger.namespace or None, trigger.selector)
            if found is not None:
                return total(found)

        def compute() -> Any:
            try:
                return total(
                    selected(self.cache, trigger.metric, trigger.namespace or None, trigger.selector)[0]
                )
            except Failure as exc:
                return exc

        key = ("grpc", trigger.metric, trigger.namespace, trigger.selector)
        found = self.cache.memo(key, compute, lambda _: True)
        if isinstance(found, Failure):
            raise found
        return float(found)

    async def _value(self, trigger: Trigger, context: Any, method: str) -> float:
        try:
            return await self.value(trigger)
        except Failure as exc:
            code = (
                grpc.StatusCode.UNAVAILABLE
                if exc.code >= 500
                else grpc.StatusCode.NOT_FOUND
                if exc.code == 404
                else grpc.StatusCode.INVALID_ARGUMENT
            )
            self.metrics.grpc(method, code.name)
            await context.abort(code, exc.message)
            raise  # not reached: abort raises

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> pb.GetMetricSpecResponse:
        trigger = await self._trigger(request, context, "GetMetricSpec")
        if trigger.target is None:
            self.metrics.grpc("GetMetricSpec", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "scalerMetadata.target is required")
        assert trigger.target is not None
        spec = pb.MetricSpec(
            metricName=trigger.metric, targetSize=round(trigger.target), targetSizeFloat=trigger.target
        )
        self.metrics.grpc("GetMetricSpec", "OK")
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Any) -> pb.GetMetricsResponse:
        trigger = await self._trigger(request.scaledObjectRef, context, "GetMetrics")
        value = await self._value(trigger, context, "GetMetrics")
        rounded = max(-(2**63), min(2**63 - 1, round(value)))
        metric_value = pb.MetricValue(
            metricName=request.metricName or trigger.metric, metricValue=rounded, metricValueFloat=value
        )
        self.metrics.grpc("GetMetrics", "OK")
        return pb.GetMetricsResponse(metricValues=[metric_value])

    async def IsActive(self, request: pb.ScaledObjectRef, context: Any) -> pb.IsActiveResponse:
        trigger = await self._trigger(request, context, "IsActive")
        value = await self._value(trigger, context, "IsActive")
        self.metrics.grpc("IsActive", "OK")
        return pb.IsActiveResponse(result=value > trigger.activation)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: Any
    ) -> AsyncIterator[pb.IsActiveResponse]:
        trigger = await self._trigger(request, context, "StreamIsActive")
        self.metrics.keda_streams.inc()
        try:
            was_active = False
            while True:
                refreshed = self.cache.refreshed
                try:
                    active = await self.value(trigger) > trigger.activation
                except Failure:
                    active = was_active  # no values now: neither a rise nor a fall
                if active and not was_active:
                    yield pb.IsActiveResponse(result=True)
                was_active = active
                await refreshed.wait()
        finally:
            self.metrics.keda_streams.dec()
            self.metrics.grpc("StreamIsActive", "CANCELLED")

    async def StreamMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> AsyncIterator[Any]:
        self.metrics.grpc("StreamMetricSpec", "UNIMPLEMENTED")
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec is not implemented; use GetMetricSpec"
        )
        yield  # pragma: no cover - makes this an async generator, as a server-streaming handler must be


async def start_server(
    cfg: GrpcSettings,
    service: ExternalScaler,
    limits: ListenerLimits | None = None,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server; returns it and the bound port. Raises ValueError if it cannot listen.

    ``limits`` (the ``http`` settings) give the HTTP/2 handshake deadline, the connection cap and
    the idle timeout (a connection with no call open is sent GOAWAY; KEDA reconnects at its next call).
    ``credentials``, when given, are the TLS credentials that follow file changes (``grpctls.py``);
    without them, TLS files in ``cfg`` are read once here.
    """
    limits = limits or ListenerLimits()
    assert cfg.listen is not None
    host, port = parse_listen(cfg.listen)
    address = f"[{host}]:{port}" if host and ":" in host else f"{host or '[::]'}:{port}"
    server = grpc.aio.server(
        options=[
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.so_reuseport", 0),  # grpcio's default 1 would let a second adapter share the port
            ("grpc.server_handshake_timeout_ms", int(limits.header_timeout_seconds * 1000)),
            ("grpc.max_allowed_incoming_connections", limits.max_connections),
            ("grpc.max_connection_idle_ms", int(limits.idle_timeout_seconds * 1000)),
        ]
    )
    pb_grpc.add_ExternalScalerServicer_to_server(service, server)
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials)
        elif cfg.tls_cert_file and cfg.tls_private_key_file:
            cert, key, ca = check_tls_files(cfg.tls_cert_file, cfg.tls_private_key_file, cfg.client_ca_file)
            creds = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
            )
            bound = server.add_secure_port(address, creds)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise ValueError(f"cannot listen on {cfg.listen} for gRPC: {bind_problem(host, port)}")
    await server.start()
    return server, bound
