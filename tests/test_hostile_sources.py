"""Hostile sources cannot take the exporter past its manifest's memory limit (192Mi).

The real exporter (simulated fleet) reads real HTTP servers answering what a hostile or broken
inference server could send (hundreds of thousands of series, a label value of megabytes, JSON
megabytes wide or nested 100,000 deep, a negative depth), a real Redis whose stream has 150,000
consumer groups, a fake Redis announcing a gigabyte answer, and the fake kubelet (real pod-resources
gRPC) answering 120,000 pods. Each test measures the exporter's peak RSS over its whole run
(``hostile_runs.py``'s launcher) and checks the outcome: the source over a bound is down with its reason
(``rightsizer_queue_source_up`` 0, or the ``pods`` collector 0), one log line, never published as a
smaller number, and every other source and the GPUs keep being served.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis
from hostile_runs import RSS_LIMIT
from hostile_sources import MIB, Running, gpu_pods, long_label, many_series, measured_exporter, settled
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_raw_answer
from queue_fakes import VllmMetrics, json_body
from queue_servers import FakeHttpServer
from resp_fake import HostileRedis
from servers import redis_server, wait_for

LIMIT = RSS_LIMIT["exporter"]
WAITING = "vllm:num_requests_waiting"
MAX_SERIES = "answer has more than 10000 series of the metrics read (max_series)"


def healthy_vllm(srv: FakeHttpServer) -> dict[str, object]:
    """A well-behaved vLLM beside the hostile one: 5 waiting, 2 running."""
    fake = VllmMetrics()
    fake.set([5], [2])
    srv.route("/good", body=fake.render())
    return {"name": "good", "kind": "vllm", "url": srv.url("/good")}


def still_served(running: Running) -> None:
    good = running.queue("good")
    assert (good["up"], good["depth"], good["in_flight"]) == (True, 5.0, 2.0)
    assert "DCGM_FI_DEV_GPU_UTIL{" in running.metrics()  # the GPUs too


def down_once(running: Running, name: str, reason: str, kind: str = "vllm") -> None:
    entry = settled(running, name)
    assert entry["up"] is False and entry["depth"] is None, entry
    assert reason == entry["error"], entry["error"]
    metrics = running.metrics()
    assert f'rightsizer_queue_source_up{{queue="{name}",kind="{kind}"}} 0\n' in metrics
    assert f'rightsizer_queue_depth{{queue="{name}",' not in metrics


def ended_well(running: Running, name: str) -> None:
    outcome = running.outcome
    assert outcome is not None and outcome.returncode == 0, outcome
    assert "Traceback" not in outcome.stderr
    assert outcome.stderr.count(f'msg="queue source down" queue={name} ') == 1, outcome.stderr[-3000:]
    assert outcome.max_rss_bytes < LIMIT, f"peak RSS {outcome.max_rss_bytes / MIB:.0f} MiB"


@pytest.mark.parametrize("sources", [1, 2])
def test_vllm_answers_of_280k_series_are_refused_within_the_memory_limit(
    tmp_path: Path, sources: int
) -> None:
    body = many_series(WAITING, 16 * MIB)  # under the 16 MiB body cap: read, and over max_series
    with FakeHttpServer() as srv:
        srv.route("/huge", body=body)
        hostile = [{"name": f"huge{i}", "kind": "vllm", "url": srv.url("/huge")} for i in range(sources)]
        config = {"queues": [*hostile, healthy_vllm(srv)]}
        with measured_exporter(tmp_path, config) as running:
            for entry in hostile:
                down_once(running, str(entry["name"]), MAX_SERIES)
            still_served(running)
    for entry in hostile:
        ended_well(running, str(entry["name"]))


def test_a_15_mib_label_value_is_refused_and_one_in_a_family_not_read_is_skipped(tmp_path: Path) -> None:
    with FakeHttpServer() as srv:
        srv.route("/read", body=long_label(WAITING, 15 * MIB))
        # The long line is a histogram no preset reads: skipped unread, the depth beside it is served.
        srv.route("/unread", body=long_label("vllm:request_prompt_tokens_bucket", 15 * MIB, WAITING))
        config = {
            "queues": [
                {"name": "read", "kind": "vllm", "url": srv.url("/read")},
                {"name": "unread", "kind": "vllm", "url": srv.url("/unread")},
                healthy_vllm(srv),
            ]
        }
        with measured_exporter(tmp_path, config) as running:
            down_once(running, "read", f"a series of {WAITING} is longer than 8192 bytes (max_series_bytes)")
            unread = settled(running, "unread")
            assert (unread["up"], unread["depth"]) == (True, 3.0), unread
            still_served(running)
    ended_well(running, "read")


def test_http_json_wide_deep_and_negative_answers(tmp_path: Path) -> None:
    wide = b"[" + b"{}," * (5 * MIB) + b"{}]"  # 15 MiB of empty objects: gigabytes once parsed
    deep = b"[" * 100_000 + b"]" * 100_000
    with FakeHttpServer() as srv:
        srv.route("/wide", body=wide, content_type="application/json")
        srv.route("/deep", body=deep, content_type="application/json")
        srv.route("/negative", body=json_body({"waiting": -5}), content_type="application/json")
        srv.route("/good", body=json_body({"waiting": 5, "running": 2}), content_type="application/json")
        common = {"kind": "http_json", "path": "waiting"}
        config = {
            "queues": [
                {"name": "wide", "url": srv.url("/wide"), **common},
                {"name": "deep", "url": srv.url("/deep"), **common},
                {"name": "negative", "url": srv.url("/negative"), **common},
                {"name": "good", "url": srv.url("/good"), **common, "in_flight_path": "running"},
            ]
        }
        with measured_exporter(tmp_path, config) as running:
            down_once(running, "wide", "answer larger than 1 MiB (max_body_bytes)", "http_json")
            down_once(running, "deep", "answer is not usable JSON: nested too deep", "http_json")
            reason = "value at waiting is negative (-5): not a number of requests"
            down_once(running, "negative", reason, "http_json")
            still_served(running)
            assert 'queue="negative"} -5' not in running.metrics()
    for name in ("wide", "deep", "negative"):
        ended_well(running, name)


def test_a_stream_with_150k_consumer_groups_is_not_read_whole(tmp_path: Path) -> None:
    with redis_server() as server:
        r = redis.Redis(port=server.extra["port"])
        r.xadd("jobs", {"n": 1})
        with r.pipeline(transaction=False) as pipe:
            for i in range(150_000):
                pipe.xgroup_create("jobs", f"group-{i}", id="0")
            pipe.execute()
        r.xadd("small", {"n": 1})
        r.xgroup_create("small", "workers", id="0")
        common = {"kind": "redis", "url": server.url, "timeout": 10}
        config = {
            "queues": [
                {"name": "crowded", "key": "jobs", "group": "group-7", **common},
                {"name": "small", "key": "small", "group": "workers", **common},
            ]
        }
        with measured_exporter(tmp_path, config) as running:
            reason = "stream jobs has 150000 consumer groups, more than the 1000 that are read (max_groups)"
            down_once(running, "crowded", reason, "redis")
            small = settled(running, "small")
            assert (small["up"], small["depth"], small["in_flight"]) == (True, 1.0, 0.0), small
    ended_well(running, "crowded")


@pytest.mark.parametrize("mode", ["huge-string", "many-elements"])
def test_a_redis_answer_announcing_a_gigabyte_is_cut_off_at_16_mib(tmp_path: Path, mode: str) -> None:
    """The default bound, 16 MiB, and a 10 s timeout: the gigabyte would arrive long before it."""
    with redis_server() as server, HostileRedis(mode) as hostile:
        redis.Redis(port=server.extra["port"]).rpush("jobs", "a")
        common = {"kind": "redis", "key": "jobs", "timeout": 10}
        config = {
            "queues": [
                {"name": "hostile", "url": hostile.url, **common},
                {"name": "real", "url": server.url, **common},
            ]
        }
        with measured_exporter(tmp_path, config) as running:
            down_once(running, "hostile", "Redis answer larger than 16 MiB (max_body_bytes)", "redis")
            real = settled(running, "real")
            assert (real["up"], real["depth"]) == (True, 1.0), real
    ended_well(running, "hostile")
    assert hostile.sent < 64 * MIB, hostile.sent


def pods_state(running: Running) -> dict[str, object]:
    return wait_for(lambda: (p := running.api("pods")).get("error") != "not refreshed yet" and p, 30)


@pytest.mark.parametrize(
    ("pods", "ids", "reason"),
    [
        (120_000, 1, "kubelet pod-resources answer larger than 4 MiB (pods.max_answer_bytes)"),
        (20_000, 1, "kubelet pod-resources answer lists more than 5000 pods (pods.max_pods)"),
        (1, 300_000, None),
    ],
    ids=["120k pods, 20 MB", "20k pods, 3.4 MB", "one container, 300k GPU ids"],
)
def test_kubelet_answers_are_bounded(tmp_path: Path, pods: int, ids: int, reason: str | None) -> None:
    directory = short_socket_dir()
    answer = gpu_pods(pods)
    answer[0]["containers"][0]["devices"][0]["device_ids"] = [f"G{i}" for i in range(ids)]
    write_raw_answer(directory / "answer.json", answer)
    socket = directory / "kubelet.sock"
    settings = {"enabled": True, "socket": str(socket), "refresh_interval_seconds": 2, "timeout_seconds": 1.5}
    try:
        with kubelet_process(socket, directory / "answer.json"), measured_exporter(
            tmp_path, {"pods": settings}
        ) as running:
            state = pods_state(running)
            metrics = running.metrics()
            assert "DCGM_FI_DEV_GPU_UTIL{" in metrics  # the GPUs are served all along
            if reason is not None:
                assert (state["ok"], state["error"]) == (False, reason), state
                assert 'rightsizer_collector_success{collector="pods"} 0\n' in metrics
            else:  # the one oversized entry is left out, named; the answer is used
                assert state["ok"] is True and state["pods"] == 1, state
                where = "tenant-team-07/batch-inference-000000-7d9f8/server"
                assert state["skipped"] == [f"{where}: nvidia.com/gpu lists more than 1024 ids"]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    outcome = running.outcome
    assert outcome is not None and outcome.returncode == 0 and "Traceback" not in outcome.stderr, outcome
    assert outcome.max_rss_bytes < LIMIT, f"peak RSS {outcome.max_rss_bytes / MIB:.0f} MiB"
