"""An outage or a typo never reads as an empty queue: the adapter in direct mode, all real processes.

redis-server, the exporter and the adapter run as processes on loopback; KEDA's side is the real
gRPC client built from the project's proto. A queue up and empty answers 0 everywhere; a queue
whose source is down (a closed port, redis-server stopped mid-run, the exporter gone) is 503 /
UNAVAILABLE naming the queue and why; a selector matching no queue is 404 / NOT_FOUND.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from adapter_support import ANONYMOUS, adapter, get
from outage_rig import (
    EXT,
    METRIC,
    Answers,
    assert_empty,
    assert_not_found,
    assert_unavailable,
    queue_exporter,
    scaled_object,
)
from servers import Process, exporter, redis_server, wait_for

from adapter.keda import externalscaler_pb2_grpc as pb_grpc

Rig = tuple[Answers, Process, Process]


@contextlib.contextmanager
def start_rig(tmp_path: Path, others: tuple[str, ...] = ()) -> Iterator[Rig]:
    """(answers, redis-server, exporter) with the adapter scraping the exporter (and ``others``)."""
    config = tmp_path / "adapter.yaml"
    config.write_text("direct:\n  stale_after_seconds: 1\n")
    with (
        redis_server() as rds,
        queue_exporter(tmp_path, rds.extra["port"]) as exp,
        adapter(
            [
                *(arg for url in (exp.url, *others) for arg in ("--exporter", url)),
                *("--config", str(config), "--grpc-listen", "127.0.0.1:0"),
            ],
            env=ANONYMOUS,
        ) as p,
        grpc.insecure_channel(p.extra["grpc"]) as channel,
    ):
        answers = Answers(p, channel)
        wait_for(lambda: answers.external("queue=jobs")[0] == 200, 30, what="the jobs queue in the adapter")
        yield answers, rds, exp


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A rig the tests below only read from."""
    with start_rig(tmp_path_factory.mktemp("outage")) as rig:
        yield rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """A rig of the test's own, to break."""
    with start_rig(tmp_path) as rig:
        yield rig


def test_up_and_empty_is_zero_down_is_unavailable_typo_is_not_found(shared: Rig) -> None:
    answers, _, _ = shared
    assert_empty(answers.everywhere("queue=jobs"))
    assert_unavailable(answers.everywhere("queue=dead"), "dead", "source down")
    assert_unavailable(answers.everywhere("workload in (worker,dead)"), "dead", "source down")
    assert_not_found(answers.everywhere("queue=nosuch"))
    assert_not_found(answers.everywhere("queue=jobs,workload=typo"))
    code, body = answers.external("")  # the whole namespace holds a dead queue: no total either
    assert code == 503 and "'dead'" in body["message"]


def test_redis_stopped_mid_run(rig: Rig) -> None:
    answers, rds, _ = rig
    client = redis.Redis(port=rds.extra["port"], socket_timeout=5)
    client.rpush("jobs", *range(3))
    wait_for(lambda: answers.external("queue=jobs")[1]["items"][0]["value"] == "3", 30, what="depth 3")
    assert answers.is_active("queue=jobs").value is True
    client.close()
    rds.stop()
    wait_for(lambda: answers.external("queue=jobs")[0] == 503, 30, what="the stopped Redis to be seen")
    assert_unavailable(answers.everywhere("queue=jobs"), "jobs", "source down")
    assert_not_found(answers.everywhere("queue=nosuch"))


def test_the_only_exporter_gone_is_unavailable_not_empty(rig: Rig) -> None:
    answers, _, exp = rig
    exp.stop()
    wait_for(lambda: answers.external("queue=jobs")[0] == 503, 30, what="the dead exporter to be seen")
    seen = answers.everywhere("queue=jobs")
    assert seen["metrics_api"][0] == 503 and "no exporter is current" in seen["external"][1], seen
    assert seen["get_metrics"].code == seen["is_active"].code == "UNAVAILABLE", seen


def test_one_exporter_of_two_gone_makes_its_queues_stale(tmp_path: Path) -> None:
    with exporter(["--simulate"]) as other, start_rig(tmp_path, (other.url,)) as (answers, _, exp):
        exp.stop()
        wait_for(lambda: answers.external("queue=jobs")[0] == 503, 30, what="the dead exporter to be seen")
        seen = answers.everywhere("queue=jobs")
        assert_unavailable(seen, "jobs", "no current sample")
        assert f"exporter {exp.url}/metrics is not answering" in seen["external"][1]
        assert_not_found(answers.everywhere("queue=nosuch"))
        # the other exporter's simulated queue still answers its value
        code, body = answers.external("queue=summarizer-requests", namespace="llm")
        assert code == 200 and len(body["items"]) == 1, body


@pytest.mark.parametrize("target", ["1e308", "nan", "inf", "-inf", "-1", "0", "1e19"])
def test_keda_metric_spec_rejects_targets_out_of_range(shared: Rig, target: str) -> None:
    answers, _, _ = shared
    answer = answers.metric_spec(target)
    assert answer.code == "INVALID_ARGUMENT" and "scalerMetadata.target" in answer.value
    assert answers.metric_spec("1e18").code == "OK"
    assert "Traceback" not in answers.adapter.log()


@pytest.mark.parametrize("namespace", ["prod\n", "Prod", "-prod", "prod\nx"])
def test_namespace_must_match_in_full(shared: Rig, namespace: str) -> None:
    answers, _, _ = shared
    path = f"{EXT}/{urllib.parse.quote(namespace)}/{METRIC}?labelSelector=queue%3Djobs"  # prod%0A
    code, _, body = get(answers.adapter.url + path)
    assert code == 400 and b"not a valid namespace" in body, (namespace, body)
    code, _, body = get(
        f"{answers.adapter.url}/keda/v1/metrics/{METRIC}?namespace={urllib.parse.quote(namespace)}"
    )
    assert code == 400 and b"not a valid namespace" in body, (namespace, body)
    assert answers.get_metrics("queue=jobs", namespace).code == "INVALID_ARGUMENT"
    assert "Traceback" not in answers.adapter.log()


def test_stream_is_active_pushes_nothing_for_an_outage(rig: Rig) -> None:
    """Active, then Redis stopped and restarted with the queue still full: the outage is neither a
    fall nor a rise, so nothing is pushed; the next real rise (empty, then items) is pushed."""
    answers, rds, _ = rig
    port = rds.extra["port"]
    redis.Redis(port=port, socket_timeout=5).rpush("jobs", 1, 2, 3)
    wait_for(lambda: answers.external("queue=jobs")[1]["items"][0]["value"] == "3", 30, what="depth 3")
    stub = pb_grpc.ExternalScalerStub(answers.channel)
    stream = stub.StreamIsActive(scaled_object("queue=jobs", "prod", activationThreshold="0"))
    pushed: list[bool] = []
    reader = threading.Thread(target=lambda: pushed.extend(m.result for m in _until_cancelled(stream)))
    reader.start()
    try:
        wait_for(lambda: pushed == [True], 30, what="the first push (the queue is not empty)")
        rds.stop()
        wait_for(lambda: answers.external("queue=jobs")[0] == 503, 30, what="the stopped Redis to be seen")
        with redis_server(port) as again:
            client = redis.Redis(port=again.extra["port"], socket_timeout=5)
            client.rpush("jobs", 1, 2, 3)
            wait_for(lambda: answers.external("queue=jobs")[0] == 200, 30, what="Redis back, depth 3")
            client.delete("jobs")
            wait_for(lambda: answers.is_active("queue=jobs").value is False, 30, what="the queue empty")
            assert pushed == [True]  # neither the outage nor the recovery was pushed
            client.rpush("jobs", 1)
            wait_for(lambda: pushed == [True, True], 30, what="the push of the real rise")
            client.close()
    finally:
        stream.cancel()
        reader.join(10)


def _until_cancelled(stream: Any) -> Iterator[Any]:
    try:
        yield from stream
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.CANCELLED:
            raise
