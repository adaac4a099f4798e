"""What the SLO rules answer for a workload, by what the exporters published (in-process adapter,
direct mode, a real HTTP exposition): a judged ratio is its value; a ratio that is NaN or +Inf is
503 naming it (never left out, never sent); a workload judged but without a ratio is 503 too; 404
only for a workload without a declared SLO. Every body is strict JSON."""

from __future__ import annotations

import pytest
from adapter_support import EXT, Make, assert_status, client_get, exposition, make  # noqa: F401

RATIO = "rightsizer_workload_slo_latency_ratio"


def workload(name: str) -> dict[str, str]:
    return {"namespace": "llm", "workload": name}


SLOS = exposition(
    {
        "rightsizer_workload_slo_scaling_latency_ratio": [
            (workload("good"), 1.25),
            (workload("nan"), float("nan")),
            (workload("inf"), float("inf")),
        ],
        "rightsizer_workload_slo_scaling_up": [
            (workload(name), 1) for name in ("good", "nan", "inf", "unjudged-ratio")
        ],
    }
)


@pytest.mark.parametrize(
    ("name", "code", "fragment"),
    [
        ("good", 200, ""),
        ("nan", 503, "gave NaN for it: not a number"),
        ("inf", 503, "gave +Inf for it: not a number"),
        ("unjudged-ratio", 503, "is up but has no usable value of it"),
        ("no-slo", 404, "no known source matches"),
    ],
)
async def test_a_declared_slo_without_a_usable_value_is_503_and_only_no_slo_is_404(
    make: Make, name: str, code: int, fragment: str  # noqa: F811
) -> None:
    client, _, _ = await make(SLOS)
    external = await client_get(client, f"{EXT}/namespaces/llm/{RATIO}?labelSelector=workload%3D{name}")
    keda = await client_get(client, f"/keda/v1/metrics/{RATIO}?namespace=llm&labelSelector=workload%3D{name}")
    custom_path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/deployments/{name}/{RATIO}"
    custom = await client_get(client, custom_path)
    if code == 200:
        assert [i["value"] for i in external[1]["items"]] == ["1250m"]
        assert keda == (200, {"value": 1.25, "timestamp": keda[1]["timestamp"]})
        assert custom[0] == 200 and custom[1]["items"][0]["value"] == "1250m"
        return
    reason = {503: "ServiceUnavailable", 404: "NotFound"}[code]
    for answer in (external, keda, custom):
        assert_status(answer, code, reason)
        assert fragment in answer[1]["message"], answer
