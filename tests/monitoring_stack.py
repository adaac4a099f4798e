"""A Prometheus configured by deploy/prometheus/scrape-configs.yaml, with deploy/monitoring's rules,
scraping the simulated exporter (the default fleet plus one injected XID, with real queue sources)
and the adapter: what the dashboards, rules and scrape configuration are tested against.

Only the discovery mechanism is swapped: Kubernetes endpoints discovery (which Debian's Prometheus
is built without) becomes file discovery of targets carrying the same ``__meta_kubernetes_*``
labels, so the job's own relabelling decides what is scraped, as it would in a cluster. The
scrape interval is 1 s instead of 15 s so the tests do not wait.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from adapter_support import ANONYMOUS, get, start_adapter
from queue_fakes import TEXT, VllmMetrics
from queue_servers import FakeHttpServer
from servers import ROOT, Process, exporter, prometheus, redis_server, wait_for

SCRAPE_CONFIGS = ROOT / "deploy" / "prometheus" / "scrape-configs.yaml"
PROMETHEUS_RULE = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
# (address, service, port name): a target as Kubernetes endpoints discovery would present it.
Endpoint = tuple[str, str, str]


def endpoint_labels(service: str, port: str) -> dict[str, str]:
    return {"__meta_kubernetes_namespace": "rightsizer", "__meta_kubernetes_service_name": service,
            "__meta_kubernetes_endpoint_port_name": port}


def discovery(endpoints: Sequence[Endpoint]) -> str:
    """A file-discovery document listing ``endpoints``."""
    return json.dumps([{"targets": [address], "labels": endpoint_labels(service, port)}
                       for address, service, port in endpoints])


def scrape_jobs(endpoints: Sequence[Endpoint], workdir: Path) -> str:
    """deploy/prometheus's jobs, discovering ``endpoints`` from files, as scrape_configs items."""
    jobs = yaml.safe_load(SCRAPE_CONFIGS.read_text())["scrape_configs"]
    targets = workdir / "endpoints.json"
    targets.write_text(discovery(endpoints))
    for job in jobs:
        assert job.pop("kubernetes_sd_configs"), job["job_name"]
        job["file_sd_configs"] = [{"files": [str(targets)], "refresh_interval": "1s"}]
        job["scrape_interval"] = job["scrape_timeout"] = "1s"
        if job["job_name"] == "rightsizer-adapter":
            # no service-account token outside a cluster; the adapter here serves anonymous requests
            assert job.pop("authorization")["credentials_file"].endswith("serviceaccount/token")
    return yaml.safe_dump(jobs, sort_keys=False)


def rules_file(workdir: Path) -> Path:
    path = workdir / "rightsizer.rules.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"], sort_keys=False))
    return path


@contextlib.contextmanager
def plain_prometheus(endpoints: Sequence[Endpoint], with_rules: bool = False) -> Iterator[Process]:
    """Prometheus with deploy/prometheus's jobs; ``.extra["discovery"]`` is the file listing the
    endpoints (rewrite it to change them)."""
    with tempfile.TemporaryDirectory(prefix="scrape-configs-") as tmp:
        workdir = Path(tmp)
        extra = "\n".join("  " + line for line in scrape_jobs(endpoints, workdir).splitlines())
        if with_rules:
            extra += f"\nrule_files:\n  - {json.dumps(str(rules_file(workdir)))}\n"
        with prometheus({}, scrape_interval="1s", extra_config=extra) as prom:
            prom.extra["discovery"] = workdir / "endpoints.json"
            yield prom


@dataclass
class Stack:
    prometheus: Process
    exporter: Process
    adapter: Process


def scenario_with_an_xid(workdir: Path) -> Path:
    """The built-in default fleet, with one XID on one GPU, so the XID panels have data."""
    scenario = yaml.safe_load((ROOT / "exporter" / "scenarios" / "default.yaml").read_text())
    scenario["gpus"][2]["xids"] = [{"after_seconds": 1, "xid": 13}]
    # A two-socket host with PSI, one GPU's container pinned to the other socket: the balance and
    # pressure panels have data (stalls under the data_loading mark: no verdict changes).
    scenario["host_pressure"] = {"memory_some": 0.01, "io_some": 0.04, "io_full": 0.02}
    scenario["numa_nodes"] = ["0-31", "32-63"]
    scenario["gpus"][0]["numa_node"] = 1
    scenario["gpus"][0]["pod"]["cpuset"] = "0-7"
    path = workdir / "default-with-xid.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def exporter_config(redis_url: str, vllm_url: str, workdir: Path) -> Path:
    """Two real queue sources beside the simulated fleet: a Redis list and a vLLM server."""
    config = {"queues": [
        {"name": "jobs", "kind": "redis", "url": redis_url, "key": "jobs",
         "labels": {"namespace": "demo", "workload": "worker"}},
        {"name": "chat", "kind": "vllm", "url": vllm_url,
         "labels": {"namespace": "llm", "workload": "chat-8b"}},
    ]}
    path = workdir / "exporter.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def redis_push(port: int, key: str, items: int) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    client.rpush(key, *range(items))
    client.close()


def exercise_adapter(adapter: Process) -> None:
    """One request of each kind, so the adapter's request and gRPC series exist."""
    import grpc

    from adapter.keda import externalscaler_pb2 as pb
    from adapter.keda import externalscaler_pb2_grpc as pb_grpc

    for path in ("/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/rightsizer_queue_depth",
                 "/keda/v1/metrics/rightsizer_queue_depth?namespace=demo&labelSelector=queue%3Djobs"):
        # 404 until Prometheus has scraped the queue and the adapter refreshed: not yet known, not 0
        wait_for(lambda path=path: get(adapter.url + path)[0] == 200, 60, what=f"{path} to answer 200")
    metadata = {"metric": "rightsizer_queue_depth", "labelSelector": "queue=jobs"}
    ref = pb.ScaledObjectRef(name="worker", namespace="demo", scalerMetadata=metadata)
    with grpc.insecure_channel(adapter.extra["grpc"]) as channel:
        pb_grpc.ExternalScalerStub(channel).GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref, metricName="rightsizer_queue_depth"), timeout=5)


@contextlib.contextmanager
def monitoring_stack() -> Iterator[Stack]:
    vllm = VllmMetrics()
    vllm.set([4.0], [2.0])
    with tempfile.TemporaryDirectory(prefix="monitoring-stack-") as tmp, redis_server() as redis, \
            FakeHttpServer() as http:
        workdir = Path(tmp)
        http.route("/metrics", body=vllm.render, content_type=TEXT)
        redis_push(redis.extra["port"], "jobs", 12)
        config = exporter_config(redis.url, http.url("/metrics"), workdir)
        with exporter(["--simulate", str(scenario_with_an_xid(workdir)), "--config", str(config)]) as exp:
            exporter_address = exp.url.removeprefix("http://")
            # The adapter's address is only known once it runs, after Prometheus: it is added to
            # the discovery file then (file discovery picks changes up by itself).
            exporter_endpoint = (exporter_address, "rightsizer-exporter", "metrics")
            with plain_prometheus([exporter_endpoint], with_rules=True) as prom:
                adapter = start_adapter(["--prometheus-url", prom.url, "--refresh-interval", "1",
                                         "--grpc-listen", "127.0.0.1:0"], ready=False, env=ANONYMOUS)
                try:
                    adapter_address = adapter.url.removeprefix("https://")
                    adapter_endpoint = (adapter_address, "rightsizer-adapter", "https")
                    prom.extra["discovery"].write_text(discovery([exporter_endpoint, adapter_endpoint]))
                    yield Stack(prom, exp, adapter)
                finally:
                    adapter.stop()
