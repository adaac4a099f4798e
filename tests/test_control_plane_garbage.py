"""A garbage TTFT histogram under the SLO recipe of docs/slos.md, on a real HPA controller
(kube-controller-manager 1.20.2): the exporter refuses the histogram, the adapter answers 503
with the exporter's reason, and the HPA holds its replicas (FailedGetExternalMetric) for as long
as the page is garbage, then follows the ratio again once the page is good.

The numbers, from the declaration in docs/slos.md (TTFT target 0.5 s, inter-token 50 ms,
objective 0.95), vLLM's bucket layouts and the HPA's Value maths (desired = ceil(ready x ratio /
0.8)), with every request of the fake vLLM at one latency:
- missed: TTFT 0.9 s reads 0.9875 s at p95, ratio 1.975: from 3 replicas ceil(7.4) = 8, held to
  the maximum 6.
- garbage, three pages in turn: every finite `le` bound moved 10,000 s down (negative: which read
  as a ratio of -2, desired 1); the counts from the 1 s bucket up at 1.7e308 (which made the
  counters NaN); `_count` one more than the +Inf bucket. Each is refused; the replicas stay at 6.
- good again, first tokens at 30 ms: the ratio falls to inter-token's 0.19 once the scaling window
  (12 s) holds only new requests: 6 -> ceil(6 x 0.2375) = 2 -> ceil(2 x 0.2375) = 1 (min).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from control_plane import SYNC_SECONDS, Cluster
from control_plane_kube import Kubelet, Timeline, condition, hpa_status
from control_plane_rig import Rig
from servers import wait_for
from test_control_plane_hpa import failing, workload
from test_control_plane_slo import RATIO, documented_metrics, hpa, served_ratio

pytestmark = pytest.mark.control_plane

TTFT = "vllm:time_to_first_token_seconds"
BUCKET = re.compile(rf'^({re.escape(TTFT)}_bucket{{.*le=")([^"]+)(".*}} )(\S+)$', re.M)
COUNT = re.compile(rf"^({re.escape(TTFT)}_count{{[^}}]*}} )(\S+)$", re.M)
PATH = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/chat/{RATIO}?labelSelector=workload%3Dllama3-8b"


def negative_bounds(text: str) -> str:
    """Every finite bound 10,000 s lower: still ascending, all negative."""

    def lower(m: re.Match[str]) -> str:
        if m.group(2) == "+Inf":
            return m.group(0)
        return f"{m.group(1)}{float(m.group(2)) - 10_000!r}{m.group(3)}{m.group(4)}"

    return BUCKET.sub(lower, text)


def near_max_float(text: str) -> str:
    """The buckets from 1 s up, the +Inf bucket and ``_count`` at 1.7e308 (still cumulative)."""

    def huge(m: re.Match[str]) -> str:
        big = m.group(2) == "+Inf" or float(m.group(2)) >= 1.0
        return f"{m.group(1)}{m.group(2)}{m.group(3)}{'1.7e+308' if big else m.group(4)}"

    return COUNT.sub(lambda m: f"{m.group(1)}1.7e+308", BUCKET.sub(huge, text))


def count_disagrees(text: str) -> str:
    """``_count`` one more than the +Inf bucket."""
    return COUNT.sub(lambda m: f"{m.group(1)}{float(m.group(2)) + 1!r}", text)


GARBAGE: list[tuple[str, Callable[[str], str], str]] = [
    ("negative le bounds", negative_bounds, "an le bound is negative"),
    ("counts near 1.7e308", near_max_float, "a bucket count is over 2^53"),
    ("_count disagreeing with +Inf", count_disagrees, "_count disagrees with the +Inf bucket"),
]


def unjudged(rig: Rig, reason: str) -> bool:
    """The exporter refuses the workload's SLO for ``reason``: scaling_up 0, the reason published,
    no ratio."""
    labels = {"namespace": "chat", "workload": "llama3-8b"}
    return (
        rig.exporter_value("rightsizer_workload_slo_scaling_up", **labels) == 0
        and rig.exporter_value("rightsizer_workload_slo_scaling_unjudged_info", **labels, reason=reason) == 1
        and rig.exporter_value("rightsizer_workload_slo_scaling_latency_ratio", **labels) is None
    )


def refused(cluster: Cluster, reason: str) -> tuple[int, Any] | None:
    """The adapter's answer for the workload's ratio once it is no longer a value and quotes
    ``reason``: the previous garbage page's 503 stands until the adapter's next refresh."""
    code, body = cluster.request("GET", PATH)
    if code == 200:
        return None
    message = body.get("message", "") if isinstance(body, dict) else body
    if code == 503 and reason not in str(message):
        return None
    return code, body


def exported_ratio(rig: Rig) -> float | None:
    return rig.exporter_value("rightsizer_workload_slo_scaling_latency_ratio", workload="llama3-8b")


def test_a_garbage_histogram_holds_the_slo_hpa_and_a_good_page_moves_it_again(kube_rig: Rig) -> None:
    rig, cluster = kube_rig, kube_rig.cluster
    cluster.apply(workload("chat", "held", 3))
    conditions: list[str] = []

    def note(phase: str) -> None:
        status = hpa_status(cluster, "chat", "held")
        active = condition(status, "ScalingActive")
        conditions.append(
            f"{phase}: ScalingActive={active.get('status')} {active.get('reason')}: {active.get('message')}"
        )

    try:
        with Kubelet(cluster, "chat"):
            # Missed: every request's first token at 0.9 s against 0.5 s.
            rig.feeder.spoil, rig.feeder.ttft, rig.feeder.itl = None, 0.9, 0.008
            wait_for(lambda: exported_ratio(rig) == pytest.approx(1.975, abs=1e-3), 60, 0.5,
                     what="the exporter's ratio 1.975")  # fmt: skip
            timeline = Timeline(cluster, "chat", "held")
            timeline.replicas()
            cluster.apply([hpa("held", documented_metrics(), max_replicas=6)])
            wait_for(lambda: timeline.replicas() == 6, 120, 0.5, what=f"up to 6 while missed: {timeline}")
            wait_for(lambda: condition(hpa_status(cluster, "chat", "held"), "ScalingActive").get("status")
                     == "True", 30, 0.5, what="ScalingActive")  # fmt: skip
            note("missed")
            at_max = len(timeline.points)

            for name, spoil, why in GARBAGE:
                reason = f"invalid histogram: {TTFT}: {why}"
                rig.feeder.spoil = spoil
                wait_for(lambda reason=reason: unjudged(rig, reason), 30, 0.5, what=f"{name} refused")
                # the adapter's next refresh: 503 quoting the exporter's reason, via the aggregator
                code, body = wait_for(lambda reason=reason: refused(cluster, reason), 30, 0.5,
                                      what=f"{name}: the adapter's 503")  # fmt: skip
                assert code == 503 and reason in body["message"], (name, code, body)
                # HPA's condition carries it too (FailedGetExternalMetric, quoting the adapter's 503)
                wait_for(lambda reason=reason: reason in (failing(cluster, "chat", "held") or ""), 60, 0.5,
                         what=f"{name}: FailedGetExternalMetric")  # fmt: skip
                end = time.monotonic() + 3 * SYNC_SECONDS
                while time.monotonic() < end:  # held through three of the controller's syncs
                    assert timeline.replicas() == 6, f"moved while the page was garbage ({name}): {timeline}"
                    assert failing(cluster, "chat", "held"), f"{name}: {hpa_status(cluster, 'chat', 'held')}"
                    time.sleep(0.5)
                note(name)
                print(f"{name}: the adapter's 503: {body['message']}")
            assert len(timeline.points) == at_max, f"moved while garbage: {timeline}"

            # Good again, first tokens at 30 ms: the HPA reads the ratio again and scales down.
            rig.feeder.ttft, rig.feeder.spoil = 0.03, None
            good = time.monotonic()
            wait_for(lambda: failing(cluster, "chat", "held") is None, 60, 0.5, what="ScalingActive again")
            active = time.monotonic() - good
            note("good again")
            wait_for(lambda: exported_ratio(rig) == pytest.approx(0.19, abs=1e-3), 60, 0.5,
                     what="the exporter's ratio 0.19")  # fmt: skip
            wait_for(lambda: served_ratio(rig) == pytest.approx(0.19, abs=1e-3), 30, 0.5, what="ratio served")
            wait_for(lambda: timeline.replicas() == 1, 120, 0.5, what=f"down to 1 when good: {timeline}")
            after = [n for _, n in timeline.points[at_max:]]
            assert after[-1] == 1 and after == sorted(after, reverse=True), f"down only: {timeline}"
            print(f"good page -> metric readable after {active:.0f} s, 1 replica after "
                  f"{time.monotonic() - good:.0f} s")  # fmt: skip
            print(f"SLO HPA replicas (missed, garbage x3, good): {timeline}")
            print("HPA conditions:\n  " + "\n  ".join(conditions))
    finally:
        rig.feeder.spoil = None
        cluster.kubectl("-n", "chat", "delete", "hpa", "held", check=False)
