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

A node-b first scraped after the last step of the horizon's subquery (a node that joined less than
a step ago; 60 s on the defaults) has no good scrape on that grid, and the timed half of what it
held finds nothing of it: only the untimed half (``present_over_time``) does. It held pod
``bbbbb`` all the same, so the answers must be the same: node-b missed, node-a's pod served.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from prom_parts import NOW, carried, part_names
from queue_servers import FakeHttpServer
from servers import prom_query, prometheus, wait_for
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
                # what a real engine finds of a target on none of the subquery's steps: the untimed half
                untimed = "-untimed" if name == "seen" and "present_over_time(" in text else ""
                out[text] = ("late-" + name + untimed, rule.states_family)
    return out


def provide(name: str, family: str, young: bool = False) -> list[tuple[dict[str, str], str]]:
    """The evidence from before node-b failed; the rules' parts from after. ``young``: node-b was
    first scraped after the horizon's last subquery step (no good scrape on its grid)."""
    evidence = {
        "up": [(NODE_A, "1"), (NODE_B, "1")],
        "up_at": [(NODE_A, str(NOW - 1)), (NODE_B, str(NOW - 1))],
        "healthy_at": [(NODE_A, str(NOW - 1))] + ([] if young else [(NODE_B, str(NOW - 1))]),
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
    if name.startswith("late-seen") and family == "DCGM_FI_DEV_GPU_UTIL":
        if not young:  # node-b's pod at its last good scrape, on the subquery's grid
            return [({**gpu(B, "GPU-b"), **NODE_B}, str(NOW - 1))]
        if name == "late-seen-untimed":  # on none of its steps: seen within the horizon (0, untimed)
            return [({**gpu(B, "GPU-b"), **NODE_B}, "0")]
    return []


def answer(query: str, table: dict[str, tuple[str, str]], late_fails: bool, young: bool) -> tuple[int, Any]:
    head = query.split(" or ")[0]
    if late_fails and head.startswith("label_replace(") and "node-b" in head:
        return 503, {"status": "error", "errorType": "unavailable", "error": "the engine is restarting"}
    values: list[tuple[dict[str, str], str]] = []
    if "rightsizer_workload_slo_scaling_latency_ratio{" in head:
        values = [(SLO, "0.039")]  # node-a's replica alone: node-b's series ended
    elif "DCGM_FI_DEV_GPU_UTIL{" in head:
        values = [(gpu(A, "GPU-a"), "0.2")]
    return vector(values + carried(query, functools.partial(provide, young=young), table))


async def served(
    prom: FakePrometheus, aiohttp_client: Any, late_fails: bool = False, young: bool = False
) -> Any:
    table = names()
    prom.answer = lambda q: answer(q, table, late_fails, young)
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    return await aiohttp_client(app), source


@pytest.mark.parametrize("young", [False, True], ids=["on-the-grid", "first-scraped-after-its-last-step"])
async def test_a_target_failing_after_the_evidence_is_missed_not_left_out(
    prom: FakePrometheus, aiohttp_client: Any, young: bool
) -> None:
    client, source = await served(prom, aiohttp_client, young=young)
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


def test_a_real_engine_finds_what_a_target_scraped_after_the_last_step_held() -> None:
    """On a real Prometheus: the late ``seen`` of a target whose every scrape came after the
    horizon's last subquery step (60 s on the defaults). Written from PromQL before running: the
    subquery's steps are multiples of 60 s, so evaluated 0.1 s after the target's first scrape
    (with no step in between, 599 times in 600) the timed half finds nothing of it and the whole
    part finds its series at 0 (seen within the horizon, time unknown); with a step in between,
    at that step's time (``last_step``)."""
    rule = next(r for r in BUILTIN_RULES if r.states_family == "DCGM_FI_DEV_GPU_UTIL")
    cfg = load_config(None, {"prometheus": {"url": "http://p:9090"}}, environ={}).prometheus
    horizon = Horizon(cfg.source_horizon_seconds, cfg.stale_after_seconds)
    labels = f'gpu="0",UUID="GPU-b",namespace="prod",pod="{B}",container="srv"'
    with FakeHttpServer() as node_b:
        node_b.route("/metrics", body=f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 80\n".encode())
        target = node_b.url("").removeprefix("http://")
        with prometheus({"rightsizer": [target]}) as prom:
            wait_for(lambda: len(prom_query(prom.url, "DCGM_FI_DEV_GPU_UTIL")) == 1, 30, what="a scrape")
            scraped = prom_query(prom.url, "DCGM_FI_DEV_GPU_UTIL[10m]")
            first = min(float(v[0]) for s in scraped for v in s["values"])
            at = first + 0.1
            selector = render(f"{rule.states_family}{{<<.LabelMatchers>>}}", rule.matchers)
            part = late_parts(rule, selector, horizon, [target])["seen"]
            timed = part.partition(" or ")[0]
            on_grid = (at // horizon.resolution) * horizon.resolution >= first  # a step since then
            assert len(prom_query(prom.url, timed, at)) == (1 if on_grid else 0)
            found = prom_query(prom.url, part, at)
    assert [(s["metric"]["pod"], s["metric"]["instance"]) for s in found] == [(B, target)]
    step = (at // horizon.resolution) * horizon.resolution  # the last step, if the scrape came before it
    assert float(found[0]["value"][1]) == (step if on_grid else 0.0), (first, found)
