"""Partial failure is not a smaller number: one workload on two nodes, one node's exporter killed.

Real processes: two simulated exporters (``gpu_rig``: pod a idle, pod b busy), the adapter, and in
Prometheus mode a real Prometheus (or VictoriaMetrics) scraping both every second. Before the
kill every interface reads the workload's ``rightsizer_gpu_busy`` as 1 (pod a 0 + pod b 1; KEDA
active). Once node b's exporter is killed (SIGKILL) no interface may read the workload as 0
(which would let KEDA scale it to zero): external and metrics-api 503, gRPC GetMetrics and
IsActive UNAVAILABLE, each naming node b's exporter, StreamIsActive pushes nothing; the
namespace's GPU utilisation is 503 as well. The custom metrics API still serves pod a (its own
exporter is up) and refuses pod b. Junk answers, an exporter never reached and a Thanos store
that is down are refused the same way.
"""

from __future__ import annotations

import contextlib
import queue
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from adapter_support import ANONYMOUS, adapter
from fake_thanos import FakeThanosQuery
from gpu_rig import POD_A, POD_B, Grpc, Reads, two_nodes, unavailable
from outage_rig import source_args
from queue_servers import FakeHttpServer
from servers import Process, http_get, prom_query, prometheus, refused_port, wait_for

from adapter.kubernetes.quantities import parse_quantity

SETTINGS = {"direct": "direct:\n  stale_after_seconds: 1\n"}


@contextlib.contextmanager
def adapter_on(
    mode: str, tmp: Path, nodes: tuple[Process, ...], settings: dict[str, str] | None = None
) -> Iterator[Reads]:
    """The adapter reading ``nodes`` (``mode`` direct or prometheus), with ``settings`` (YAML
    text per mode) instead of ``SETTINGS``."""
    config = tmp / "adapter.yaml"
    config.write_text((settings if settings is not None else SETTINGS).get(mode) or "{}\n")
    args = ["--config", str(config), "--grpc-listen", "127.0.0.1:0"]
    with contextlib.ExitStack() as stack:
        args += source_args(stack, mode, nodes)
        p = stack.enter_context(adapter(args, env=ANONYMOUS))
        channel = stack.enter_context(grpc.insecure_channel(p.extra["grpc"]))
        yield Reads(p, channel)


@pytest.mark.parametrize("mode", ["direct", "prometheus", "victoria-metrics"])
def test_one_nodes_exporter_killed_never_reads_as_a_smaller_number(mode: str, tmp_path: Path) -> None:
    with two_nodes(tmp_path) as (a, b), adapter_on(mode, tmp_path, (a, b)) as busy:
        worker = "workload=worker"
        wait_for(lambda: busy.external(worker) == (200, ["0", "1"]), 60, what="both pods' gpu_busy")
        assert busy.everywhere(worker) == {
            "external": (200, ["0", "1"]),
            "metrics_api": (200, 1.0),
            "get_metrics": Grpc("OK", 1.0),
            "is_active": Grpc("OK", True),
        }
        assert busy.pods() == (200, {POD_A: "0", POD_B: "1"})
        util = Reads(busy.adapter, busy.channel, "rightsizer_gpu_utilization_ratio")
        code, values = util.external("")
        assert code == 200 and len(values) == 2, values
        low, high = sorted(parse_quantity(v) for v in values)
        assert low <= 0.05 and 0.5 <= high <= 0.9, values  # idle; utilisation 0.7 with its swing

        with busy.stream(worker) as pushed:
            assert pushed.get(timeout=15) is True  # active: pushed at once
            b.stop(signal.SIGKILL)
            wait_for(lambda: busy.external(worker)[0] == 503, 30, what="node b's exporter to be missed")
            node_b = b.url.removeprefix("http://")
            unavailable(busy.everywhere(worker), node_b)
            with pytest.raises(queue.Empty):
                pushed.get(timeout=3)  # no value: neither a rise nor a fall is pushed
        assert util.external("")[0] == 503  # the namespace's utilisation: never node a's alone
        assert busy.external(f"pod={POD_A}") == (200, ["0"])  # node a's pod alone is sound
        assert busy.pods() == (200, {POD_A: "0"})  # per pod: the pods whose own source is up
        code, message = busy.pods(POD_B)
        assert code == 503 and node_b in message


JUNK = {  # what a broken or hijacked endpoint may answer with HTTP 200, and what the 503 says then
    "html": (b"<html><body>Sign in</body></html>", "text/html", "answered text/html"),
    "empty": (b"", "text/plain; version=0.0.4", "holds no rightsizer_last_sample_timestamp_seconds"),
    "random bytes": (random.Random(23).randbytes(4096), "text/plain", "not UTF-8"),
    "another exporter": (b"# TYPE up gauge\nnode_load1 0.5\n", "text/plain", "holds no rightsizer_last"),
}


@pytest.mark.parametrize("kind", list(JUNK))
def test_an_exporter_answering_junk_is_down_not_empty(kind: str, tmp_path: Path) -> None:
    """Node b's /metrics, served through a proxy that turns to junk: it must count as down."""
    body, content_type, why = JUNK[kind]
    with two_nodes(tmp_path) as (a, b), FakeHttpServer() as proxy:
        route = proxy.route("/metrics", body=lambda: http_get(b.url + "/metrics")[2])
        node_b = Process(b.proc, b.log_path, proxy.url(""))
        with adapter_on("direct", tmp_path, (a, node_b)) as busy:
            worker = "workload=worker"
            wait_for(lambda: busy.external(worker) == (200, ["0", "1"]), 60, what="both pods' gpu_busy")
            route.body, route.content_type = body, content_type
            wait_for(lambda: busy.external(worker)[0] == 503, 30, what="the junk to be refused")
            unavailable(busy.everywhere(worker), proxy.url("/metrics"), why)
            assert busy.external(f"pod={POD_A}") == (200, ["0"])


def test_an_exporter_never_reached_fails_every_request(tmp_path: Path) -> None:
    """It might publish anything: no GPU and no queue is answered until it does. Its port is held
    (bound, never listening) for the whole test: a port merely found free can be taken by another
    test's server before the adapter dials it, and what answers there is then that exporter (the
    one way this test could see anything but 503)."""
    with refused_port() as port, two_nodes(tmp_path) as (a, _):
        closed = f"http://127.0.0.1:{port}"
        never = Process(None, Path(), closed)  # type: ignore[arg-type]
        with adapter_on("direct", tmp_path, (a, never)) as busy:
            _refused_everywhere(busy, closed)


def _refused_everywhere(busy: Reads, closed: str) -> None:
    """503 everywhere, naming ``closed``; on a timeout, every answer seen and the adapter's log."""
    seen: dict[tuple[int, str], int] = {}  # every distinct answer while waiting, and how often

    def refused() -> bool:
        code, body = busy.external("workload=worker")
        key = (code, str(body)[:300])
        seen[key] = seen.get(key, 0) + 1
        return code == 503

    try:
        wait_for(refused, 30, what="a 503")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the adapter answered {seen}:\n{busy.adapter.log()[-3000:]}") from None
    why = f"exporter {closed}/metrics has not answered since the adapter started"
    unavailable(busy.everywhere("workload=worker"), why)
    unavailable(busy.everywhere(f"pod={POD_A}"), why)
    queues = Reads(busy.adapter, busy.channel, "rightsizer_queue_depth")
    unavailable(queues.everywhere("queue=jobs"), why)  # it might hold that queue
    assert busy.pods()[0] == 503


@pytest.mark.parametrize("honours", [True, False], ids=["asked-complete", "answers-partial-anyway"])
def test_a_thanos_store_down_is_never_half_the_series(honours: bool, tmp_path: Path) -> None:
    """Thanos Query over two stores, node b's store down: a complete answer is asked for and refused
    (422), and a partial one (warnings) is refused too; never pod a's 0 as the workload's value."""
    with (
        two_nodes(tmp_path) as (a, b),
        prometheus({"rightsizer-exporter": [n.url.removeprefix("http://") for n in (a, b)]}) as both,
        prometheus({"rightsizer-exporter": [a.url.removeprefix("http://")]}) as only_a,
        FakeThanosQuery(both.url, only_a.url) as thanos,
    ):
        thanos.honours_partial_response = honours
        args = ["--prometheus-url", thanos.url, "--refresh-interval", "0.5", "--grpc-listen", "127.0.0.1:0"]
        with adapter(args, env=ANONYMOUS) as p, grpc.insecure_channel(p.extra["grpc"]) as channel:
            busy = Reads(p, channel)
            worker = "workload=worker"
            wait_for(lambda: busy.external(worker) == (200, ["0", "1"]), 60, what="both pods' gpu_busy")
            thanos.store_b_up = False
            wait_for(lambda: busy.external(worker)[0] == 503, 30, what="the store's loss to be seen")
            unavailable(busy.everywhere(worker), "receive series from Addr: 127.0.0.1:10902")
            unavailable(busy.everywhere(f"pod={POD_A}"))  # the answer is partial: nothing of it is used
            assert all(f.get("partial_response") == "false" for f in thanos.forms)


PROMADAPTER_FILE = """\
rules:
- seriesQuery: '{__name__="DCGM_FI_DEV_GPU_UTIL",namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: '{__name__="DCGM_FI_DEV_GPU_UTIL",namespace!="",pod!=""}'
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (namespace)'
  name: {as: gpu_utilization_percent_total}
  resources: {overrides: {namespace: {resource: namespace}}}
"""


def test_a_prometheus_adapter_file_with_source_checks_is_never_a_smaller_number(tmp_path: Path) -> None:
    """prometheus_adapter.source_checks: the file's metrics know their scrape targets too."""
    (tmp_path / "rules.yaml").write_text(PROMADAPTER_FILE)
    (tmp_path / "adapter.yaml").write_text("prometheus_adapter:\n  source_checks: true\n")
    with (
        two_nodes(tmp_path) as (a, b),
        prometheus({"rightsizer-exporter": [n.url.removeprefix("http://") for n in (a, b)]}) as prom,
    ):
        # discovery lists the series once at start (then every relist interval): scraped first
        wait_for(lambda: len(prom_query(prom.url, "DCGM_FI_DEV_GPU_UTIL")) == 2, 30, what="a scrape of both")
        args = ["--prometheus-url", prom.url, "--refresh-interval", "0.5", "--grpc-listen", "127.0.0.1:0",
                "--prometheus-adapter-config", str(tmp_path / "rules.yaml"),
                "--config", str(tmp_path / "adapter.yaml")]  # fmt: skip
        with adapter(args, env=ANONYMOUS) as p, grpc.insecure_channel(p.extra["grpc"]) as channel:
            total = Reads(p, channel, "gpu_utilization_percent_total")
            per_pod = Reads(p, channel, "DCGM_FI_DEV_GPU_UTIL")
            wait_for(lambda: total.external("")[0] == 200 and len(per_pod.pods()[1]) == 2, 60, what="values")
            assert 50 <= parse_quantity(total.external("")[1][0]) <= 90  # pod a 0 % + pod b about 70 %
            b.stop(signal.SIGKILL)
            wait_for(lambda: total.external("")[0] == 503, 30, what="node b's target to be missed")
            unavailable(total.everywhere(""), b.url.removeprefix("http://"))
            assert per_pod.pods() == (200, {POD_A: "0"})  # its own target is up
