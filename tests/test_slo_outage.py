"""One replica's exporter killed is never a smaller SLO ratio: three exporters, one workload.

Real processes: three simulated exporters, each polling one vLLM replica of workload ``ha/w``
(TTFT SLO 0.5 s), the adapter in direct mode or on a real Prometheus or VictoriaMetrics. Written
before running: replicas 0 and 1 answer fast (200 requests at 20 ms: ratio well under 1), replica 2
is slow (150 at 0.2 s, 50 at 0.9 s: p95 0.95 s, ratio 1.9, see test_slo_adapter), so the workload's
ratio (the worst replica) is 1.9 and its attainment (the lowest) 0.75. Once replica 2's exporter is
killed (SIGKILL) no interface may answer the ratio of the two survivors: the external and custom
metrics APIs and KEDA's metrics-api 503, gRPC GetMetrics UNAVAILABLE, each naming the killed
exporter, for both SLO rules and the queue rule. Each rule's query is evaluated at the engine's
own clock, so the scrape that fails can fall between two of a refresh's queries: the other rules
are refused by the next refresh at the latest, and until then answer only what they answered with
every replica, never the survivors' values. A fourth exporter that was never reached might hold a
replica too: the same 503s, naming it, from the start.
"""

from __future__ import annotations

import contextlib
import signal
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import ANONYMOUS, adapter, get_json, keda_get_metrics
from latency_servers import ClientServer
from outage_rig import source_args
from queue_servers import FakeHttpServer
from servers import Process, exporter, http_get, refused_port, wait_for

RATIO = "rightsizer_workload_slo_latency_ratio"
ATTAINMENT = "rightsizer_workload_slo_attainment_ratio"
DEPTH = "rightsizer_queue_depth"
SELECTOR = "workload=w"


def _judged(p: Process) -> bool:
    text = http_get(p.url + "/metrics")[2].decode()
    return any(
        line.startswith("rightsizer_workload_slo_scaling_up{")
        and 'workload="w"' in line
        and line.split()[-1] == "1"
        for line in text.splitlines()
    )


def _polled(p: Process) -> bool:
    return "rightsizer_workload_slo_scaling_up{" in http_get(p.url + "/metrics")[2].decode()


@contextlib.contextmanager
def three_replicas(tmp: Path) -> Iterator[list[Process]]:
    """Three exporters, replica i's on vLLM replica i; every one judged before it yields."""
    replicas = [ClientServer("vllm") for _ in range(3)]
    with FakeHttpServer() as http, contextlib.ExitStack() as stack:
        nodes = []
        for i, vllm in enumerate(replicas):
            http.route(f"/r{i}", body=vllm.render)
            config = tmp / f"exporter-{i}.yaml"
            config.write_text(yaml.safe_dump({
                "queues": [{"name": f"w-{i}", "kind": "vllm", "url": http.url(f"/r{i}"), "backoff_max": 1,
                            "labels": {"namespace": "ha", "workload": "w"}}],
                "slos": [{"namespace": "ha", "workload": "w", "ttft_seconds": 0.5}],
            }))  # fmt: skip
            nodes.append(
                stack.enter_context(exporter(["--simulate", "--interval", "0.5", "--config", str(config)]))
            )
        for p in nodes:  # the scaling window counts what arrives after the first read
            wait_for(lambda p=p: _polled(p), 30, what="the replica's first read")
        replicas[0].observe("ttft", 0.02, 200)
        replicas[1].observe("ttft", 0.02, 200)
        replicas[2].observe("ttft", 0.2, 150)
        replicas[2].observe("ttft", 0.9, 50)
        for p in nodes:
            wait_for(lambda p=p: _judged(p), 30, what="each replica judged over the scaling window")
        yield nodes


@contextlib.contextmanager
def adapter_on(mode: str, tmp: Path, nodes: list[Process]) -> Iterator[Process]:
    config = tmp / "adapter.yaml"
    config.write_text("direct:\n  stale_after_seconds: 1\n" if mode == "direct" else "{}\n")
    args = ["--config", str(config), "--grpc-listen", "127.0.0.1:0"]
    with contextlib.ExitStack() as stack:
        args += source_args(stack, mode, nodes)
        yield stack.enter_context(adapter(args, env=ANONYMOUS))


def everywhere(a: Process, metric: str) -> dict[str, Any]:
    """What every interface answers for workload w: (code, value or message)."""
    query = urllib.parse.urlencode({"labelSelector": SELECTOR})
    code, body = get_json(f"{a.url}/apis/external.metrics.k8s.io/v1beta1/namespaces/ha/{metric}?{query}")
    out: dict[str, Any] = {
        "external": (code, [i["value"] for i in body["items"]] if code == 200 else body["message"])
    }
    code, body = get_json(f"{a.url}/apis/custom.metrics.k8s.io/v1beta2/namespaces/ha/deployments/w/{metric}")
    out["custom"] = (code, body["items"][0]["value"] if code == 200 else body["message"])
    query = urllib.parse.urlencode({"labelSelector": SELECTOR, "namespace": "ha"})
    code, body = get_json(f"{a.url}/keda/v1/metrics/{metric}?{query}")
    out["metrics_api"] = (code, body["value"] if code == 200 else body["message"])
    out["get_metrics"] = keda_get_metrics(a.extra["grpc"], "ha", "w", metric, SELECTOR, "1")
    return out


def refused(seen: dict[str, Any], *fragments: str) -> None:
    codes = {name: answer[0] for name, answer in seen.items()}
    assert codes == {"external": 503, "custom": 503, "metrics_api": 503, "get_metrics": "UNAVAILABLE"}, seen
    for _, message in seen.values():
        assert all(f in message for f in fragments), (fragments, message)


@pytest.mark.parametrize("mode", ["direct", "prometheus", "victoria-metrics"])
def test_a_replicas_exporter_killed_never_answers_the_survivors_ratio(mode: str, tmp_path: Path) -> None:
    with three_replicas(tmp_path) as nodes, adapter_on(mode, tmp_path, nodes) as a:
        wait_for(lambda: everywhere(a, RATIO)["external"] == (200, ["1900m"]), 60, what="the worst ratio 1.9")
        assert everywhere(a, RATIO) == {
            "external": (200, ["1900m"]),
            "custom": (200, "1900m"),
            "metrics_api": (200, 1.9),
            "get_metrics": ("OK", pytest.approx(1.9)),
        }
        assert everywhere(a, ATTAINMENT)["external"] == (200, ["750m"])
        wait_for(lambda: everywhere(a, DEPTH)["custom"][0] == 200, 30, what="the queue depth")
        whole = {metric: everywhere(a, metric) for metric in (ATTAINMENT, DEPTH)}  # every replica's
        assert len(whole[DEPTH]["external"][1]) == 3, whole[DEPTH]  # one queue per replica, none missing
        killed = nodes[2].url.removeprefix("http://")
        nodes[2].stop(signal.SIGKILL)
        seen: list[Any] = []

        def missed() -> bool:
            seen.append(everywhere(a, RATIO)["external"])
            return seen[-1][0] == 503

        try:
            wait_for(missed, 30, what="the killed replica's exporter to be missed")
        finally:
            served = [answer for answer in seen if answer[0] != 503 and answer != (200, ["1900m"])]
            assert not served, f"answered without the killed replica: {served[:3]} ({len(served)} times)"
        for metric, before in whole.items():  # evaluated before the failed scrape, maybe: not for long
            later: list[dict[str, Any]] = []

            def gone(metric: str = metric, later: list[dict[str, Any]] = later) -> bool:
                later.append(everywhere(a, metric))
                return all(answer[0] in (503, "UNAVAILABLE") for answer in later[-1].values())

            try:
                wait_for(gone, 30, what=f"{metric} refused too")
            finally:  # every interface of every answer: the whole one, or refused
                served = [(name, answer) for seen_ in later for name, answer in seen_.items()
                          if answer != before[name] and answer[0] not in (503, "UNAVAILABLE")]  # fmt: skip
                assert not served, f"{metric} answered without the killed replica: {served[:3]}"
        for metric in (RATIO, ATTAINMENT, DEPTH):
            refused(everywhere(a, metric), killed)


@pytest.mark.parametrize("mode", ["direct", "prometheus", "victoria-metrics"])
def test_an_exporter_never_reached_might_hold_a_replica(mode: str, tmp_path: Path) -> None:
    with refused_port() as port, three_replicas(tmp_path) as nodes:
        never = Process(None, Path(), f"http://127.0.0.1:{port}")  # type: ignore[arg-type]
        with adapter_on(mode, tmp_path, [*nodes, never]) as a:
            seen: list[Any] = []

            def missed() -> bool:
                seen.append(everywhere(a, RATIO)["external"])
                return seen[-1][0] == 503 and f"127.0.0.1:{port}" in seen[-1][1]

            wait_for(missed, 30, what="the exporter never reached to be named")
            served = [answer for answer in seen if answer[0] == 200 and answer != (200, ["1900m"])]
            assert not served, f"answered without the replica it might hold: {served[:3]}"
            for metric in (RATIO, ATTAINMENT, DEPTH):
                refused(everywhere(a, metric), f"127.0.0.1:{port}")
