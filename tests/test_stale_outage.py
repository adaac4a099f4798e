"""Stale is not current: a restarted Prometheus, a frozen exporter, an adapter whose clock is behind.

All real processes (redis-server, the exporters, Prometheus, the adapter, KEDA's gRPC client).

- Prometheus restarted while the queue's exporter is gone: it writes no staleness markers for a
  target it has not scraped since, so the depth from before (52) stays selectable for its 5-minute
  lookback. The adapter must answer 503 / UNAVAILABLE from the moment the restarted Prometheus
  answers (``stale_after_seconds`` 5, and the restart takes longer), never 200 with 52.
- An exporter that keeps serving the same body (a sampling cycle that fails keeps the old
  snapshot), put behind a proxy that repeats its last answer: its stamp stands still, so its pod
  is 503 "frozen" in both modes, while the other node's pod is still served.
- The adapter's clock 120 s behind Prometheus's (``time.time`` shifted in the adapter process by a
  ``sitecustomize``): the adapter still follows the queue at once (the engine's clock decides the
  query time), where asking for its own "now" would read two minutes into the past.
"""

from __future__ import annotations

import calendar
import contextlib
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from adapter_support import ANONYMOUS, adapter
from gpu_rig import POD_A, two_nodes, unavailable
from monitoring_stack import redis_push
from outage_rig import Answers, queue_exporter
from queue_servers import FakeHttpServer
from servers import Process, free_port, http_get, prometheus, redis_server, wait_for
from test_partial_outage import adapter_on

CONFIG = "prometheus:\n  stale_after_seconds: 5\n"


def test_a_restarted_prometheus_does_not_serve_the_depth_from_before(tmp_path: Path) -> None:
    data, port = tmp_path / "tsdb", free_port()
    config = tmp_path / "adapter.yaml"
    config.write_text(CONFIG)
    with (
        redis_server() as rds,
        queue_exporter(tmp_path, rds.extra["port"]) as exp,
        contextlib.ExitStack() as stack,
    ):
        redis_push(rds.extra["port"], "jobs", 52)
        targets = {"rightsizer-exporter": [exp.url.removeprefix("http://")]}
        first = stack.enter_context(prometheus(targets, data_dir=data, port=port))
        args = ["--prometheus-url", first.url, "--refresh-interval", "0.5", "--config", str(config),
                "--grpc-listen", "127.0.0.1:0"]  # fmt: skip
        p = stack.enter_context(adapter(args, env=ANONYMOUS))
        answers = Answers(p, stack.enter_context(grpc.insecure_channel(p.extra["grpc"])))
        wait_for(lambda: answers.external("queue=jobs")[0] == 200, 60, what="the depth in the adapter")
        assert answers.everywhere("queue=jobs")["metrics_api"] == (200, 52)
        first.stop()
        exp.stop()
        time.sleep(6)  # the restart takes longer than stale_after
        with prometheus(targets, data_dir=data, port=port) as second:
            old = http_get(f"{second.url}/api/v1/query?query=rightsizer_queue_depth")[2]
            assert b'"52"' in old  # the engine still selects the depth from before the restart
            deadline, messages = time.monotonic() + 15, []
            while time.monotonic() < deadline:
                seen = answers.everywhere("queue=jobs")
                unavailable(seen)  # never 200 with 52, never KEDA active
                messages.append(seen["external"][1])
                time.sleep(0.5)
            # once refreshed from the restarted engine, the 503 names the queue and why
            assert "'jobs'" in messages[-1] and exp.url.removeprefix("http://") in messages[-1], messages[-1]
    shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def frozen_proxy(target: Process) -> Iterator[tuple[Process, list[bool]]]:
    """``target``'s /metrics through a proxy; set the flag to serve its last answer from then on."""
    frozen = [False]
    last: list[bytes] = [b""]

    def answer() -> bytes:
        if not frozen[0]:
            last[0] = http_get(target.url + "/metrics")[2]
        return last[0]

    with FakeHttpServer() as proxy:
        proxy.route("/metrics", body=answer)
        yield Process(target.proc, target.log_path, proxy.url("")), frozen


def test_a_frozen_exporter_is_not_current_in_direct_mode(tmp_path: Path) -> None:
    frozen_exporter_is_not_current("direct", tmp_path)


@pytest.mark.usefixtures("prometheus_version")  # the frozen evidence query on 2.42 and 3.5
def test_a_frozen_exporter_is_not_current_in_prometheus_mode(tmp_path: Path) -> None:
    frozen_exporter_is_not_current("prometheus", tmp_path)


def frozen_exporter_is_not_current(mode: str, tmp_path: Path) -> None:
    with two_nodes(tmp_path) as (a, b), frozen_proxy(b) as (node_b, frozen):
        settings = {"prometheus": CONFIG} if mode == "prometheus" else {}
        with adapter_on(mode, tmp_path, (a, node_b), settings) as busy:
            worker = "workload=worker"
            wait_for(lambda: busy.external(worker) == (200, ["0", "1"]), 60, what="both pods' gpu_busy")
            frozen[0] = True  # the same body from now on: its stamp stands still, yet scrapes succeed
            wait_for(lambda: busy.external(worker)[0] == 503, 30, what="the frozen exporter to be seen")
            unavailable(busy.everywhere(worker), node_b.url.removeprefix("http://"), "frozen")
            assert busy.external(f"pod={POD_A}") == (200, ["0"])
            frozen[0] = False
            wait_for(lambda: busy.external(worker) == (200, ["0", "1"]), 30, what="values once it moves")


def test_an_adapter_clock_behind_the_engines_still_reads_now(tmp_path: Path) -> None:
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(
        "import time\n_real = time.time\ntime.time = lambda: _real() - 120.0  # this clock is behind\n"
    )
    with (
        redis_server() as rds,
        queue_exporter(tmp_path, rds.extra["port"]) as exp,
        prometheus({"rightsizer-exporter": [exp.url.removeprefix("http://")]}) as prom,
    ):
        args = ["--prometheus-url", prom.url, "--refresh-interval", "0.5", "--grpc-listen", "127.0.0.1:0"]
        env = {**ANONYMOUS, "PYTHONPATH": str(skew)}
        with adapter(args, env=env) as p, grpc.insecure_channel(p.extra["grpc"]) as channel:
            logged = re.search(r"ts=(\S+)Z", p.log())
            assert logged is not None
            at = calendar.timegm(time.strptime(logged.group(1).split(".")[0], "%Y-%m-%dT%H:%M:%S"))
            assert 100 < time.time() - at < 160, "the adapter's clock is not 120 s behind"
            answers = Answers(p, channel)
            depth = lambda: answers.everywhere("queue=jobs")["metrics_api"]  # noqa: E731
            wait_for(lambda: depth() == (200, 0), 60, what="the empty queue")
            redis_push(rds.extra["port"], "jobs", 52)
            wait_for(lambda: depth() == (200, 52), 30, what="52 items, now")
