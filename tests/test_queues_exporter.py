"""End to end: the exporter as a subprocess on the simulated fleet, pointed at a real Redis list and a
vLLM-shaped endpoint. Its depth series follow the sources, a dead source is reported, and both
recover when their sources return; the queue families lint clean with promtool."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from latency_servers import scrape_series as scrape
from queue_fakes import VllmMetrics
from queue_servers import FakeHttpServer
from servers import Process, exporter, http_get, redis_server, require_binary, wait_for

from exporter.metrics import FAMILIES, FAMILIES_BY_NAME
from exporter.sources.queues.families import FAMILY_NAMES


def value(p: Process, family: str, queue: str) -> float | None:
    for (name, labels), v in scrape(p).items():
        if name == family and ("queue", queue) in labels:
            return v
    return None


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Process, Process, FakeHttpServer, VllmMetrics]]:
    vllm = VllmMetrics()
    vllm.set([4], [2])
    with redis_server() as rds, FakeHttpServer() as srv:
        srv.route("/metrics", body=vllm.render)
        redis.Redis(port=rds.extra["port"]).rpush("jobs", 1, 2, 3)
        config = tmp_path / "exporter.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "queues": [
                        {"name": "jobs", "kind": "redis", "url": rds.url, "key": "jobs", "backoff_max": 1},
                        {
                            "name": "chat",
                            "kind": "vllm",
                            "url": srv.url("/metrics"),
                            "backoff_max": 1,
                            "labels": {"namespace": "prod", "workload": "chat"},
                        },
                    ]
                }
            )
        )
        with exporter(["--simulate", "--interval", "0.2", "--config", str(config)]) as p:
            yield p, rds, srv, vllm


def test_depth_follows_the_sources_and_a_dead_source_is_reported_then_recovers(
    setup: tuple[Process, Process, FakeHttpServer, VllmMetrics],
) -> None:
    p, rds, srv, vllm = setup
    wait_for(lambda: value(p, "rightsizer_queue_depth", "jobs") == 3, 15, what="jobs depth 3")
    series = scrape(p)
    chat = (("kind", "vllm"), ("namespace", "prod"), ("queue", "chat"), ("workload", "chat"))
    assert series[("rightsizer_queue_depth", chat)] == 4
    assert series[("rightsizer_queue_in_flight", chat)] == 2
    assert series[("rightsizer_queue_source_up", (("kind", "redis"), ("queue", "jobs")))] == 1
    assert series[("rightsizer_collector_success", (("collector", "queues"),))] == 1

    status, _, body = http_get(p.url + "/api/v1/queues")
    assert status == 200
    queues = {q["name"]: q for q in json.loads(body)["queues"]}
    assert queues["jobs"]["depth"] == 3 and queues["jobs"]["up"] is True
    assert queues["chat"]["labels"] == {"namespace": "prod", "workload": "chat"}

    redis.Redis(port=rds.extra["port"]).rpush("jobs", 4, 5)
    vllm.set([9], [3])
    wait_for(
        lambda: (
            value(p, "rightsizer_queue_depth", "jobs") == 5
            and value(p, "rightsizer_queue_depth", "chat") == 9
        ),
        10,
        what="depths to follow",
    )

    port = rds.extra["port"]
    rds.stop()
    good = srv.routes["/metrics"]
    srv.route("/metrics", status=503, body=b"overloaded")
    wait_for(
        lambda: (
            value(p, "rightsizer_queue_source_up", "jobs") == 0
            and value(p, "rightsizer_queue_source_up", "chat") == 0
        ),
        15,
        what="both sources down",
    )
    assert value(p, "rightsizer_queue_depth", "jobs") is None
    assert value(p, "rightsizer_queue_depth", "chat") is None
    assert value(p, "rightsizer_queue_last_success_timestamp_seconds", "jobs") is not None
    assert scrape(p)[("rightsizer_collector_success", (("collector", "queues"),))] == 0
    queues = {q["name"]: q for q in json.loads(http_get(p.url + "/api/v1/queues")[2])["queues"]}
    assert queues["chat"]["error"] == "HTTP 503 Service Unavailable"
    assert queues["jobs"]["error"].startswith("Redis connection failed")
    # logged when the reason changes, not on every poll: the 503 once; Redis once when the open
    # connection breaks, once more when connecting is refused
    downs = [line for line in p.log().splitlines() if "queue source down" in line]
    assert len([line for line in downs if "queue=chat" in line]) == 1, downs
    jobs = [line.split("reason=")[1] for line in downs if "queue=jobs" in line]
    assert 1 <= len(jobs) <= 2 and len(set(jobs)) == len(jobs), downs

    with redis_server(port) as again:
        redis.Redis(port=again.extra["port"]).rpush("jobs", *range(6))
        srv.routes["/metrics"] = good
        wait_for(
            lambda: (
                value(p, "rightsizer_queue_depth", "jobs") == 6
                and value(p, "rightsizer_queue_depth", "chat") == 9
            ),
            20,
            what="recovery",
        )
    assert "queue source back" in p.log()
    assert "Traceback" not in p.log()


def test_the_extension_fills_exactly_its_families_in_the_metric_table() -> None:
    for name in FAMILY_NAMES:
        assert FAMILIES_BY_NAME[name].scope == "extension"
    assert {f.name for f in FAMILIES if f.name.startswith("rightsizer_queue_")} == set(FAMILY_NAMES)


def test_queue_families_lint_clean_with_promtool(
    setup: tuple[Process, Process, FakeHttpServer, VllmMetrics],
) -> None:
    p = setup[0]
    wait_for(lambda: value(p, "rightsizer_queue_in_flight", "chat") == 2, 15, what="queue series")
    text = http_get(p.url + "/metrics")[2].decode()
    blocks = [b for b in text.split("# HELP ") if b.startswith("rightsizer_queue_")]
    assert len(blocks) == len(FAMILY_NAMES)
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input="".join("# HELP " + b for b in blocks),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
