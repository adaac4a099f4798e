"""A refresh's evidence query sent with its rules' queries, not before them.

Each rule's query carries parts built from what the scrape targets' evidence says: which targets
are not up and current (their series are asked for and timed) and which jobs are scraped (left out
of what only imported data needs). From the second refresh on, those parts are built from the last
refresh's evidence, so the rules' queries go out with the refresh's own evidence query instead of
waiting for its answer, and each answer is judged with the refresh's own evidence once both are in.
Written from that before running:

- the first refresh waits for its evidence (no earlier one): no rule query reaches the engine
  before the evidence is answered; the later ones do not wait: the first two rule queries (the
  replica's query slots) arrive before the evidence's answer, which the fake holds for ``DELAY``.
- a target up and current in the last evidence whose exporter froze since (node-b: its series
  still selected, its sample time no longer moving): the GPU rules' parts did not ask for its
  series, so they are asked after the query, and its pod answers 503 naming it, node-a's 200.
- a job scraped in the last evidence and no longer scraped in this one (``gone``: no ``up``, no
  good scrape within the horizon): its series are imported data now, so the rules' queries whose
  parts left it out are asked again with this evidence (one more query per such rule).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from aiohttp import web
from prom_parts import NOW, carried, healthy, part_names
from test_adapter_failed_mid_refresh import NODE_A, NODE_B, UTIL, gpu, names
from test_adapter_prometheus import EXT, FakePrometheus, cache_for, prom, vector

from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.prometheus import MAX_CONCURRENT_QUERIES

__all__ = ["prom"]  # the fixture, used by name

A, B = "worker-5d8f7c9b6d-q9q9q", "worker-5d8f7c9b6d-bbbbb"
DELAY = 0.3  # seconds each answer is held
EVIDENCE = "label_replace(max by (instance, job) (up),"
VALUES = "(avg by (namespace, pod, container, UUID) (DCGM"  # the GPU utilisation rule's query


class Arrivals(FakePrometheus):
    """The fake query API, noting when each query arrived (its answer held ``DELAY``)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[tuple[float, str]] = []

    async def _query(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        form = await request.post()
        query = str(form["query"])
        self.queries.append(query)
        self.arrived.append((at, query))
        await asyncio.sleep(DELAY)
        code, body = self.answer(query)
        return web.Response(status=code, text=json.dumps(body), content_type="application/json")


def evidence_queries(arrived: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return [(at, q) for at, q in arrived if q.startswith(EVIDENCE)]


async def test_the_rules_queries_go_out_with_the_evidence_query_from_the_second_refresh() -> None:
    fake = Arrivals()
    await fake.server.start_server()
    series = {"DCGM_FI_DEV_GPU_UTIL": [gpu(A, "GPU-a")]}
    table = part_names()

    def answer(query: str) -> tuple[int, Any]:
        values = [(gpu(A, "GPU-a"), "0.2")] if query.startswith(VALUES) else []
        return vector(values + carried(query, healthy(series), table))

    fake.answer = answer
    cache, source, _ = await cache_for(fake)
    before: list[int] = []
    try:
        for refresh in range(3):
            fake.arrived.clear()
            fake.queries.clear()
            await cache.refresh_once()
            assert len(fake.queries) == BUILTIN_QUERIES, fake.queries  # one per rule, one evidence query
            ((asked, _),) = evidence_queries(fake.arrived)
            answered = asked + DELAY  # when the fake answered the evidence query
            rules = [at for at, q in fake.arrived if not q.startswith(EVIDENCE)]
            before.append(sum(1 for at in rules if at < answered - 0.05))
            state = cache.states[UTIL]
            assert state.error is None and state.vector is not None, state
            assert [s.value for s in state.vector.series] == [0.2], (refresh, state.vector.series)
        assert before == [0, MAX_CONCURRENT_QUERIES, MAX_CONCURRENT_QUERIES], before
    finally:
        await source.close()
        await fake.server.close()


def frozen_b(name: str, family: str, frozen: bool) -> list[tuple[dict[str, str], str]]:
    """Two exporters up and current, each with one GPU pod; with ``frozen``, node-b's exporter
    froze: its scrapes succeed, its sample time no longer moves, its series still selected."""
    evidence = {
        "up": [(NODE_A, "1"), (NODE_B, "1")],
        "up_at": [(NODE_A, str(NOW - 1)), (NODE_B, str(NOW - 1))],
        "healthy_at": [(NODE_A, str(NOW - 1)), (NODE_B, str(NOW - 1))],
        "frozen": [(NODE_B, "1")] if frozen else [],
        "stamped": [(NODE_A, "1"), (NODE_B, "1")],
        "scrapes": [({"job": "rightsizer"}, "120")],
    }
    if name in evidence:
        return evidence[name]
    if family != "DCGM_FI_DEV_GPU_UTIL":
        return []
    if name == "jobs":
        return [(NODE_A, "1"), (NODE_B, "1")]
    if name == "late-cur":  # node-b's series still selected
        return [({**gpu(B, "GPU-b"), **NODE_B}, "80")]
    if name == "cur":  # asked only for the targets not up and current in the evidence it was built from
        return [({**gpu(B, "GPU-b"), **NODE_B}, "80")] if frozen else []
    return []


async def test_a_target_no_longer_current_since_the_last_evidence_is_asked_late(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    table = names()
    frozen = False

    def answer(query: str) -> tuple[int, Any]:
        values = []
        if query.startswith(VALUES):
            values = [(gpu(A, "GPU-a"), "0.2"), (gpu(B, "GPU-b"), "0.8")]
        return vector(values + carried(query, lambda name, family: frozen_b(name, family, frozen), table))

    prom.answer = answer
    cache, source, cfg = await cache_for(prom)
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    await cache.refresh_once()
    code, body = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=pod%3D{B}")
    assert code == 200 and [i["value"] for i in body["items"]] == ["800m"], body
    frozen = True
    prom.queries.clear()
    await cache.refresh_once()
    pod = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=pod%3D{B}")
    assert_status(pod, 503, "ServiceUnavailable")
    assert "node-b:9400" in pod[1]["message"] and "frozen" in pod[1]["message"], pod
    code, body = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=pod%3D{A}")
    assert code == 200 and [i["value"] for i in body["items"]] == ["200m"], body
    # the GPU rules' queries were built from the evidence before node-b froze: node-b is asked late
    late = [q for q in prom.queries if q.startswith("label_replace(") and "node-b" in q]
    flagless = {r.states_family for r in BUILTIN_RULES if r.states_family and r.up_family is None}
    assert len(late) == len(flagless) and len(prom.queries) == BUILTIN_QUERIES + len(late), prom.queries
    await source.close()


async def test_a_job_no_longer_scraped_has_the_rules_asked_again(prom: FakePrometheus) -> None:
    gone = {"instance": "old:9400", "job": "gone"}
    scraped = True

    def answer(query: str) -> tuple[int, Any]:
        if not query.startswith(EVIDENCE):
            return vector([])
        table = {
            "up": [(NODE_A, "1")] + ([(gone, "1")] if scraped else []),
            "up_at": [(NODE_A, str(NOW - 1))] + ([(gone, str(NOW - 1))] if scraped else []),
            "healthy_at": [(NODE_A, str(NOW - 1))] + ([(gone, str(NOW - 1))] if scraped else []),
            "stamped": [(NODE_A, "1")],
            "scrapes": [({"job": "rightsizer"}, "120")],
        }
        return vector(carried(query, lambda name, family: table.get(name, []), names()))

    prom.answer = answer
    cache, source, _ = await cache_for(prom)
    await cache.refresh_once()
    await cache.refresh_once()  # its parts left both jobs out: the GPU rules' first answers told
    both = 'job!~"gone|rightsizer"'
    assert any(both in q for q in prom.queries[-BUILTIN_QUERIES:]), prom.queries
    scraped = False
    prom.queries.clear()
    await cache.refresh_once()
    again = [q for q in prom.queries if both not in q and 'job!~"rightsizer"' in q]
    first = [q for q in prom.queries if both in q]
    assert first and len(again) == len(first), prom.queries  # each asked again, job gone read now
    assert len(prom.queries) == BUILTIN_QUERIES + len(again)
    assert all(state.error is None for state in cache.states.values()), cache.states
    await source.close()
