"""End to end: Redis queue → exporter (simulated fleet) → Prometheus or nothing → adapter → HPA's maths.

Everything is real and runs as a separate process: redis-server, the exporter, Prometheus and
the adapter (HTTPS with its self-signed certificate). HPA's External AverageValue formula of
PROTOCOLS §5 is applied to the adapter's answers as queue depth rises and falls.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from adapter_support import ANONYMOUS, adapter, get, get_json, hpa_desired_replicas
from servers import Process, exporter, prom_query, prometheus, redis_server, require_binary, wait_for

EXT = "/apis/external.metrics.k8s.io/v1beta1"
JOBS = f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
TARGET = 5.0  # HPA: External metric, AverageValue 5 items per replica


@pytest.fixture(scope="module")
def queue() -> Iterator[redis.Redis]:
    with redis_server() as server:
        client = redis.Redis(port=server.extra["port"], socket_timeout=5)
        yield client
        client.close()


@pytest.fixture(scope="module")
def sim(queue: redis.Redis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    port = queue.connection_pool.connection_kwargs["port"]
    config = tmp_path_factory.mktemp("exporter") / "exporter.yaml"
    config.write_text(
        "queues:\n  - name: jobs\n    kind: redis\n"
        f"    url: redis://127.0.0.1:{port}/0\n    key: jobs\n"
        "    labels: {namespace: prod, workload: worker}\n"
    )
    with exporter(["--simulate", "--config", str(config)]) as p:
        yield p


@pytest.fixture(scope="module")
def prom(sim: Process) -> Iterator[Process]:
    with prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as p:
        wait_for(
            lambda: prom_query(p.url, "rightsizer_queue_depth"), 30, what="Prometheus to scrape the queue"
        )
        yield p


def desired(url: str) -> int:
    code, body = get_json(url + JOBS)
    assert code == 200, body
    return hpa_desired_replicas(body["items"], TARGET)


def follow_the_queue(url: str, queue: redis.Redis) -> None:
    queue.delete("jobs")
    wait_for(lambda: desired(url) == 0, 30, what="an empty queue to read as value 0")
    queue.rpush("jobs", *range(23))
    wait_for(lambda: desired(url) == 5, 30, what="23 items to ask for ceil(23/5) = 5 replicas")
    queue.rpush("jobs", *range(30))
    wait_for(lambda: desired(url) == 11, 30, what="53 items to ask for 11 replicas")
    queue.ltrim("jobs", 0, 5)
    wait_for(lambda: desired(url) == 2, 30, what="6 items to ask for 2 replicas")
    queue.delete("jobs")
    wait_for(lambda: desired(url) == 0, 30, what="the drained queue to ask for 0")


def test_prometheus_chain_follows_the_queue(prom: Process, queue: redis.Redis) -> None:
    with adapter(["--prometheus-url", prom.url, "--refresh-interval", "0.5"], env=ANONYMOUS) as p:
        follow_the_queue(p.url, queue)
        code, body = get_json(p.url + f"{EXT}/namespaces/llm/rightsizer_gpu_utilization_ratio")
        assert code == 200 and body["items"], body  # the default fleet's GPUs in llm, all current
        assert all(float(i["value"].rstrip("m")) >= 0 for i in body["items"])


def test_direct_chain_follows_the_queue(sim: Process, queue: redis.Redis) -> None:
    with adapter(["--exporter", sim.url], env=ANONYMOUS) as p:
        follow_the_queue(p.url, queue)


def test_redis_growth_reaches_the_adapter_in_direct_mode(sim: Process, queue: redis.Redis) -> None:
    """The 2 s freshness figure is measured by bench/adapter.py; here the value must simply arrive."""
    with adapter(["--exporter", sim.url], env=ANONYMOUS) as p:
        queue.delete("jobs")
        wait_for(lambda: get_json(p.url + JOBS)[1]["items"][0]["value"] == "0", 30, what="empty queue")
        queue.rpush("jobs", *range(7))
        wait_for(
            lambda: get_json(p.url + JOBS)[1]["items"][0]["value"] == "7", 30, what="7 items in the adapter"
        )
        queue.delete("jobs")


def test_prometheus_killed_then_back(prom: Process, sim: Process) -> None:
    with adapter(["--prometheus-url", prom.url, "--refresh-interval", "0.5"], env=ANONYMOUS) as p:
        assert get(p.url + JOBS)[0] == 200
        prom.proc.kill()
        prom.proc.wait(10)

        def unavailable() -> bool:
            code, _, body = get(p.url + JOBS)
            return code == 503 and json.loads(body)["reason"] == "ServiceUnavailable"

        wait_for(unavailable, 30, what="503 ServiceUnavailable while Prometheus is down")
        code, _, body = get(p.url + JOBS)
        assert code == 503 and "unreachable" in json.loads(body)["message"]
        assert get(p.url + EXT)[0] == 200 and get(p.url + "/apis")[0] == 200  # discovery still answers
        assert get(p.url + "/healthz")[0] == 200
        restarted = restart_prometheus(prom)
        try:
            wait_for(lambda: get(p.url + JOBS)[0] == 200, 60, what="values again once Prometheus is back")
        finally:
            restarted.terminate()
            restarted.wait(10)


def restart_prometheus(prom: Process) -> subprocess.Popen[bytes]:
    """Start Prometheus again on the same address with the same configuration and data."""
    workdir: Path = prom.extra["workdir"]
    address = prom.url.removeprefix("http://")
    return subprocess.Popen(
        [
            require_binary("prometheus"),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
