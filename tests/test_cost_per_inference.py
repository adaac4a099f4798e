"""Cost per inference: measured throughput priced at today's option and projected on the recommended
one, by the resource that binds the work; the live engine on a scenario fleet of two inference
workloads on different GPUs, and hand-built evidence for the projection rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_history import exporter_history

from exporter.sources.simulated.scenario import SCENARIO_DIR
from rightsizing.catalog import load_catalog
from rightsizing.command.report_cli import cost_table
from rightsizing.cost import cost_json, cost_rows, workload_costs
from rightsizing.evidence import Evidence, QueueEvidence
from rightsizing.settings import RightsizingSettings
from rightsizing.verdicts import Assessment

GIB = 2**30
CATALOG = load_catalog()
S = RightsizingSettings()
SCENARIOS = Path(__file__).parent / "scenarios"


def price(key: str) -> float:
    c = CATALOG.candidate(key)
    assert c is not None
    return c.hourly_price_dollars


def test_two_workloads_on_different_gpus_show_their_measured_cost_and_the_projection() -> None:
    fleet = exporter_history(SCENARIOS / "memory_reserved_by_server.yaml", 3600.0, 15.0, {}, None)
    costs = {c.queue: c for c in fleet.live.costs}
    # vLLM on an A100 80GB serving 50 generated tokens/s (the scenario's rate, which its GPU can
    # serve: the arithmetic is in the scenario file). Its weights and KV cache in use need 37.4 GiB
    # of the 77 it reserves: overprovisioned -> L40S, demand met, so the same rate on the L40S.
    rag = costs["rag"]
    assert (rag.server, rag.unit, len(rag.gpus)) == ("vllm", "tokens", 1)
    assert rag.rate == pytest.approx(50, rel=0.01)
    assert rag.dollars == pytest.approx(price("A100-SXM-80GB") / (50 * 3600) * 1e6, rel=0.01)
    assert rag.recommended_hourly_dollars == pytest.approx(price("L40S-48GB"))
    assert rag.projected_rate == pytest.approx(rag.rate)
    assert rag.projected_dollars == pytest.approx(price("L40S-48GB") / (rag.rate * 3600) * 1e6)
    # SGLang on an L40S at 36 tokens/s, under memory pressure: underprovisioned -> A100 80GB. The
    # GPU is the limit; an L40S reports no SM active (GPU utilization says a kernel ran, not how much
    # compute it used), so memory bandwidth binds decode: 2.039 TB/s / 864 GB/s = x2.36, as
    # rightsizer plan --measured-from projects it (not x0.86 by dense FP16, 312 / 362 TFLOPS).
    agent = costs["agent"]
    assert agent.rate == pytest.approx(36, rel=0.01)
    assert agent.dollars == pytest.approx(price("L40S-48GB") / (36 * 3600) * 1e6, rel=0.01)
    assert agent.recommended_hourly_dollars == pytest.approx(price("A100-SXM-80GB"))
    assert agent.projected_rate == pytest.approx(agent.rate * 2039 / 864, rel=1e-6)
    assert agent.projected_dollars == pytest.approx(
        price("A100-SXM-80GB") / (agent.rate * 2039 / 864 * 3600) * 1e6, rel=1e-6
    )
    # Published as series, today's and projected.
    rows = cost_rows([agent])
    dollars = {dict(r.labels)["option"]: r.value for r in rows["rightsizer_workload_cost_dollars"]}
    assert dollars == pytest.approx({"current": agent.dollars, "recommended": agent.projected_dollars})
    assert {dict(r.labels)["per"] for r in rows["rightsizer_workload_cost_dollars"]} == {"million_tokens"}
    # The report's text table, most expensive per hour first (the L40S's $1.86/h after the A100).
    text = cost_table([cost_json(c) for c in fleet.live.costs])
    lines = [line for line in text.splitlines() if line.split()[0] in ("rag", "agent")]
    assert [line.split()[0] for line in lines] == ["rag", "agent"]
    assert f"${agent.dollars:,.3f}/M tokens" in lines[1]
    assert f"${agent.projected_dollars:,.3f}/M tokens" in lines[1]


H100 = "NVIDIA H100 80GB HBM3"


def evidence(dram: float | None, activity: float, queue: QueueEvidence) -> Evidence:
    return Evidence(
        samples=3600, history_seconds=3599.0, window_seconds=3600.0, model=H100, mig_profile=None,
        memory_total_bytes=80 * GIB, memory_peak_bytes=30 * GIB, memory_p95_bytes=30 * GIB,
        activity_source="sm_active", activity_p50=activity, activity_p95=activity, activity_p99=activity,
        activity_recent_max=activity, dram_active_p95=dram, dram_active_high=dram, queues=(queue,),
    )  # fmt: skip


def assessment(verdict: str, recommended: str) -> Assessment:
    return Assessment(verdict, "", (), recommended, "H100-SXM-80GB", None, None)


def growing_queue(tokens: float | None, requests: float | None = None) -> QueueEvidence:
    # 60 waiting at the end, grown by 50 over the hour around a mean of 30: the GPU is the limit.
    return QueueEvidence("chat", 60, 60, 50.0, 30.0, 3599.0, "vllm", 0.5, 0.0, tokens, None, requests)


def test_memory_bound_decode_is_never_projected_faster_on_less_bandwidth() -> None:
    # Decode of a memory-bound model: DRAM active 0.9 over SM 0.3, limited by the GPU. The L40S has
    # more than a third of the H100's compute but a quarter of its bandwidth: bandwidth scales the rate.
    ev = evidence(0.9, 0.3, growing_queue(2000.0))
    (c,) = workload_costs([("g", "", ev, assessment("underprovisioned", "L40S-48GB"))], CATALOG, S)
    assert c.projected_rate == pytest.approx(2000 * 864e9 / 3.35e12)
    # Compute-bound work on the same move scales by compute instead.
    (c,) = workload_costs(
        [("g", "", evidence(0.1, 0.9, growing_queue(2000.0)), assessment("underprovisioned", "L40S-48GB"))],
        CATALOG,
        S,
    )
    assert c.projected_rate == pytest.approx(2000 * 362 / 989)
    # Without a bandwidth signal, SM active binds, capped by the bandwidth ratio as well.
    unseen = evidence(None, 0.9, growing_queue(2000.0))
    (c,) = workload_costs([("g", "", unseen, assessment("underprovisioned", "B200-SXM-180GB"))], CATALOG, S)
    b200 = CATALOG.candidate("B200-SXM-180GB")
    h100 = CATALOG.candidate("H100-SXM-80GB")
    assert b200 is not None and h100 is not None
    ratios = (
        b200.fp16_dense_tflops / h100.fp16_dense_tflops,
        b200.memory_bandwidth_bytes_per_second / h100.memory_bandwidth_bytes_per_second,
    )
    assert c.projected_rate == pytest.approx(2000 * min(ratios))


def test_demand_met_keeps_its_rate_and_unknown_stays_unknown() -> None:
    quiet = QueueEvidence("chat", 0, 2, 0.0, 0.5, 3599.0, "vllm", 0.3, 0.0, 400.0)
    ev = evidence(0.05, 0.04, quiet)
    (c,) = workload_costs([("g", "", ev, assessment("overprovisioned", "L4-24GB"))], CATALOG, S)
    # A slower GPU with room for the work carries the same work: DRAM active 5 % of 3.35 TB/s is
    # 168 GB/s, 56 % of an L4's 300.
    assert c.projected_rate == 400.0
    assert c.projected_dollars == pytest.approx(price("L4-24GB") / (400 * 3600) * 1e6)
    # One without room for it serves what its bandwidth allows: 20 % of 3.35 TB/s is 670 GB/s, and
    # an L4 moves 300: 400 x 300 / 670 tokens/s.
    (c,) = workload_costs([("g", "", evidence(0.2, 0.1, quiet), assessment("overprovisioned", "L4-24GB"))],
                          CATALOG, S)  # fmt: skip
    assert c.projected_rate == pytest.approx(400 * 300 / (0.2 * 3350))
    # Triton counts requests only: dollars per thousand requests.
    (c,) = workload_costs([("g", "", evidence(0.2, 0.1, growing_queue(None, 3.0)), assessment("rightsized",
                          "H100-SXM-80GB"))], CATALOG, S)  # fmt: skip
    assert c.unit == "requests" and c.dollars == pytest.approx(price("H100-SXM-80GB") / (3 * 3600) * 1e3)
    # A server that counts nothing has no cost; nothing served is no cost per token (not zero).
    assert workload_costs([("g", "", evidence(0.2, 0.1, growing_queue(None)), assessment("idle", "release"))],
                          CATALOG, S) == []  # fmt: skip
    (c,) = workload_costs([("g", "", evidence(0.2, 0.1, growing_queue(0.0)), assessment("idle", "release"))],
                          CATALOG, S)  # fmt: skip
    assert c.rate == 0.0 and c.dollars is None and c.projected_rate is None and c.projected_dollars is None


def test_a_queue_feeding_two_gpus_pays_for_both() -> None:
    q = QueueEvidence("chat", 0, 2, 0.0, 0.5, 3599.0, "vllm", 0.3, 0.0, 1000.0)
    units = [(k, "", evidence(0.05, 0.04, q), assessment("overprovisioned", "L4-24GB")) for k in ("a", "b")]
    (c,) = workload_costs(units, CATALOG, S)
    assert c.gpus == ("a", "b") and c.hourly_dollars == pytest.approx(2 * price("H100-SXM-80GB"))
    assert c.dollars == pytest.approx(2 * price("H100-SXM-80GB") / (1000 * 3600) * 1e6)
    assert c.projected_dollars == pytest.approx(2 * price("L4-24GB") / (1000 * 3600) * 1e6)


def test_the_default_fleets_chat_8b_projects_onto_the_l40s_by_bandwidth() -> None:
    """One projection rule (rightsizing/projection.py): Llama 3 8B decode on an L4 (no SM active, so
    bandwidth binds) that is the limit projects x864/300 = 2.88 onto the L40S, as rightsizer plan
    --measured-from does, not x362/121 = 2.99 by dense FP16."""
    fleet = exporter_history(SCENARIO_DIR / "default.yaml", 3600.0, 15.0, {}, None)
    (chat,) = [c for c in fleet.live.costs if c.queue == "chat-requests"]
    assert chat.recommended_hourly_dollars == pytest.approx(price("L40S-48GB"))
    assert chat.projected_rate == pytest.approx(chat.rate * 864 / 300, rel=1e-9)
