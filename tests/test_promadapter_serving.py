"""A prometheus-adapter file served unchanged, against a real Prometheus scraping the simulated
exporter and a Redis queue: answers equal what prometheus-adapter computes for each request.

prometheus-adapter renders ``metricsQuery`` per request (its ``pkg/naming`` Build/BuildExternal):
``<<.LabelMatchers>>`` = the request's namespace and object names (``pod=~"a|b"``), plus the
selector; ``<<.GroupBy>>`` = the object's label (custom) or nothing (external). ``expected_*``
below send exactly that query to the same Prometheus at the instant the adapter's refresh was
evaluated, and the adapter's answer must carry the same names, objects, labels and values.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from adapter_support import adapter, client_get, get_json
from prometheus_client import generate_latest
from servers import Process, exporter, free_port, prom_query, prometheus, redis_server, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.availability import Failure
from adapter.kubernetes.gate import Gate
from adapter.kubernetes.quantities import format_quantity
from adapter.promadapter import schema
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app

FILE = Path(__file__).parent / "fixtures" / "promadapter" / "gpu-and-queues.yaml"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with redis_server() as server:
        port = server.extra["port"]
        client = redis.Redis(port=port, socket_timeout=5)
        client.rpush("jobs", *range(7))
        client.rpush("other", *range(3))
        config = tmp_path_factory.mktemp("exporter") / "exporter.yaml"
        config.write_text(
            "queues:\n"
            f"  - {{name: jobs, kind: redis, url: 'redis://127.0.0.1:{port}/0', key: jobs,"
            " labels: {namespace: prod}}\n"
            f"  - {{name: other, kind: redis, url: 'redis://127.0.0.1:{port}/0', key: other,"
            " labels: {namespace: batch}}\n"
        )
        with (
            exporter(["--simulate", "--config", str(config)]) as sim,
            prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as p,
        ):
            wait_for(lambda: prom_query(p.url, 'rightsizer_queue_depth{queue="other"}'), 30, what="queues")
            # rate() over 1m needs two samples of the energy counter
            wait_for(
                lambda: prom_query(p.url, "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m])"), 30, what="rates"
            )
            yield p
        client.close()


@pytest.fixture
async def served(prom: Process, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, AdapterMetrics]]:
    cfg = load_config(
        None, {"prometheus": {"url": prom.url}, "prometheus_adapter": {"config_file": str(FILE)}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, schema.load(str(FILE)), 600, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    await cache.refresh_once()
    auth = Gate.off()
    client = await aiohttp_client(create_app(cache, auth, metrics, None))
    yield client, cache, metrics
    await source.close()


def at(cache: Cache, metric: str) -> float:
    vector = cache.states[metric].vector
    assert vector is not None, cache.states[metric].error
    return vector.timestamp


def upstream(prom: Process, query: str, when: float) -> list[dict[str, Any]]:
    return prom_query(prom.url, query, when)


def namespaces_of(prom: Process, series: str) -> list[str]:
    return sorted({s["metric"]["namespace"] for s in prom_query(prom.url, series)})


async def test_discovery_names_follow_name_matches_and_as(served: Any) -> None:
    client, cache, _ = served
    assert sorted(cache.rules) == [
        "DCGM_FI_DEV_FB_USED",  # no name block: $0, the series name
        "DCGM_FI_DEV_GPU_TEMP",  # served per request
        "TOTAL_ENERGY",  # one capture group, no `as`: $1
        "any_namespace_queue_in_flight",
        "gpu_GPU_utilization",  # ${1} inside a longer name; ENC/DEC_UTIL filtered out by isNot
        "gpu_MEM_COPY_utilization",
        "queue_in_flight_per_request",  # served per request
        "rightsizer_queue_depth",
    ]
    code, body = await client_get(client, CUSTOM)
    assert code == 200
    names = {r["name"] for r in body["resources"]}
    assert {"pods/gpu_GPU_utilization", "jobs.batch/DCGM_FI_DEV_FB_USED", "pods/TOTAL_ENERGY"} <= names
    # overrides map namespace and pod only: the `job` label names no resource for these rules
    assert {n for n in names if n.endswith("/gpu_GPU_utilization")} == {
        "pods/gpu_GPU_utilization",
        "namespaces/gpu_GPU_utilization",
    }
    code, body = await client_get(client, EXTERNAL)
    assert code == 200
    assert sorted(r["name"] for r in body["resources"]) == [
        "any_namespace_queue_in_flight",
        "queue_in_flight_per_request",
        "rightsizer_queue_depth",
    ]


@pytest.mark.parametrize(
    ("metric", "series", "template"),
    [
        ("gpu_GPU_utilization", "DCGM_FI_DEV_GPU_UTIL", "avg({s}{{{m}}}) by ({g})"),
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED", "sum({s}{{{m}}}) by ({g})"),
        ("TOTAL_ENERGY", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "sum(rate({s}{{{m}}}[1m])) by ({g})"),
    ],
)
async def test_pods_answers_equal_prometheus_adapters(
    served: Any, prom: Process, metric: str, series: str, template: str
) -> None:
    client, cache, _ = served
    checked = 0
    for ns in namespaces_of(prom, series):
        pods = sorted({s["metric"]["pod"] for s in prom_query(prom.url, f'{series}{{namespace="{ns}"}}')})
        matchers = f'namespace="{ns}",pod=~"{"|".join(pods)}"'
        expected = {
            s["metric"]["pod"]: format_quantity(float(s["value"][1]))
            for s in upstream(prom, template.format(s=series, m=matchers, g="pod"), at(cache, metric))
        }
        code, body = await client_get(client, f"{CUSTOM}/namespaces/{ns}/pods/*/{metric}")
        assert code == 200, body
        got = {i["describedObject"]["name"]: i["value"] for i in body["items"]}
        assert got == expected and expected
        checked += len(got)
    assert checked >= 4


async def test_other_template_resources_are_combined_like_upstream(served: Any, prom: Process) -> None:
    """The `job` label names batch Jobs under template <<.Resource>>: GroupBy is job alone."""
    client, cache, _ = served
    ns = namespaces_of(prom, "DCGM_FI_DEV_FB_USED")[0]
    query = f'sum(DCGM_FI_DEV_FB_USED{{namespace="{ns}",job="rightsizer"}}) by (job)'
    [expected] = upstream(prom, query, at(cache, "DCGM_FI_DEV_FB_USED"))
    code, body = await client_get(client, f"{CUSTOM}/namespaces/{ns}/jobs/rightsizer/DCGM_FI_DEV_FB_USED")
    assert code == 200, body
    assert body["items"][0]["value"] == format_quantity(float(expected["value"][1]))
    assert body["items"][0]["describedObject"]["name"] == "rightsizer"


async def test_external_namespaced_selects_the_hpas_namespace(served: Any, prom: Process) -> None:
    client, cache, _ = served
    when = at(cache, "rightsizer_queue_depth")
    for ns, queue in (("prod", "jobs"), ("batch", "other")):
        [expected] = upstream(prom, f'sum(rightsizer_queue_depth{{namespace="{ns}"}}) by (queue)', when)
        code, body = await client_get(client, f"{EXTERNAL}/namespaces/{ns}/rightsizer_queue_depth")
        assert code == 200, body
        assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [
            ({"queue": queue}, format_quantity(float(expected["value"][1])))
        ]
    code, body = await client_get(
        client, f"{EXTERNAL}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
    )
    assert [i["value"] for i in body["items"]] == ["7"]
    code, body = await client_get(client, f"{EXTERNAL}/namespaces/nowhere/rightsizer_queue_depth")
    assert code == 200 and body["items"] == []  # prometheus-adapter too answers an empty list


async def test_external_namespaced_false_ignores_the_hpas_namespace(served: Any, prom: Process) -> None:
    client, cache, _ = served
    expected = upstream(
        prom, "sum(rightsizer_queue_in_flight{}) by (queue)", at(cache, "any_namespace_queue_in_flight")
    )
    want = sorted((s["metric"]["queue"], format_quantity(float(s["value"][1]))) for s in expected)
    for ns in ("default", "prod"):
        code, body = await client_get(client, f"{EXTERNAL}/namespaces/{ns}/any_namespace_queue_in_flight")
        assert code == 200, body
        assert sorted((i["metricLabels"]["queue"], i["value"]) for i in body["items"]) == want
        assert len(want) >= 2  # the simulated fleet's queues, from the llm namespace


async def settled(prom: Process, query: str, ask: Any) -> tuple[Any, list[dict[str, Any]]]:
    """The adapter's answer and Prometheus's to ``query``, taken with no scrape in between (the
    answers before and after the adapter's are the same); a few tries at most."""
    for _ in range(10):
        before = prom_query(prom.url, query)
        answer = await ask()
        after = prom_query(prom.url, query)
        if [(s["metric"], s["value"][1]) for s in before] == [(s["metric"], s["value"][1]) for s in after]:
            return answer, after
    raise AssertionError(f"Prometheus kept changing under {query!r}")


async def test_unbatchable_custom_metric_is_queried_per_request_like_upstream(
    served: Any, prom: Process
) -> None:
    client, _, _ = served
    ns = namespaces_of(prom, "DCGM_FI_DEV_GPU_TEMP")[0]
    pods = sorted(
        {s["metric"]["pod"] for s in prom_query(prom.url, f'DCGM_FI_DEV_GPU_TEMP{{namespace="{ns}"}}')}
    )
    query = f'topk(1, DCGM_FI_DEV_GPU_TEMP{{namespace="{ns}",pod=~"{"|".join(pods)}"}})'
    (code, body), expected = await settled(
        prom, query, lambda: client_get(client, f"{CUSTOM}/namespaces/{ns}/pods/*/DCGM_FI_DEV_GPU_TEMP")
    )
    assert code == 200, body
    assert [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [
        (s["metric"]["pod"], format_quantity(float(s["value"][1]))) for s in expected
    ]
    code, body = await client_get(client, f"{CUSTOM}/namespaces/{ns}/pods/no-such-pod/DCGM_FI_DEV_GPU_TEMP")
    assert code == 404


async def test_unbatchable_external_metric_is_queried_per_request_like_upstream(
    served: Any, prom: Process
) -> None:
    client, _, _ = served
    query = 'sum without (namespace) (rightsizer_queue_in_flight{queue="chat-requests",namespace="llm"})'
    (code, body), expected = await settled(
        prom,
        query,
        lambda: client_get(
            client,
            f"{EXTERNAL}/namespaces/llm/queue_in_flight_per_request?labelSelector=queue%3Dchat-requests",
        ),
    )
    assert code == 200, body
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [
        (s["metric"], format_quantity(float(s["value"][1]))) for s in expected
    ]
    assert "namespace" not in body["items"][0]["metricLabels"]


async def test_prefixed_selector_keys_are_sanitised_in_per_request_queries(served: Any) -> None:
    """``app.kubernetes.io/name`` is matched as ``app_kubernetes_io_name``, as the batched path does:
    no series carries it, so nothing matches (external: no items, KEDA: 404), never a 400 from
    Prometheus served as 503."""
    client, cache, _ = served
    selector = "labelSelector=app.kubernetes.io%2Fname%3Dchat"
    code, body = await client_get(client, f"{EXTERNAL}/namespaces/llm/queue_in_flight_per_request?{selector}")
    assert code == 200 and body["items"] == [], body
    with pytest.raises(Failure) as refused:  # what KEDA's gRPC and metrics-api endpoints are given
        await cache.source.keda_series("queue_in_flight_per_request", "llm", "app.kubernetes.io/name=chat")
    assert refused.value.code == 404 and "app.kubernetes.io/name=chat" in refused.value.message
    metric = "metricLabelSelector=app.kubernetes.io%2Fname%3Dchat"
    code, body = await client_get(client, f"{CUSTOM}/namespaces/llm/pods/*/DCGM_FI_DEV_GPU_TEMP?{metric}")
    assert code == 200 and body["items"] == [], body


async def test_one_query_per_rule_per_refresh_and_unbatchable_named(served: Any) -> None:
    client, cache, metrics = served
    before = generate_latest(metrics.registry).decode()
    for _ in range(20):
        await client_get(client, f"{CUSTOM}/namespaces/search/pods/*/gpu_GPU_utilization")
        await client_get(client, f"{EXTERNAL}/namespaces/prod/rightsizer_queue_depth")
    for _ in range(3):
        await client_get(client, f"{CUSTOM}/namespaces/search/pods/*/DCGM_FI_DEV_GPU_TEMP")
    await cache.refresh_once()
    text = generate_latest(metrics.registry).decode()

    def count(text: str, source: str) -> float:
        line = f'rightsizer_adapter_upstream_queries_total{{outcome="success",source="{source}"}}'
        return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)), 0.0)

    # rules[0] exposes two metrics from one query; rules[3] and externalRules[2] are per request
    batched_rules = ["rules[0]", "rules[1]", "rules[2]", "externalRules[0]", "externalRules[1]"]
    assert count(text, "prometheus") - count(before, "prometheus") == len(batched_rules)
    assert count(text, "prometheus_per_request") - count(before, "prometheus_per_request") == 3
    assert count(text, "prometheus_series") == 6  # one per distinct seriesQuery, relist not yet due
    for rule, metric in (
        ("rules[3]", "DCGM_FI_DEV_GPU_TEMP"),
        ("externalRules[2]", "queue_in_flight_per_request"),
    ):
        assert f'rightsizer_adapter_promadapter_per_request{{metric="{metric}",rule="{rule}"}} 1.0' in text


def test_fixture_is_unchanged_prometheus_adapter_format() -> None:
    assert shutil.which("prometheus")  # the Prometheus these tests run against
    assert schema.load(str(FILE)).has_resource_rules


def run_adapter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_check_config_prints_each_rules_metric_names(prom: Process) -> None:
    done = run_adapter(
        "--check-config", "--prometheus-adapter-config", str(FILE), "--prometheus-url", prom.url
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{FILE}: OK (7 rules)"
    assert "resourceRules: not served (the resource metrics API is out of scope)" in lines
    assert "rules[0] (custom.metrics.k8s.io): gpu_GPU_utilization, gpu_MEM_COPY_utilization" in lines
    assert "rules[2] (custom.metrics.k8s.io): TOTAL_ENERGY" in lines
    assert "rules[3] (custom.metrics.k8s.io): DCGM_FI_DEV_GPU_TEMP" in lines
    assert any(line.startswith("  DCGM_FI_DEV_GPU_TEMP: queried per request: uses topk") for line in lines)
    assert "externalRules[1] (external.metrics.k8s.io): any_namespace_queue_in_flight" in lines
    assert lines[-1] == (
        "upstream queries per refresh: 5 (one per rule with batched metrics); 2 metrics queried per request"
    )


def test_check_config_says_when_prometheus_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run_adapter("--check-config", "--prometheus-adapter-config", str(FILE), "--prometheus-url", url)
    assert done.returncode == 1
    assert f"cannot list series from {url}" in done.stdout and "Traceback" not in done.stderr


def test_the_adapter_process_serves_the_file_unchanged(prom: Process) -> None:
    with adapter(
        ["--insecure-http", "--prometheus-adapter-config", str(FILE), "--prometheus-url", prom.url]
    ) as served:
        assert "resourceRules (the resource metrics API, metrics.k8s.io) are not served" in served.log()
        code, body = get_json(served.url + f"{EXTERNAL}/namespaces/prod/rightsizer_queue_depth")
        assert code == 200 and [i["value"] for i in body["items"]] == ["7"]
        code, body = get_json(served.url + f"{CUSTOM}/namespaces/search/pods/*/gpu_GPU_utilization")
        assert code == 200 and body["items"]


def test_a_malformed_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "adapter.yaml"
    bad.write_text("rules:\n- seriesQuery: x\n  metricsQuery: y\n  name: {matches: '(a)(b)'}\n")
    done = run_adapter("--prometheus-adapter-config", str(bad), "--prometheus-url", "http://127.0.0.1:1")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rightsizer-adapter: {bad}: rules[0].name.as: must be given when name.matches has more than "
        "one capture group"
    ]
    bad.write_text("rules: [\n")
    done = run_adapter(
        "--check-config", "--prometheus-adapter-config", str(bad), "--prometheus-url", "http://x"
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "not valid YAML" in done.stderr
