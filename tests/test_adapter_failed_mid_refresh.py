"""A scrape target that fails between the refresh's evidence query and a rule's own query.

The evidence query (every target's health) is evaluated first; each rule's query a moment later.
When an exporter dies in between, the engine's next scrape of it fails: ``up`` becomes 0 and every
series of its last scrape ends at once (staleness markers), so the rule's values hold only the
other exporters' while the evidence still says every target is up. Written from that before
running: node-a and node-b both up in the evidence; by the rules' queries node-b's scrape has
failed. node-b held replica r1 of workload ``w`` (SLO ratio 1.9 on node-b, 0.039 on node-a) and the
GPU of pod ``worker-..-bbbbb`` (80 %), node-a pod ``worker-..-q9q9q`` (20 %). What a request must
get: the SLO ratio of ``w`` 503 naming node-b (never node-a's 0.039 alone); the utilisation of
workload ``worker`` 503 naming node-b (never node-a's 20 % alone); node-a's pod itself 200 "200m".
Where asking what node-b held fails too, nothing of the GPU rule is answered that refresh.
"""

from __future__ import annotations

from typing import Any

from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from prom_parts import NOW, carried, part_names
from test_adapter_prometheus import EXT, FakePrometheus, cache_for, prom, vector

from adapter.config import load_config
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.promql import render
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.evidence import Horizon, late_parts

__all__ = ["prom"]  # the fixture, used by name

A, B = "worker-5d8f7c9b6d-q9q9q", "worker-5d8f7c9b6d-bbbbb"
NODE_A = {"instance": "node-a:9400", "job": "rightsizer"}
NODE_B = {"instance": "node-b:9400", "job": "rightsizer"}
RATIO, UTIL = "rightsizer_workload_slo_latency_ratio", "rightsizer_gpu_utilization_ratio"
SLO = {"namespace": "ha", "workload": "w"}


def gpu(pod: str, uuid: str) -> dict[str, str]:
    return {"namespace": "prod", "pod": pod, "container": "srv", "UUID": uuid}


def names() -> dict[str, tuple[str, str]]:
    """Every part text: the rules' own, and those asked again for node-b alone."""
    out = part_names()
    cfg = load_config(None, {"prometheus": {"url": "http://p:9090"}}, environ={}).prometheus
    horizon = Horizon(cfg.source_horizon_seconds, cfg.stale_after_seconds)
    for rule in BUILTIN_RULES:
        if rule.states_family is not None:
            selector = render(f"{rule.states_family}{{<<.LabelMatchers>>}}", rule.matchers)
            for name, text in late_parts(rule, selector, horizon, [NODE_B["instance"]]).items():
                out[text] = ("late-" + name, rule.states_family)
    return out


def provide(name: str, family: str) -> list[tuple[dict[str, str], str]]:
    """The evidence from before node-b failed; the rules' parts from after."""
    evidence = {
        "up": [(NODE_A, "1"), (NODE_B, "1")],
        "up_at": [(NODE_A, str(NOW - 1)), (NODE_B, str(NOW - 1))],
        "healthy_at": [(NODE_A, str(NOW - 1)), (NODE_B, str(NOW - 1))],
        "stamped": [(NODE_A, "1"), (NODE_B, "1")],
        "scrapes": [({"job": "rightsizer"}, "120")],
    }
    if name in evidence:
        return evidence[name]
    if name in ("down", "late-down"):
        return [(NODE_B, "0")]
    flag = family == "rightsizer_workload_slo_scaling_up"
    if name == "cur" and flag:
        return [({**SLO, **NODE_A}, "1")]
    if name == "jobs":
        return [({"job": "rightsizer"}, "1")] if flag else [(NODE_A, "1")]
    if name == "seen" and flag:  # node-b's flag seen within the horizon, not now (untimed: 0)
        return [({**SLO, **NODE_B}, "0")]
    if name == "late-seen" and family == "DCGM_FI_DEV_GPU_UTIL":  # node-b's pod at its last good scrape
        return [({**gpu(B, "GPU-b"), **NODE_B}, str(NOW - 1))]
    return []


def answer(query: str, table: dict[str, tuple[str, str]], late_fails: bool) -> tuple[int, Any]:
    head = query.split(" or ")[0]
    if late_fails and head.startswith("label_replace(") and "node-b" in head:
        return 503, {"status": "error", "errorType": "unavailable", "error": "the engine is restarting"}
    values: list[tuple[dict[str, str], str]] = []
    if "rightsizer_workload_slo_scaling_latency_ratio{" in head:
        values = [(SLO, "0.039")]  # node-a's replica alone: node-b's series ended
    elif "DCGM_FI_DEV_GPU_UTIL{" in head:
        values = [(gpu(A, "GPU-a"), "0.2")]
    return vector(values + carried(query, provide, table))


async def served(prom: FakePrometheus, aiohttp_client: Any, late_fails: bool = False) -> Any:
    table = names()
    prom.answer = lambda q: answer(q, table, late_fails)
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    return await aiohttp_client(app), source


async def test_a_target_failing_after_the_evidence_is_missed_not_left_out(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    client, source = await served(prom, aiohttp_client)
    ratio = await client_get(client, f"{EXT}/ha/{RATIO}?labelSelector=workload%3Dw")
    assert_status(ratio, 503, "ServiceUnavailable")
    assert "node-b:9400" in ratio[1]["message"] and "up 0" in ratio[1]["message"], ratio
    worker = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=workload%3Dworker")
    assert_status(worker, 503, "ServiceUnavailable")
    assert "node-b:9400" in worker[1]["message"], worker
    code, body = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=pod%3D{A}")
    assert code == 200 and [i["value"] for i in body["items"]] == ["200m"], body
    # the GPU rules (no flag) asked again what node-b held, in one more query per rule query
    late = [q for q in prom.queries if q.startswith("label_replace(") and "node-b" in q]
    flagless = {r.states_family for r in BUILTIN_RULES if r.states_family and r.up_family is None}
    assert len(late) == len(flagless) and len(prom.queries) == BUILTIN_QUERIES + len(late), prom.queries
    await source.close()


async def test_what_the_failed_target_held_unknown_is_answered_by_nothing(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    client, source = await served(prom, aiohttp_client, late_fails=True)
    pod = await client_get(client, f"{EXT}/prod/{UTIL}?labelSelector=pod%3D{A}")
    assert_status(pod, 503, "ServiceUnavailable")
    message = pod[1]["message"]
    assert "node-b:9400 failed during the refresh" in message and "restarting" in message, message
    ratio = await client_get(client, f"{EXT}/ha/{RATIO}?labelSelector=workload%3Dw")
    assert_status(ratio, 503, "ServiceUnavailable")  # the flag rule needs no second query
    await source.close()
