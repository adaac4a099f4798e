"""The adapter in Prometheus mode answers alike from Prometheus and from VictoriaMetrics.

Both engines hold the same ten minutes of the exporter's history for the scenario fleets (ending
now, so instant queries see it) plus the queue the documented rule reads. One adapter runs
against each engine, with every built-in rule and the rules docs/adapter.md shows, and each (rule,
namespace, selector) is asked through the external metrics API and KEDA's metrics-api JSON of both: the
answers must be identical, and every rule must have answered something non-zero somewhere.
A second test feeds VictoriaMetrics by scraping a live exporter with deploy/prometheus's own
scrape jobs, and the adapter on it follows a Redis queue as it grows and drains.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from adapter_support import ANONYMOUS, adapter, get_json
from monitoring_stack import scrape_jobs
from report_history import ENGINES, engines_with_history
from servers import ROOT, Process, exporter, prom_query, redis_server, require_binary, wait_for
from victoria_metrics import victoria_metrics

from adapter.rules import BUILTIN_RULES

SCENARIOS = [Path(__file__).parent / "scenarios" / "mixed_inference_fleet.yaml"]
EXT = "/apis/external.metrics.k8s.io/v1beta1"


def readme_rules() -> list[dict[str, Any]]:
    """The rules of the adapter's configuration example in docs/adapter.md."""
    text = (ROOT / "docs" / "adapter.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    rules = [r for b in blocks if isinstance(b, dict) and "rules" in b for r in b["rules"]]
    assert rules and all("query" in r for r in rules), "docs/adapter.md shows no adapter rule"
    return rules


def extra_series(end: float) -> dict[str, list[str]]:
    """The queue the documented rule reads (``queue="chat"``, 7 items), a pod on an idle GPU with
    the per-pod families the history does not render (pod memory, fit score), and chat's SLO."""
    queue = 'queue="chat",kind="vllm",namespace="llm",workload="chat",instance="node-a:9400"'
    slo = 'namespace="llm",workload="chat",instance="node-a:9400"'
    gpu = ('gpu="0",UUID="GPU-extra",Hostname="node-a",model_name="NVIDIA L4",namespace="batch",'
           'pod="nightly-7f9c8d6b5-x2x4z",container="main",instance="node-a:9400"')  # fmt: skip
    samples = {
        "rightsizer_queue_depth": (queue, 7),
        "rightsizer_queue_source_up": (queue, 1),
        "rightsizer_pod_gpu_memory_used_bytes": (gpu, 3221225472),
        "rightsizer_gpu_fit_score": (gpu, 0.25),
        "rightsizer_gpu_verdict": (gpu + ',verdict="idle"', 1),
        # a workload's SLO over the scaling window (the history's fleet declares none)
        "rightsizer_workload_slo_scaling_up": (slo, 1),
        "rightsizer_workload_slo_scaling_latency_ratio": (slo, 0.8),
        "rightsizer_workload_slo_scaling_attainment_ratio": (slo + ',slo="ttft"', 0.97),
    }
    times = [end - k * 15 for k in range(40, -1, -1)]
    return {n: [f"{n}{{{labels}}} {value} {t:.3f}" for t in times] for n, (labels, value) in samples.items()}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Process], list[str]]]:
    config = tmp_path_factory.mktemp("adapter") / "adapter.yaml"
    # the history ends when it is written: its last samples count as current for the whole test
    config.write_text(yaml.safe_dump({"rules": readme_rules(), "prometheus": {"stale_after_seconds": 3600}}))
    with engines_with_history(SCENARIOS, 600, 15, extra=extra_series(time.time())) as (urls, _):
        series = prom_query(urls["prometheus"], 'group by (namespace) ({__name__=~"rightsizer_.+"})')
        namespaces = [*sorted({s["metric"].get("namespace", "") for s in series} - {""}), "default"]
        assert len(namespaces) >= 3, namespaces
        args = ["--config", str(config), "--refresh-interval", "1"]
        with (
            adapter(["--prometheus-url", urls["prometheus"], *args], env=ANONYMOUS) as on_prometheus,
            adapter(["--prometheus-url", urls["victoria-metrics"], *args], env=ANONYMOUS) as on_victoria,
        ):
            yield {"prometheus": on_prometheus, "victoria-metrics": on_victoria}, namespaces


def rule_names() -> list[str]:
    return [r.name for r in BUILTIN_RULES] + [r["name"] for r in readme_rules()]


def answers(p: Process, rule: str, namespace: str, selector: str) -> dict[str, Any]:
    chosen = {"labelSelector": selector} if selector else {}
    code, external = get_json(f"{p.url}{EXT}/namespaces/{namespace}/{rule}?{urllib.parse.urlencode(chosen)}")
    items = sorted((sorted(i["metricLabels"].items()), i["value"]) for i in external.get("items", []))
    keda_query = urllib.parse.urlencode({"namespace": namespace, **chosen})
    keda_code, keda = get_json(f"{p.url}/keda/v1/metrics/{rule}?{keda_query}")
    keda.pop("timestamp", None)  # when each adapter last refreshed
    return {"external": (code, items if code == 200 else external), "keda": (keda_code, keda)}


@pytest.mark.parametrize("rule", rule_names())
def test_every_rule_answers_alike_on_both_engines(adapters, rule: str) -> None:
    processes, namespaces = adapters
    selectors = ["", "queue=chat", "verdict=idle", "workload=summarizer"]
    nonzero = 0
    for namespace in namespaces:
        for selector in selectors:
            got = {engine: answers(processes[engine], rule, namespace, selector) for engine in ENGINES}
            # KEDA's value is a raw float: the engines may compute an avg() to a different last bit.
            prom = got["prometheus"]["keda"][1].pop("value", None)
            vm = got["victoria-metrics"]["keda"][1].pop("value", None)
            assert got["prometheus"] == got["victoria-metrics"], (namespace, selector, got)
            assert prom == (vm if vm is None else pytest.approx(vm, rel=1e-9)), (namespace, selector, prom)
            code, items = got["prometheus"]["external"]
            if code == 200:
                nonzero += sum(1 for _, value in items if value != "0")
    assert nonzero, f"{rule}: nothing but zeros or errors, so nothing was compared"


def test_victoria_metrics_takes_the_scrape_configuration_as_it_is() -> None:
    scrape_configs = ROOT / "deploy" / "prometheus" / "scrape-configs.yaml"
    cmd = [require_binary("victoria-metrics"), f"-promscrape.config={scrape_configs}"]
    done = subprocess.run([*cmd, "-promscrape.config.dryRun"], capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "-promscrape.config is ok" in said, said[-2000:]


def test_victoria_metrics_scraping_the_exporter_feeds_the_adapter(tmp_path: Path) -> None:
    with redis_server() as server:
        queue = redis.Redis(port=server.extra["port"], socket_timeout=5)
        config = tmp_path / "exporter.yaml"
        url = f"redis://127.0.0.1:{server.extra['port']}/0"
        jobs = {"name": "jobs", "kind": "redis", "url": url, "key": "jobs",
                "labels": {"namespace": "prod", "workload": "worker"}}  # fmt: skip
        config.write_text(yaml.safe_dump({"queues": [jobs]}))
        with exporter(["--simulate", "--config", str(config)]) as sim:
            endpoint = (sim.url.removeprefix("http://"), "rightsizer-exporter", "metrics")
            # VictoriaMetrics reads file discovery every -promscrape.fileSDCheckInterval, without
            # Prometheus's per-file refresh_interval.
            jobs = scrape_jobs([endpoint], tmp_path).replace("refresh_interval: 1s", "")
            assert "refresh_interval" not in jobs
            with victoria_metrics(jobs, ["-promscrape.fileSDCheckInterval=1s"]) as vm:
                wait_for(lambda: prom_query(vm.url, "rightsizer_queue_depth"), 60, what="the first scrape")
                with adapter(["--prometheus-url", vm.url, "--refresh-interval", "0.5"], env=ANONYMOUS) as p:
                    depth = f"{p.url}{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"

                    def value() -> str:
                        code, body = get_json(depth)
                        assert code == 200, body
                        return str(body["items"][0]["value"])

                    wait_for(lambda: value() == "0", 30, what="the empty queue as 0")
                    queue.rpush("jobs", *range(23))
                    wait_for(lambda: value() == "23", 30, what="23 items")
                    queue.delete("jobs")
                    wait_for(lambda: value() == "0", 30, what="the drained queue as 0")
        queue.close()
