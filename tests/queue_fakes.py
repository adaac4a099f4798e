"""Queue sources for the queue tests and bench: inference-server-shaped /metrics and JSON endpoints
served by a real aiohttp server on a loopback port (in a background thread, so both in-process
tests and exporter subprocesses can reach it), with faults switchable per path.

vLLM and SGLang publish through prometheus-client, so their expositions are rendered by
prometheus-client from registries holding their real metric names, HELP texts and labels; TGI
(Rust metrics-exporter-prometheus) and Triton (prometheus-cpp) are written out as they print them.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class PrometheusClientServer:
    """An exposition rendered by prometheus-client, cached until a value changes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._cache: dict[bool, bytes] = {}

    def changed(self) -> None:
        self._cache.clear()

    def render(self, openmetrics: bool = False) -> bytes:
        if openmetrics not in self._cache:
            # ALLOWUTF8 keeps "vllm:..." names as written (the default escaping rewrites ':' to '_').
            if openmetrics:
                self._cache[openmetrics] = generate_openmetrics(self.registry, escaping=ALLOWUTF8)
            else:
                self._cache[openmetrics] = generate_latest(self.registry)
        return self._cache[openmetrics]


class VllmMetrics(PrometheusClientServer):
    """vLLM's v1 engine /metrics: scheduler gauges per engine, token counters, latency histograms."""

    def __init__(self, model: str = LLAMA, engines: int = 1) -> None:
        super().__init__()
        labels = ["model_name", "engine"]
        r = self.registry
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r
        )
        kv = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=r
        )
        prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        generated = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        histograms = [
            Histogram(name, help_, labels, buckets=buckets, registry=r)
            for name, help_, buckets in (
                (
                    "vllm:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:inter_token_latency_seconds",
                    "Histogram of inter-token latency in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:e2e_request_latency_seconds",
                    "Histogram of e2e request latency in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:request_queue_time_seconds",
                    "Histogram of time spent in WAITING phase for request.",
                    _LATENCY_BUCKETS,
                ),
                ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKEN_BUCKETS),
                ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKEN_BUCKETS),
            )
        ]
        self.model = model
        self.engines = [str(i) for i in range(engines)]
        for engine in self.engines:
            kv.labels(model, engine).set(0.42)
            prompt.labels(model, engine).inc(812345)
            generated.labels(model, engine).inc(290211)
            for reason in ("stop", "length", "abort"):
                success.labels(model, engine, reason).inc(1234)
            for h in histograms:
                for v in (0.03, 0.2, 0.9, 3.0, 12.0, 150.0):
                    h.labels(model, engine).observe(v)
        self.set([0.0] * engines, [0.0] * engines)

    def set(self, waiting: Sequence[float], running: Sequence[float]) -> None:
        for engine, w, n in zip(self.engines, waiting, running, strict=True):
            self.waiting.labels(self.model, engine).set(w)
            self.running.labels(self.model, engine).set(n)
        self.changed()


class SglangMetrics(PrometheusClientServer):
    """SGLang's /metrics (``--enable-metrics``): per tensor-parallel rank gauges and histograms."""

    def __init__(self, model: str = LLAMA) -> None:
        super().__init__()
        labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        r = self.registry
        self.queue = Gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, registry=r
        )
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", labels, registry=r)
        Gauge("sglang:token_usage", "The token usage.", labels, registry=r).labels(
            model, "unified", "0", "0"
        ).set(0.31)
        Gauge("sglang:gen_throughput", "The generation throughput (token/s).", labels, registry=r).labels(
            model, "unified", "0", "0"
        ).set(86.5)
        ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        for v in (0.05, 0.4, 2.0):
            ttft.labels(model, "unified", "0", "0").observe(v)
        self.labels = (model, "unified", "0", "0")
        self.set(0, 0)

    def set(self, queue: float, running: float) -> None:
        self.queue.labels(*self.labels).set(queue)
        self.running.labels(*self.labels).set(running)
        self.changed()


def tgi_metrics(queue: float, batch: float) -> bytes:
    """TGI's router /metrics (Rust metrics-exporter-prometheus: TYPE lines, histograms, no timestamps)."""
    return (
        "# TYPE tgi_request_count counter\ntgi_request_count 18234\n"
        "# TYPE tgi_request_success counter\ntgi_request_success 18100\n"
        "# TYPE tgi_queue_size gauge\n"
        f"tgi_queue_size {queue:g}\n"
        "# TYPE tgi_batch_current_size gauge\n"
        f"tgi_batch_current_size {batch:g}\n"
        "# TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 8123\n"
        "# TYPE tgi_request_queue_duration histogram\n"
        'tgi_request_queue_duration_bucket{le="0.005"} 9000\n'
        'tgi_request_queue_duration_bucket{le="0.05"} 15000\n'
        'tgi_request_queue_duration_bucket{le="0.5"} 18000\n'
        'tgi_request_queue_duration_bucket{le="+Inf"} 18234\n'
        "tgi_request_queue_duration_sum 1312.5\n"
        "tgi_request_queue_duration_count 18234\n"
        "# TYPE tgi_batch_inference_duration histogram\n"
        'tgi_batch_inference_duration_bucket{method="decode",le="0.05"} 70000\n'
        'tgi_batch_inference_duration_bucket{method="decode",le="+Inf"} 71234\n'
        'tgi_batch_inference_duration_sum{method="decode"} 2201.25\n'
        'tgi_batch_inference_duration_count{method="decode"} 71234\n'
    ).encode()


def triton_metrics(pending: dict[str, float]) -> bytes:
    """Triton's /metrics (port 8002): per-model counters and the pending-request gauge, GPU gauges."""
    lines = [
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
        "# TYPE nv_inference_request_success counter",
        *(f'nv_inference_request_success{{model="{m}",version="1"}} 4321' for m in pending),
        "# HELP nv_inference_count Number of inferences performed (does not include cached requests)",
        "# TYPE nv_inference_count counter",
        *(f'nv_inference_count{{model="{m}",version="1"}} 9876' for m in pending),
        "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting "
        "execution per-model.",
        "# TYPE nv_inference_pending_request_count gauge",
        *(f'nv_inference_pending_request_count{{model="{m}",version="1"}} {v:g}' for m, v in pending.items()),
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
        "# TYPE nv_gpu_utilization gauge",
        'nv_gpu_utilization{gpu_uuid="GPU-9b8a7c6d-0000-4000-8000-000000000001"} 0.87',
        "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes",
        "# TYPE nv_gpu_memory_used_bytes gauge",
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-9b8a7c6d-0000-4000-8000-000000000001"} 30064771072',
    ]
    return ("\n".join(lines) + "\n").encode()


@dataclass
class Route:
    """What one path answers. ``body`` may be a function, called per request. ``hang`` holds the
    request until the server stops; ``require`` lists headers that must be present (else 401)."""

    body: bytes | Callable[[], bytes] = b""
    content_type: str = TEXT
    status: int = 200
    hang: bool = False
    require: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    requests: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    peers: set[tuple[str, int]] = field(default_factory=set)  # client addresses: one per connection


class FakeHttpServer:
    """A real aiohttp server on 127.0.0.1 in its own thread and event loop, listening on ``ports``
    loopback ports (every path answers on every port; ``url(path, i)`` picks the i-th port)."""

    def __init__(self, ports: int = 1, ssl_context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.port = 0
        self.ports: list[int] = []
        self._port_count = ports
        self._ssl = ssl_context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None

    def route(self, path: str, **kwargs: Any) -> Route:
        self.routes[path] = Route(**kwargs)
        return self.routes[path]

    def url(self, path: str, index: int = 0) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.ports[index]}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self.routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="404: Not Found")
        route.requests += 1
        route.last_headers = dict(request.headers)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            route.peers.add((peer[0], peer[1]))
        for name, value in route.require.items():
            if request.headers.get(name) != value:
                return web.Response(status=401, text="unauthorized")
        if route.hang:
            assert self._release is not None
            await self._release.wait()
        body = route.body() if callable(route.body) else route.body
        if route.chunked:
            stream = web.StreamResponse(status=route.status, headers={"Content-Type": route.content_type})
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            for at in range(0, len(body), 1 << 20):
                await stream.write(body[at : at + (1 << 20)])
            await stream.write_eof()
            return stream
        return web.Response(status=route.status, body=body, headers={"Content-Type": route.content_type})

    async def _start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        for _ in range(self._port_count):
            await web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024, ssl_context=self._ssl).start()
        self.ports = [address[1] for address in self._runner.addresses]
        self.port = self.ports[0]

    async def _stop(self) -> None:
        assert self._release is not None and self._runner is not None
        self._release.set()
        await self._runner.cleanup()

    def __enter__(self) -> FakeHttpServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class RawTcpServer:
    """A loopback TCP server speaking whatever ``handle(reader, writer, connection_number)`` writes:
    for answers no well-behaved HTTP server gives (no framing, early close, not HTTP at all)."""

    def __init__(
        self, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
    ) -> None:
        self._handle = handle
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._handle(reader, writer, self.connections)
        finally:
            writer.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> RawTcpServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def json_body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


async def eventually(
    predicate: Callable[[], Any | Awaitable[Any]], timeout: float = 15.0, what: str = "condition"
) -> Any:
    """Async counterpart of servers.wait_for: poll without blocking the event loop."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class QueueHarness:
    """The queue extension inside a real Sampler (no GPUs) rendering every ``interval``: what the
    exporter publishes, read from the rendered exposition and the snapshot's JSON section."""

    def __init__(self, entries: list[dict[str, Any]], interval: float = 0.1) -> None:
        from fakes import FakeSource

        from exporter.config import ExporterConfig
        from exporter.render import Renderer
        from exporter.sampler import Sampler
        from exporter.settings import build
        from exporter.sources.queues.manager import QueueExtension

        cfg = build(ExporterConfig, {"interval": interval, "queues": entries}, "")
        self.extension = QueueExtension(cfg.queues, cfg.interval)
        self.sampler = Sampler(FakeSource(0), Renderer(), cfg.interval, "node-1", [self.extension])

    async def __aenter__(self) -> QueueHarness:
        await self.sampler.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sampler.stop()

    def series(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        published = self.sampler.current
        assert published is not None
        out = {}
        for family in text_string_to_metric_families(published.exposition.text.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def value(self, family: str, queue: str) -> float | None:
        """The value of ``family`` for ``queue`` in the latest rendered exposition (None if absent)."""
        for (name, labels), v in self.series().items():
            if name == family and ("queue", queue) in labels:
                return v
        return None

    def depth(self, queue: str) -> float | None:
        return self.value("rightsizer_queue_depth", queue)

    def up(self, queue: str) -> float | None:
        return self.value("rightsizer_queue_source_up", queue)

    def api(self, queue: str) -> dict[str, Any]:
        published = self.sampler.current
        assert published is not None
        items = published.snapshot.api["queues"]
        assert isinstance(items, list)
        return next(item for item in items if item["name"] == queue)
