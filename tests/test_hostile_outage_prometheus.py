"""An outage or a typo never reads as an empty queue: the adapter in Prometheus mode.

A real Prometheus scrapes the real exporter (which polls a real redis-server and a closed port);
the adapter reads Prometheus, and KEDA's side is the real gRPC client. The adapter tells queues
apart with ``rightsizer_queue_source_up`` (down: 503 / UNAVAILABLE) and with staleness (the
exporter gone: Prometheus has no current sample, 503 / UNAVAILABLE, not 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from adapter_support import ANONYMOUS, adapter
from outage_rig import Answers, assert_empty, assert_not_found, assert_unavailable, queue_exporter
from servers import Process, prom_query, prometheus, redis_server, wait_for

Rig = tuple[Answers, Process, Process]


@contextlib.contextmanager
def start_rig(tmp_path: Path) -> Iterator[Rig]:
    """(answers, redis-server, exporter): Prometheus scrapes the exporter every second."""
    with (
        redis_server() as rds,
        queue_exporter(tmp_path, rds.extra["port"]) as exp,
        prometheus({"rightsizer-exporter": [exp.url.removeprefix("http://")]}) as prom,
    ):
        wait_for(lambda: len(prom_query(prom.url, "rightsizer_queue_source_up")) >= 2, 30, what="a scrape")
        args = ["--prometheus-url", prom.url, "--refresh-interval", "0.5", "--grpc-listen", "127.0.0.1:0"]
        with adapter(args, env=ANONYMOUS) as p, grpc.insecure_channel(p.extra["grpc"]) as channel:
            yield Answers(p, channel), rds, exp


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, prometheus_version: object) -> Iterator[Rig]:
    """One rig per Prometheus version: 2.42 and, with --prometheus3, 3.5 (tests/prometheus_versions.py)."""
    with start_rig(tmp_path_factory.mktemp("outage-prometheus")) as rig:
        yield rig


def test_up_and_empty_is_zero_down_is_unavailable_typo_is_not_found(shared: Rig) -> None:
    answers, _, _ = shared
    wait_for(lambda: answers.external("queue=jobs")[0] == 200, 30, what="the jobs queue in the adapter")
    assert_empty(answers.everywhere("queue=jobs"))
    assert_unavailable(answers.everywhere("queue=dead"), "dead", "source down")
    assert_unavailable(answers.everywhere("workload in (worker,dead)"), "dead", "source down")
    assert_not_found(answers.everywhere("queue=nosuch"))
    assert_not_found(answers.everywhere("queue=jobs,workload=typo"))


@pytest.mark.usefixtures("prometheus_version")  # staleness on 2.42 and 3.5
def test_redis_stopped_then_exporter_gone(tmp_path: Path) -> None:
    with start_rig(tmp_path) as (answers, rds, exp):
        wait_for(lambda: answers.external("queue=jobs")[0] == 200, 30, what="the jobs queue in the adapter")
        rds.stop()
        wait_for(lambda: answers.external("queue=jobs")[0] == 503, 30, what="the stopped Redis to be seen")
        assert_unavailable(answers.everywhere("queue=jobs"), "jobs", "source down")
        exp.stop()  # Prometheus's next scrape fails and marks every series of the exporter stale
        wait_for(
            lambda: "no current sample" in answers.external("queue=jobs")[1].get("message", ""),
            30,
            what="the exporter's series to go stale",
        )
        assert_unavailable(answers.everywhere("queue=jobs"), "jobs", "no current sample")
        assert_unavailable(answers.everywhere("queue=dead"), "dead", "no current sample")
        assert_not_found(answers.everywhere("queue=nosuch"))
