"""The adapter's own metrics, served at ``/metrics`` (own registry, never the global one)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from .giveway import paused

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
UPSTREAM_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# (rule, up, series, age seconds) rows from the cache, read at scrape time; up None: an idle rule
# (no request asked for it lately, so not refreshed: neither up nor down).
RuleRows = Callable[[], list[tuple[str, bool | None, int, float | None]]]


class _CacheCollector:
    def __init__(self, rows: RuleRows, answers: Callable[[], int]) -> None:
        self._rows = rows
        self._answers = answers

    def collect(self) -> Iterator[Any]:
        age = GaugeMetricFamily(
            "rightsizer_adapter_cache_age_seconds",
            "Seconds since the rule's values were last refreshed successfully.",
            labels=["rule"],
        )
        up = GaugeMetricFamily(
            "rightsizer_adapter_rule_up", "1 if the rule's last refresh succeeded.", labels=["rule"]
        )
        series = GaugeMetricFamily(
            "rightsizer_adapter_rule_series", "Series in the rule's cached vector.", labels=["rule"]
        )
        idle = GaugeMetricFamily(
            "rightsizer_adapter_rule_idle",
            "1 if no request asked for the rule lately (prometheus.rule_idle_seconds), so it is not "
            "refreshed until one does (no rule_up, cache_age or rule_series for it meanwhile).",
            labels=["rule"],
        )
        for rule, ok, count, seconds in self._rows():
            idle.add_metric([rule], 1.0 if ok is None else 0.0)
            if ok is None:
                continue
            up.add_metric([rule], 1.0 if ok else 0.0)
            series.add_metric([rule], float(count))
            if seconds is not None:
                age.add_metric([rule], seconds)
        yield age
        yield up
        yield series
        yield idle
        yield GaugeMetricFamily(
            "rightsizer_adapter_cached_answers",
            "Distinct answers memoized since the last refresh.",
            value=float(self._answers()),
        )


class _ListenerCollector:
    """The HTTPS listener's protection counters (rightsizer_core.listener.ListenerStats)."""

    def __init__(self, stats: Any) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        s = self._stats
        yield CounterMetricFamily(
            "rightsizer_adapter_http_malformed_requests",
            "HTTP requests refused before reaching a handler: malformed, over a size limit, or without "
            "HTTP/1.x (each logged at debug level only).",
            value=s.malformed_requests,
        )
        dropped = CounterMetricFamily(
            "rightsizer_adapter_http_connections_dropped",
            "HTTP connections the listener closed to protect itself: header_timeout, response_timeout, "
            "evicted (at the connection cap, to make room), refused (at the cap, nothing to evict).",
            labels=["reason"],
        )
        dropped.add_metric(["header_timeout"], s.header_timeouts)
        dropped.add_metric(["response_timeout"], s.response_timeouts)
        dropped.add_metric(["evicted"], s.connections_evicted)
        dropped.add_metric(["refused"], s.connections_refused)
        yield dropped
        yield CounterMetricFamily(
            "rightsizer_adapter_http_accept_errors",
            "Times accepting a connection failed for lack of file descriptors or memory.",
            value=s.accept_errors,
        )
        yield GaugeMetricFamily(
            "rightsizer_adapter_http_open_connections",
            "Open HTTP connections, TLS handshakes included.",
            value=s.open_connections,
        )


class _GiveWayCollector:
    """How often a refresh's worker threads paused for the event loop (``giveway``)."""

    def collect(self) -> Iterator[Any]:
        pauses, seconds = paused()
        yield CounterMetricFamily(
            "rightsizer_adapter_worker_pauses",
            "Times a refresh's worker thread paused so that the requests being answered meanwhile did "
            "not wait for the interpreter lock.",
            value=pauses,
        )
        yield CounterMetricFamily(
            "rightsizer_adapter_worker_pause_seconds",
            "Seconds those pauses took: what answering requests added to the refreshes.",
            value=seconds,
        )


class AdapterMetrics:
    def __init__(self) -> None:
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self._requests = Counter(
            "rightsizer_adapter_requests", "HTTP requests answered.", ["endpoint", "code"], registry=r
        )
        self._latency = Histogram(
            "rightsizer_adapter_request_duration_seconds",
            "Time to answer an HTTP request.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._upstream = Histogram(
            "rightsizer_adapter_upstream_query_duration_seconds",
            "Duration of one upstream query (Prometheus query or exporter scrape).",
            ["source"],
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self._upstream_count = Counter(
            "rightsizer_adapter_upstream_queries", "Upstream queries made.", ["source", "outcome"], registry=r
        )
        self._timeouts = Counter(
            "rightsizer_adapter_upstream_timeouts",
            "Upstream queries that ran past their deadline (also counted as errors in upstream_queries).",
            ["source"],
            registry=r,
        )
        self._retries = Counter(
            "rightsizer_adapter_upstream_retries",
            "Upstream queries sent again within one refresh (Prometheus mode sends none: a failed query "
            "waits for the next refresh).",
            ["source"],
            registry=r,
        )
        self._refreshes = Counter("rightsizer_adapter_refreshes", "Cache refreshes completed.", registry=r)
        self._refresh_duration = Histogram(
            "rightsizer_adapter_refresh_duration_seconds",
            "Time one cache refresh took, its queries (or scrapes) and indexing included.",
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self._grpc = Counter(
            "rightsizer_adapter_grpc_requests", "KEDA gRPC calls answered.", ["method", "code"], registry=r
        )
        self.keda_streams = Gauge(
            "rightsizer_adapter_keda_streams", "Open StreamIsActive streams.", registry=r
        )
        r.register(_GiveWayCollector())
        self._children: dict[tuple[str, int], Any] = {}
        self._latency_children: dict[str, Any] = {}
        self._rendered: tuple[float, bytes] = (0.0, b"")

    def attach_cache(self, rows: RuleRows, answers: Callable[[], int]) -> None:
        self.registry.register(_CacheCollector(rows, answers))

    def attach_listener(self, stats: Any) -> None:
        self.registry.register(_ListenerCollector(stats))

    def request(self, endpoint: str, code: int, seconds: float) -> None:
        child = self._children.get((endpoint, code))
        if child is None:
            child = self._children[(endpoint, code)] = self._requests.labels(endpoint, str(code))
        child.inc()
        hist = self._latency_children.get(endpoint)
        if hist is None:
            hist = self._latency_children[endpoint] = self._latency.labels(endpoint)
        hist.observe(seconds)

    def upstream(self, source: str, seconds: float, ok: bool, timed_out: bool = False) -> None:
        self._upstream.labels(source).observe(seconds)
        self._upstream_count.labels(source, "success" if ok else "error").inc()
        if timed_out:
            self._timeouts.labels(source).inc()

    def retried(self, source: str) -> None:
        self._retries.labels(source).inc()

    def watch_source(self, source: str) -> None:
        """Publish ``source``'s timeouts and retries at 0 before the first one."""
        self._timeouts.labels(source)
        self._retries.labels(source)

    def refreshed(self, seconds: float | None = None) -> None:
        self._refreshes.inc()
        if seconds is not None:
            self._refresh_duration.observe(seconds)

    def grpc(self, method: str, code: str) -> None:
        self._grpc.labels(method, code).inc()

    def render(self) -> bytes:
        """Exposition text, rendered at most once a second however often it is scraped."""
        now = time.monotonic()
        at, body = self._rendered
        if now - at >= 1.0 or not body:
            body = generate_latest(self.registry)
            self._rendered = (now, body)
        return body
