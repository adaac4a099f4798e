"""The Prometheus source for a prometheus-adapter file: discovery on a relist interval, then one
query per rule per refresh.

Discovery asks ``/api/v1/series`` once per distinct ``seriesQuery`` (as prometheus-adapter does),
over the last relist interval; a failed discovery keeps the metrics found before. Values come from
one query per rule per refresh: the batched queries of all the metrics a rule exposes, combined
(``combined``); the adapter's own rules, if any, are asked as ``PrometheusSource`` asks them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import aiohttp
from prometheus_client.core import GaugeMetricFamily

from rightsizer_core.logs import event

from ..config import PrometheusSettings
from ..kubernetes.answers import status
from ..kubernetes.availability import Failure
from ..promql import render
from ..rules import RuleConfig
from ..selfmetrics import AdapterMetrics
from ..sources import RuleResult, non_finite, refuse_non_finite
from ..sources.evidence import up_from_values
from ..sources.prometheus import PrometheusSource, QueryError
from ..sources.source_states import SharedEvidence
from ..vectors import Series
from . import per_request
from .combined import combine, split
from .discovery import Discovered, discover
from .schema import PromAdapterConfig

log = logging.getLogger("rightsizer.adapter.promadapter")
PER_REQUEST_ONLY = (
    "its metricsQuery cannot be batched, so it is queried once per request (Kubernetes metrics APIs and KEDA)"
)


class _UnbatchableCollector:
    def __init__(self, source: PromAdapterSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily(
            "rightsizer_adapter_promadapter_per_request",
            "prometheus-adapter rule metrics queried once per request, as their metricsQuery cannot be "
            "answered from one query per refresh (1 per metric; the reason is in the log).",
            labels=["rule", "metric"],
        )
        for key in sorted(self.source.found.unbatchable):
            rule, metric = key.split("/", 1)
            family.add_metric([rule, metric], 1.0)
        yield family
        yield GaugeMetricFamily(
            "rightsizer_adapter_promadapter_metrics",
            "Metrics discovered from the prometheus-adapter file and served.",
            value=len(self.source.found.rules),
        )


class PromAdapterSource(PrometheusSource):
    name = "prometheus"

    def __init__(
        self,
        cfg: PrometheusSettings,
        file: PromAdapterConfig,
        relist_seconds: float,
        metrics: AdapterMetrics,
        source_checks: bool = False,
    ) -> None:
        super().__init__(cfg, metrics)
        # every discovered metric is refreshed: its rules are asked in batches (prometheus-adapter)
        self.idle_after = 0.0
        self.source_checks = source_checks
        self.file = file
        self.relist_seconds = relist_seconds
        self.found = Discovered()
        self._listed_at: float | None = None
        self._logged: set[str] = set()
        metrics.registry.register(_UnbatchableCollector(self))

    async def series(self, match: str) -> list[dict[str, str]]:
        """Label sets of the series ``match`` selects over the last relist interval."""
        assert self._session is not None, "start() first"
        url = self.url.rsplit("/", 1)[0] + "/series"
        now = time.time()
        form = {"match[]": match, "start": f"{now - self.relist_seconds:.3f}", "end": f"{now:.3f}"}
        started = time.perf_counter()
        try:
            async with self._session.post(
                url,
                data=form,
                headers=self._auth_headers(),
                timeout=aiohttp.ClientTimeout(total=self.cfg.deadline),
            ) as resp:
                body, status = await resp.read(), resp.status
            data = json.loads(body)
            if status != 200 or data.get("status") != "success":
                raise QueryError(
                    f"prometheus answered HTTP {status} to a series query: {data.get('error', '')}"[:300]
                )
            result = [{str(k): str(v) for k, v in item.items()} for item in data["data"]]
        except (
            aiohttp.ClientError,
            TimeoutError,
            OSError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
        ) as exc:
            self.metrics.upstream("prometheus_series", time.perf_counter() - started, False)
            if isinstance(exc, QueryError):
                raise
            raise QueryError(f"series query failed: {type(exc).__name__}: {exc}"[:300]) from None
        self.metrics.upstream("prometheus_series", time.perf_counter() - started, True)
        return result

    async def relist(self) -> Discovered:
        """Run discovery now; on failure keep what the last discovery found."""
        series: dict[str, list[dict[str, str]]] = {}
        try:
            for query in dict.fromkeys(r.series_query for r in self.file.rules):
                series[query] = await self.series(query)
        except QueryError as exc:
            event(
                log,
                logging.WARNING,
                "series discovery failed; keeping the metrics found before",
                reason=str(exc),
            )
            return self.found
        self._listed_at = time.monotonic()
        found = discover(self.file.rules, series, self.source_checks)
        for key, reason in found.not_served.items():
            if key not in self._logged:
                self._logged.add(key)
                rule, metric = key.split("/", 1)
                event(log, logging.WARNING, "metric not served", rule=rule, metric=metric, reason=reason)
        for key, reason in found.unbatchable.items():
            if key not in self._logged:
                self._logged.add(key)
                rule, metric = key.split("/", 1)
                event(
                    log,
                    logging.WARNING,
                    "metric queried per request: its metricsQuery cannot be batched",
                    rule=rule,
                    metric=metric,
                    reason=reason,
                )
        if [r.name for r in found.rules] != [r.name for r in self.found.rules]:
            event(
                log,
                logging.INFO,
                "metrics discovered",
                metrics=len(found.rules),
                unbatchable=len(found.unbatchable),
            )
        self.found = found
        return found

    def discovery_resources(self) -> dict[str, list[tuple[str, bool]]]:
        """Custom metric -> (resource, namespaced) of each resource its series' labels name, for the
        discovery documents."""
        return self.found.listed

    async def discover_rules(self) -> list[RuleConfig] | None:
        """The rules of the metrics discovered now, when a relist is due; None when it is not."""
        if self._listed_at is not None and time.monotonic() - self._listed_at < self.relist_seconds:
            return None
        return (await self.relist()).rules

    async def _query_now(self, promql: str) -> list[Series]:
        started = time.perf_counter()
        try:
            series, _, dropped = await self.query(promql)
        except QueryError:
            self.metrics.upstream("prometheus_per_request", time.perf_counter() - started, False)
            raise
        self.metrics.upstream("prometheus_per_request", time.perf_counter() - started, True)
        if dropped:  # a value that is not a number: the answer is refused, never served smaller
            first = dropped[0]
            labels = ",".join(f"{k}={v}" for k, v in sorted(first.labels.items()))
            why = f"prometheus gave {non_finite(first.value)} for {{{labels}}}: not a number"
            raise QueryError(why[:300])
        return series

    async def answer_per_request(
        self,
        api: str,
        version: str,
        parts: Sequence[str],
        params: Mapping[str, str],
        pod_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> tuple[int, bytes] | None:
        """The answer for a metric served per request, or None when ``parts`` names another metric."""
        found = self.found
        if not parts or parts[-1] not in found.plans:
            return None
        try:
            return await per_request.answer(
                found.plans,
                found.per_request,
                found.kept,
                self._query_now,
                api,
                version,
                parts,
                params,
                pod_labels,
            )
        except QueryError as exc:
            return status(503, f"no current values for {parts[-1]}: {exc}")

    async def keda_series(self, metric: str, namespace: str | None, selector: str) -> list[Series] | None:
        """KEDA's series for a metric served per request (or a selector the batch cannot answer),
        None for the others. Raises Failure: 503 when Prometheus gives no answer, 404 no series."""
        found = self.found
        try:
            return await per_request.keda_series(
                found.plans, found.per_request, found.kept, self._query_now, metric, namespace, selector
            )
        except QueryError as exc:
            raise Failure(503, f"no current values for {metric}: {exc}") from None

    async def _collect_group(
        self, where: str, rules: Sequence[RuleConfig], shared: SharedEvidence
    ) -> dict[str, RuleResult]:
        """The metrics one prometheus-adapter rule exposes, from one query (their source-state
        parts riding in it)."""
        query = combine({r.name: render(r.query or "", r.matchers) for r in rules})
        try:
            series, stamp, dropped, states = await self.ask(query, rules, shared)
        except QueryError as exc:
            return {r.name: RuleResult(error=str(exc)) for r in rules}
        if dropped and where not in self._dropped_logged:
            self._dropped_logged.add(where)
            event(log, logging.WARNING, "NaN or infinite samples refused", rule=where, count=len(dropped))
        found = split(series, [r.name for r in rules])
        bad = split(dropped, [r.name for r in rules])
        results = {
            r.name: RuleResult(tuple(found[r.name]), stamp, sources=states[r.name], up_from_values=derived)
            for r, derived in ((r, up_from_values(r)) for r in rules)
            if r.name in found
        }
        return {name: refuse_non_finite(result, bad[name], self.name) for name, result in results.items()}

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        """One query per prometheus-adapter rule (all its batched metrics), one per other rule."""
        found = self.found
        own = found.per_request
        wanted = {r.name: r for r in rules if r.name not in own}
        discovered = {r.name: r for r in found.rules}
        groups: dict[str, list[RuleConfig]] = {}
        for where, names in found.by_rule.items():
            members = [wanted.pop(n) for n in names if n in wanted and wanted[n] == discovered.get(n)]
            if members:
                groups[where] = members
        shared = self.evidence()  # the targets' health: one query shared by every group and rule
        singles = list(wanted.values())  # the adapter's own rules, next to the file's
        try:
            grouped, alone = await asyncio.gather(
                asyncio.gather(*(self._collect_group(w, members, shared) for w, members in groups.items())),
                asyncio.gather(*(self._collect_rule(r, shared) for r in singles)),
            )
        finally:
            shared.close()
        results: dict[str, RuleResult] = {}
        for answer in grouped:
            results.update(answer)
        results.update({rule.name: answer for rule, answer in zip(singles, alone, strict=True)})
        for name in own:
            results[name] = RuleResult(error=PER_REQUEST_ONLY)
        for name, renames in found.renames.items():
            result = results.get(name)
            if result is not None and result.error is None:
                sources = result.sources
                results[name] = RuleResult(
                    tuple(Series(_renamed(s.labels, renames), s.value) for s in result.series),
                    result.timestamp,
                    sources=None if sources is None else tuple(
                        Series(_renamed(s.labels, renames), s.value) for s in sources
                    ),
                    up_from_values=result.up_from_values,
                )
        return results


def _renamed(labels: Mapping[str, str], renames: Mapping[str, str]) -> dict[str, str]:
    return {renames.get(k, k): v for k, v in labels.items()}
