"""Queue depth from inference servers' /metrics (vLLM, TGI, Triton, SGLang, any exposition), served
by a real aiohttp server, read by the queue extension inside a real Sampler."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from queue_fakes import OPENMETRICS, SglangMetrics, VllmMetrics, tgi_metrics, triton_metrics
from queue_harness import QueueHarness, eventually
from queue_servers import FakeHttpServer
from servers import free_port

from exporter.sources.queues.base import QueueSourceError
from exporter.sources.queues.lines import SampleLines

LABELS = {"namespace": "prod", "workload": "chat"}


async def test_presets_read_each_inference_server_and_follow_it() -> None:
    vllm, sglang = VllmMetrics(engines=2), SglangMetrics()
    vllm.set([3, 4], [1, 2])
    sglang.set(9, 4)
    tgi = {"queue": 5.0, "batch": 2.0}
    with FakeHttpServer() as srv:
        srv.route("/vllm", body=vllm.render)
        srv.route("/sglang", body=sglang.render)
        srv.route("/tgi", body=lambda: tgi_metrics(tgi["queue"], tgi["batch"]))
        srv.route("/triton", body=triton_metrics({"resnet50": 3, "bert-large": 11}))
        entries = [
            {"name": "chat", "kind": "vllm", "url": srv.url("/vllm"), "labels": LABELS},
            {"name": "agent", "kind": "sglang", "url": srv.url("/sglang")},
            {"name": "summarise", "kind": "tgi", "url": srv.url("/tgi")},
            {"name": "vision", "kind": "triton", "url": srv.url("/triton")},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: all(h.depth(e["name"]) is not None for e in entries), what="all depths")
            series = h.series()
            chat = (("kind", "vllm"), ("namespace", "prod"), ("queue", "chat"), ("workload", "chat"))
            assert series[("rightsizer_queue_depth", chat)] == 7  # summed over both engines
            assert series[("rightsizer_queue_in_flight", chat)] == 3
            assert h.depth("agent") == 9 and h.value("rightsizer_queue_in_flight", "agent") == 4
            assert h.depth("summarise") == 5 and h.value("rightsizer_queue_in_flight", "summarise") == 2
            assert h.depth("vision") == 14  # both models
            assert h.value("rightsizer_queue_in_flight", "vision") is None  # Triton reports none
            for name in ("chat", "agent", "summarise", "vision"):
                assert h.up(name) == 1
                assert h.value("rightsizer_queue_last_success_timestamp_seconds", name) is not None
                assert h.value("rightsizer_queue_source_duration_seconds", name) is not None
            assert series[("rightsizer_queue_source_up", chat)] == 1
            assert h.api("chat") | {"duration_seconds": 0, "last_success_timestamp_seconds": 0} == {
                "name": "chat",
                "kind": "vllm",
                "origin": "static",
                "gpus": [],
                "labels": LABELS,
                "target": srv.url("/vllm"),
                "interval_seconds": 0.1,
                "up": True,
                "depth": 7.0,
                "in_flight": 3.0,
                "duration_seconds": 0,
                "last_success_timestamp_seconds": 0,
                "error": None,
            }

            vllm.set([0, 12], [2, 2])
            tgi["queue"] = 0
            await eventually(lambda: h.depth("chat") == 12 and h.depth("summarise") == 0, what="new depths")
            assert h.value("rightsizer_queue_in_flight", "chat") == 4


async def test_match_narrows_the_series_and_prometheus_kind_reads_any_metric() -> None:
    vllm = VllmMetrics(engines=2)
    vllm.set([3, 4], [1, 2])
    custom = (
        b"# HELP jobs_waiting Jobs waiting per priority.\n# TYPE jobs_waiting gauge\n"
        b'jobs_waiting{priority="high"} 2\njobs_waiting{priority="low"} 40\n'
        b"# HELP jobs_running Jobs running.\n# TYPE jobs_running gauge\n"
        b'jobs_running{priority="high"} 6\njobs_running{priority="low"} 1\n'
    )
    with FakeHttpServer() as srv:
        srv.route("/vllm", body=vllm.render)
        srv.route("/jobs", body=custom)
        entries = [
            {"name": "engine1", "kind": "vllm", "url": srv.url("/vllm"), "match": {"engine": "1"}},
            {
                "name": "colon",
                "kind": "prometheus",
                "url": srv.url("/vllm"),
                "metric": "vllm:num_requests_waiting",
                "match": {"model_name": vllm.model},
            },
            {
                "name": "high",
                "kind": "prometheus",
                "url": srv.url("/jobs"),
                "metric": "jobs_waiting",
                "in_flight_metric": "jobs_running",
                "match": {"priority": "high"},
            },
            {"name": "all", "kind": "prometheus", "url": srv.url("/jobs"), "metric": "jobs_waiting"},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: all(h.depth(e["name"]) is not None for e in entries), what="all depths")
            assert h.depth("engine1") == 4 and h.value("rightsizer_queue_in_flight", "engine1") == 2
            assert h.depth("colon") == 7
            assert h.depth("high") == 2 and h.value("rightsizer_queue_in_flight", "high") == 6
            assert h.depth("all") == 42


async def test_openmetrics_answers_are_parsed_too() -> None:
    vllm = VllmMetrics()
    vllm.set([5], [3])
    with FakeHttpServer() as srv:
        route = srv.route("/metrics", body=lambda: vllm.render(openmetrics=True), content_type=OPENMETRICS)
        async with QueueHarness([{"name": "chat", "kind": "vllm", "url": srv.url("/metrics")}]) as h:
            await eventually(lambda: h.depth("chat") == 5, what="depth from OpenMetrics")
            assert h.value("rightsizer_queue_in_flight", "chat") == 3
            assert "text/plain" in route.last_headers["Accept"]


async def test_auth_bearer_token_file_basic_auth_and_headers(tmp_path: Path) -> None:
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text("s3cret-token\n")
    password.write_text("hunter2\n")
    body = tgi_metrics(4, 1)
    with FakeHttpServer() as srv:
        srv.route("/bearer", body=body, require={"Authorization": "Bearer s3cret-token"})
        srv.route("/basic", body=body, require={"Authorization": "Basic cHJvbTpodW50ZXIy"})  # prom:hunter2
        srv.route("/key", body=body, require={"X-API-Key": "abc", "X-Tenant": "t1"})
        srv.route("/wrong", body=body, require={"Authorization": "Bearer other"})
        entries = [
            {"name": "bearer", "kind": "tgi", "url": srv.url("/bearer"), "bearer_token_file": str(token)},
            {
                "name": "basic",
                "kind": "tgi",
                "url": srv.url("/basic"),
                "basic_auth": {"username": "prom", "password_file": str(password)},
            },
            {
                "name": "key",
                "kind": "tgi",
                "url": srv.url("/key"),
                "headers": {"X-API-Key": "abc", "X-Tenant": "t1"},
            },
            {"name": "wrong", "kind": "tgi", "url": srv.url("/wrong"), "bearer_token_file": str(token)},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: all(h.up(e["name"]) is not None for e in entries), what="first polls")
            assert h.depth("bearer") == h.depth("basic") == h.depth("key") == 4
            assert h.up("wrong") == 0 and h.depth("wrong") is None
            assert h.api("wrong")["error"] == "HTTP 401 Unauthorized"


async def test_a_bearer_token_of_two_lines_is_refused_not_sent_as_two_headers(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\nX-Injected: yes\n")  # a rotated file holding two lines
    with FakeHttpServer() as srv:
        route = srv.route("/bearer", body=tgi_metrics(4, 1))
        entry = {"name": "bearer", "kind": "tgi", "url": srv.url("/bearer"), "bearer_token_file": str(token)}
        async with QueueHarness([entry]) as h:
            await eventually(lambda: h.up("bearer") is not None, what="the first poll")
            assert h.up("bearer") == 0 and h.depth("bearer") is None
            assert "holds a line break" in h.api("bearer")["error"]
            assert route.requests == 0  # nothing was sent with the token spliced into the head


def _downs(caplog: pytest.LogCaptureFixture, queue: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.getMessage() == "queue source down" and getattr(r, "queue", "") == queue
    ]


FAULTS = {
    "garbage": ({"body": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"}, "answer is not UTF-8 text"),
    "broken exposition": (
        {"body": b'vllm:num_requests_waiting{model_name="x" 3\n'},
        "cannot parse the exposition",
    ),
    "html": (
        {"body": b"<html><body>login</body></html>", "content_type": "text/html"},
        "answer is text/html",
    ),
    "non-200": ({"status": 503, "body": b"overloaded"}, "HTTP 503 Service Unavailable"),
    "NaN": (
        {"body": b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting NaN\n"},
        "vllm:num_requests_waiting is NaN",
    ),
    "missing metric": (
        {"body": b"# TYPE other gauge\nother 1\n"},
        "metric vllm:num_requests_waiting not found",
    ),
    "hang": ({"hang": True}, "no answer within 0.3 s"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_fault_marks_source_down_drops_depth_logs_once_and_recovers(
    fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rightsizer.queues")
    settings, reason = FAULTS[fault]
    vllm, other = VllmMetrics(), VllmMetrics()
    vllm.set([6], [1])
    other.set([1], [0])
    with FakeHttpServer() as srv:
        route = srv.route("/m", body=vllm.render)
        srv.route("/other", body=other.render)
        entries = [
            {"name": "chat", "kind": "vllm", "url": srv.url("/m"), "timeout": 0.3, "backoff_max": 0.4},
            {"name": "other", "kind": "vllm", "url": srv.url("/other")},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: h.depth("chat") == 6, what="first depth")
            good_success = h.value("rightsizer_queue_last_success_timestamp_seconds", "chat")
            srv.route("/m", **settings)
            await eventually(lambda: h.up("chat") == 0, what="source down")
            assert h.depth("chat") is None and h.value("rightsizer_queue_in_flight", "chat") is None
            assert h.api("chat")["error"].startswith(reason) and h.api("chat")["depth"] is None
            failing = srv.routes["/m"]
            await eventually(lambda: failing.requests >= 3, what="more failing polls")
            # the other source is neither delayed nor affected
            other.set([8], [0])
            await eventually(lambda: h.depth("other") == 8, what="the other source to follow")
            assert h.value("rightsizer_queue_last_success_timestamp_seconds", "chat") >= good_success
            assert len(_downs(caplog, "chat")) == 1, "the reason is logged once, not per poll"
            vllm.set([2], [1])
            srv.routes["/m"] = route
            await eventually(lambda: h.up("chat") == 1 and h.depth("chat") == 2, what="recovery")
            assert h.api("chat")["error"] is None
            assert any(r.getMessage() == "queue source back" for r in caplog.records)


async def test_connection_refused_is_reported_without_delaying_the_sampler() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    async with QueueHarness([{"name": "gone", "kind": "tgi", "url": url}]) as h:
        await eventually(lambda: h.up("gone") == 0, what="source down")
        assert "Connection refused" in h.api("gone")["error"]
        assert h.api("gone")["error"].startswith("cannot connect to 127.0.0.1:")
        assert h.depth("gone") is None
        assert h.value("rightsizer_queue_last_success_timestamp_seconds", "gone") is None
        cycles = h.sampler.cycles
        await eventually(lambda: h.sampler.cycles >= cycles + 3, what="sampler to keep rendering")


def kept(text: str, names: list[str], split: int | None = None) -> list[str]:
    """The lines SampleLines keeps of ``text``, fed whole or in two pieces cut at ``split``."""
    lines = SampleLines(names, max_series=100, max_series_bytes=256)
    data = text.encode()
    for piece in (data,) if split is None else (data[:split], data[split:]):
        lines.feed(piece)
    lines.finish()
    return [line.decode() for line in lines.take()]


def test_only_sample_lines_of_the_wanted_names_reach_the_parser() -> None:
    text = (
        "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="m"} 3\r\n'
        "vllm:num_requests_waiting_by_reason 9\n"
        'other{query="vllm:num_requests_waiting"} 1\n'
        "vllm:num_requests_waiting\t4\n"
        "vllm:num_requests_waiting 5"
    )
    wanted = [
        'vllm:num_requests_waiting{model_name="m"} 3',
        "vllm:num_requests_waiting\t4",
        "vllm:num_requests_waiting 5",
    ]
    assert kept(text, ["vllm:num_requests_waiting"]) == wanted
    for split in range(len(text)):  # wherever a read ends, the same lines are kept
        assert kept(text, ["vllm:num_requests_waiting"], split) == wanted, split
    assert kept("tgi_queue_size 2\n", ["tgi_queue_size", "tgi_batch_current_size"]) == ["tgi_queue_size 2"]


def test_a_line_no_one_reads_is_skipped_however_long_and_kept_lines_are_capped() -> None:
    wanted = ["vllm:num_requests_waiting"]
    body = b'other_metric{x="' + b"a" * 100_000 + b'"} 1\nvllm:num_requests_waiting 4\n'
    lines, held = SampleLines(wanted, max_series=3, max_series_bytes=256), 0
    for at in range(0, len(body), 1000):  # read 1 KB at a time: the long line is never held whole
        lines.feed(body[at : at + 1000])
        held = max(held, len(lines._carry))
    lines.finish()
    assert lines.take() == [b"vllm:num_requests_waiting 4"] and held <= 256 + 1000
    long_kept = b'vllm:num_requests_waiting{m="' + b"a" * 1000 + b'"} 1\n'
    for piece in (long_kept, long_kept[:300]):  # whole, or its start only (the rest not yet read)
        with pytest.raises(QueueSourceError, match=r"longer than 256 bytes \(max_series_bytes\)"):
            SampleLines(wanted, max_series=3, max_series_bytes=256).feed(piece)
    with pytest.raises(QueueSourceError, match=r"more than 3 series .* \(max_series\)"):
        SampleLines(wanted, max_series=3, max_series_bytes=256).feed(b"vllm:num_requests_waiting 1\n" * 4)
