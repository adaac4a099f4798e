"""Unknown is not zero, on every path that serves a value: the real app, fed by a real exposition
server in direct mode (the end-to-end cases with real processes are in test_hostile_outage*.py)."""

from __future__ import annotations

from adapter_support import EXT, Make, assert_status, client_get, exposition, make

from adapter.config import load_config
from adapter.rules import DirectRule, RuleConfig
from rightsizer_core.settings import ConfigError

__all__ = ["make"]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod"
JOBS = {"queue": "jobs", "kind": "redis", "namespace": "prod", "workload": "worker"}
CHAT = {"queue": "chat", "kind": "vllm", "namespace": "prod", "workload": "chat"}
POD = {"gpu": "0", "UUID": "GPU-a", "pod": "chat-7d9c5b6f8b-x2x4z", "namespace": "prod", "container": "srv"}


def fleet(jobs_up: bool = True) -> str:
    """jobs (Redis, reports no in-flight) and chat (vLLM, in-flight 2); jobs down unless ``jobs_up``."""
    return exposition(
        {
            "rightsizer_queue_depth": [(JOBS, 4)] * jobs_up + [(CHAT, 0)],
            "rightsizer_queue_in_flight": [(CHAT, 2)],
            "rightsizer_queue_source_up": [(JOBS, float(jobs_up)), (CHAT, 1)],
            "DCGM_FI_DEV_GPU_UTIL": [(POD, 50)],
        }
    )


async def test_custom_object_queries_refuse_down_and_unknown_queues(make: Make) -> None:
    client, cache, srv = await make(fleet())
    worker = f"{CUSTOM}/deployments/worker/rightsizer_queue_depth"
    code, body = await client_get(client, worker)
    assert code == 200 and [i["value"] for i in body["items"]] == ["4"]
    code, body = await client_get(client, f"{CUSTOM}/deployments/chat/rightsizer_queue_depth")
    assert code == 200 and [i["value"] for i in body["items"]] == ["0"]  # up and empty: a real 0
    assert_status(
        await client_get(client, f"{CUSTOM}/deployments/ghost/rightsizer_queue_depth"), 404, "NotFound"
    )
    srv.text = fleet(jobs_up=False)
    await cache.refresh_once()
    answer = await client_get(client, worker)
    assert_status(answer, 503, "ServiceUnavailable")
    assert "'jobs'" in answer[1]["message"] and "source down" in answer[1]["message"]
    namespace_total = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/metrics/rightsizer_queue_depth"
    assert_status(await client_get(client, namespace_total), 503, "ServiceUnavailable")


async def test_in_flight_of_a_queue_that_does_not_report_it_is_not_zero(make: Make) -> None:
    client, _, _ = await make(fleet())
    path = f"{EXT}/namespaces/prod/rightsizer_queue_in_flight"
    code, body = await client_get(client, f"{path}?labelSelector=queue%3Dchat")
    assert code == 200 and [i["value"] for i in body["items"]] == ["2"]
    answer = await client_get(client, f"{path}?labelSelector=queue%3Djobs")
    assert_status(answer, 404, "NotFound")
    assert "publishes no rightsizer_queue_in_flight" in answer[1]["message"]


async def test_keda_metrics_api_gives_no_zero_for_gpus_it_cannot_see(make: Make) -> None:
    client, _, _ = await make(fleet())
    base = "/keda/v1/metrics/rightsizer_gpu_utilization_ratio?namespace=prod&labelSelector=workload%3D"
    code, body = await client_get(client, base + "chat")
    assert code == 200 and body["value"] == 0.5
    assert_status(await client_get(client, base + "ghost"), 404, "NotFound")


def test_zero_when_empty_is_gone_and_source_families_are_validated() -> None:
    rule = {"name": "q", "query": "q"}
    for bad, why in (
        ({"zero_when_empty": True}, "zero_when_empty"),
        ({"up_family": "up\n"}, "up_family"),
        ({"source_family": "a.b"}, "source_family"),
        ({"up_family": "up", "source_family": "x"}, "not both"),
    ):
        try:
            load_config(None, {"rules": [{**rule, **bad}]}, environ={})
        except ConfigError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")
    by = RuleConfig(name="q", query="q", up_family="f", direct=DirectRule(family="f", by=["queue"]))
    assert by.key_of({"queue": "a", "instance": "n:1", "job": "j", "x": "1"}) == {"queue": "a"}
    without = RuleConfig(name="q", query="q", up_family="f")
    assert without.key_of({"queue": "a", "instance": "n:1", "job": "j", "x": "1"}) == {"queue": "a", "x": "1"}
