"""When no bigger GPU carries the work ("add replicas"): how many replicas, and autoscalers that keep
at least that many, with the target types HPA computes correctly for each metric (planner-level,
tests/patches_units.py)."""

from __future__ import annotations

import dataclasses
import math

import kube
import yaml
from patches_units import AT, HOUR, evidence, held, patch_set

from rightsizing.evidence import QueueEvidence
from rightsizing.patches.owners import OwnerSeries
from rightsizing.patches.replicas import count
from rightsizing.slo.attainment import Latency, SloDeclaration, SloEvidence

PODS = ("x2k9q", "bcdfg")
OWNERS = OwnerSeries(
    pods={("llm", f"chat-7b9c4-{p}"): ("ReplicaSet", "chat-7b9c4") for p in PODS},
    replicasets={("llm", "chat-7b9c4"): ("Deployment", "chat")},
    present=True,
)
REASON = "queue growing at saturated compute; every larger GPU runs it above 70%; add replicas."


def saturated(pod: str, rate: float | None, rise: float, slo: SloEvidence | None = None):  # type: ignore[no-untyped-def]
    q = QueueEvidence(f"chat-{pod}", 40.0, 60.0, rise, 30.0, HOUR, "vllm", requests_rate=rate, slo=slo)
    ev = dataclasses.replace(evidence(), queues=(q,))
    return held(f"chat-7b9c4-{pod}", "H100-SXM-80GB", "L4-24GB", verdict="underprovisioned", reason=REASON,
                evidence=ev)  # fmt: skip


def none(u):  # type: ignore[no-untyped-def]
    """The engine's "add replicas": nothing recommended."""
    return dataclasses.replace(u, assessment=dataclasses.replace(u.assessment, recommended="none",
                                                                 hourly_savings_dollars=None))  # fmt: skip


def test_little_law_from_what_was_served_and_what_queued() -> None:
    # Each of 2 pods served 4.0 requests/s at saturation while its queue grew by 720 over the hour
    # (0.2/s): 8.4/s arrive; one replica serves 4.0/s, kept under 90 %: ceil(8.4 / 3.6) = 3.
    ps = patch_set([none(saturated(p, 4.0, 720.0)) for p in PODS], owners=OWNERS)
    (m,) = ps.moves
    assert (m.outcome, m.change, m.replicas.today, m.replicas.needed) == ("replicas", "add replicas", 2, 3)
    assert m.replicas.needed == math.ceil((2 * 4.0 + 2 * 720 / 3600) / (4.0 * 0.9))
    readme = ps.files["README.md"]
    assert "1 to scale out" in readme and "## Add replicas" in readme and "2 today, 3 needed" in readme
    assert set(ps.files) == {"README.md", "kustomization.yaml"}  # no patch: the count is the change
    hpa, keda = [yaml.safe_load(b.split("```", 1)[0]) for b in readme.split("```yaml\n")[1:]]
    assert hpa["kind"] == "HorizontalPodAutoscaler" and hpa["spec"]["minReplicas"] == 3
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}
    # The queue depth is a total: AverageValue, so desired = ceil(depth / 5) whatever the replicas.
    targets = {x["external"]["metric"]["selector"]["matchLabels"]["queue"]: x["external"]["target"]
               for x in hpa["spec"]["metrics"]}  # fmt: skip
    assert targets == {f"chat-{p}": {"type": "AverageValue", "averageValue": "5"} for p in PODS}
    assert keda["spec"]["minReplicaCount"] == 3 and all(
        "metricType" not in t for t in keda["spec"]["triggers"]
    )
    assert ps.json()["moves"][0]["replicas"] == {"today": 2, "needed": 3, "words": m.why}
    # Ready to apply: as every supported API server and KEDA's CRD would take them (strict).
    for version in kube.supported_versions():
        kube.validate_core(hpa, version)
    kube.validate_custom(keda)


def test_a_missed_slo_scales_by_its_latency_ratio_with_a_value_target() -> None:
    # TTFT p95 1.17 s against a 1 s target on 2 replicas, no request counts: ceil(2 x 1.17 / 0.9) = 3.
    ttft = Latency("ttft", 1.0, 0.95, 500, True, 0.80, False, 1.17, (), None, False)
    declared = SloDeclaration(ttft_seconds=1.0, namespace="llm", workload="chat")  # type: ignore[call-arg]
    slo = SloEvidence("llm", "chat", declared, (ttft,), 100, "vllm", HOUR)
    ps = patch_set([none(saturated(p, None, 0.0, slo)) for p in PODS], owners=OWNERS)
    (m,) = ps.moves
    assert m.replicas.needed == 3 == math.ceil(2 * 1.17 / 0.9)
    hpa, keda = m.autoscalers
    (ratio,) = [
        x for x in hpa["spec"]["metrics"] if x["external"]["metric"]["name"].endswith("latency_ratio")
    ]
    # Already per replica: a Value target (desired = ceil(ratio / 0.9 x ready pods)), never AverageValue.
    assert ratio["external"]["target"] == {"type": "Value", "value": "0.9"}
    kube.validate_custom(keda)
    (trigger,) = [t for t in keda["spec"]["triggers"] if t["metadata"]["metric"].endswith("latency_ratio")]
    assert trigger["metricType"] == "Value" and trigger["metadata"]["labelSelector"] == "workload=chat"


def test_the_count_is_not_guessed_without_counts_or_an_slo() -> None:
    r = count({"a": [evidence()], "b": [evidence()]}, 0.1)
    assert r.needed is None and "cannot be said" in r.words
    ps = patch_set([none(saturated(p, None, 720.0)) for p in PODS], owners=OWNERS)
    (m,) = ps.moves
    assert (
        m.outcome == "replicas"
        and m.autoscalers == ()
        and "2 today, not known needed" in ps.files["README.md"]
    )
    assert AT  # the clock of patches_units: the README is dated by it
