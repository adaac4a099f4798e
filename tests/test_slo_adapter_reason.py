"""The 503 of a declared SLO that cannot be judged quotes the exporter's reason, in every mode.

Real processes: a simulated exporter polls one vLLM page of workload ``llm/chat`` (TTFT SLO 0.5 s)
and the adapter reads it directly, or from a real Prometheus or VictoriaMetrics scraping it.
Written before running: a page on which no request has arrived yet cannot be judged, "too few
requests in the window"; the same server publishing negative ``le`` bounds is "invalid histogram:
vllm:time_to_first_token_seconds: an le bound is negative" (see test_histogram_refused). Each is
quoted, after ``rightsizer_workload_slo_scaling_up is 0``, by every interface's 503 (external,
custom, KEDA metrics-api; gRPC UNAVAILABLE), the current one and not the one before. Prometheus
mode asks it inside the rule's own query (test_adapter_source_states counts the queries).

A reason is the source's own text, so it is bounded: a page published as an exporter does carries
a 5,000-character reason with a newline and a tab, and two reasons for one workload. The 503 quotes
the first 197 characters on one line and "...", and the first reason in order with how many more.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import ANONYMOUS, adapter, exposition, get_json, keda_get_metrics
from queue_servers import FakeHttpServer
from servers import Process, exporter, http_get, prometheus, wait_for
from victoria_metrics import victoria_metrics

RATIO = "rightsizer_workload_slo_latency_ratio"
ATTAINMENT = "rightsizer_workload_slo_attainment_ratio"
TTFT = "vllm:time_to_first_token_seconds"
MODES = ["direct", "prometheus", "victoria-metrics"]


def vllm_page(bounds: list[tuple[str, str]]) -> str:
    labels = 'engine="0",model_name="m"'
    lines = [f"vllm:num_requests_waiting{{{labels}}} 0", f"# TYPE {TTFT} histogram"]
    lines += [f'{TTFT}_bucket{{{labels},le="{le}"}} {n}' for le, n in bounds]
    lines += [f"{TTFT}_sum{{{labels}}} 0", f"{TTFT}_count{{{labels}}} {bounds[-1][1]}"]
    return "\n".join(lines) + "\n"


IDLE = vllm_page([("0.1", "0"), ("0.5", "0"), ("1.0", "0"), ("+Inf", "0")])  # no request yet
NEGATIVE = vllm_page([("-1.0", "200"), ("-0.5", "200"), ("+Inf", "200")])


@contextlib.contextmanager
def adapter_on(mode: str, tmp: Path, target: str) -> Iterator[Process]:
    """The adapter reading the exporter at ``target`` (host:port, /metrics) in ``mode``."""
    config = tmp / "adapter.yaml"
    config.write_text("direct:\n  stale_after_seconds: 1\n" if mode == "direct" else "{}\n")
    args = ["--config", str(config), "--grpc-listen", "127.0.0.1:0"]
    with contextlib.ExitStack() as stack:
        if mode == "direct":
            args += ["--exporter", f"http://{target}"]
        elif mode == "victoria-metrics":
            jobs = (f"  - job_name: rightsizer-exporter\n    scrape_interval: 1s\n    static_configs:\n"
                    f"      - targets: {json.dumps([target])}")  # fmt: skip
            args += ["--prometheus-url", stack.enter_context(victoria_metrics(jobs)).url]
            args += ["--refresh-interval", "0.5"]
        else:
            prom = stack.enter_context(prometheus({"rightsizer-exporter": [target]}))
            args += ["--prometheus-url", prom.url, "--refresh-interval", "0.5"]
        yield stack.enter_context(adapter(args, env=ANONYMOUS))


def everywhere(a: Process, metric: str, workload: str) -> dict[str, Any]:
    """What every interface answers for ``llm/<workload>``: (code, value or message)."""
    selector = f"workload={workload}"
    query = urllib.parse.urlencode({"labelSelector": selector})
    code, body = get_json(f"{a.url}/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{metric}?{query}")
    out: dict[str, Any] = {"external": (code, body["message"] if code != 200 else body["items"])}
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/llm/deployments/{workload}/{metric}"
    code, body = get_json(a.url + path)
    out["custom"] = (code, body["message"] if code != 200 else body["items"])
    query = urllib.parse.urlencode({"labelSelector": selector, "namespace": "llm"})
    code, body = get_json(f"{a.url}/keda/v1/metrics/{metric}?{query}")
    out["metrics_api"] = (code, body["message"] if code != 200 else body["value"])
    out["get_metrics"] = keda_get_metrics(a.extra["grpc"], "llm", workload, metric, selector, "0.8")
    return out


def quoting(reason: str) -> Callable[[dict[str, Any]], bool]:
    """Whether every interface refuses, quoting ``reason`` after the flag."""
    codes = {"external": 503, "custom": 503, "metrics_api": 503, "get_metrics": "UNAVAILABLE"}
    quoted = f"rightsizer_workload_slo_scaling_up is 0 ({reason})"
    return lambda seen: {k: v[0] for k, v in seen.items()} == codes and all(
        quoted in message for _, message in seen.values()
    )


def until(a: Process, workload: str, check: Callable[[dict[str, Any]], bool], what: str) -> None:
    seen: list[dict[str, Any]] = []

    def done() -> bool:
        seen.append(everywhere(a, RATIO, workload))
        return check(seen[-1])

    try:
        wait_for(done, 45, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last answers: {seen[-1] if seen else None}") from None


def _scaling_up(p: Process) -> str:
    text = http_get(p.url + "/metrics")[2].decode()
    lines = [line for line in text.splitlines() if line.startswith("rightsizer_workload_slo_scaling_up{")]
    return lines[0].rsplit(" ", 1)[1] if lines else ""


@pytest.mark.parametrize("mode", MODES)
def test_the_503_quotes_the_exporters_current_reason(mode: str, tmp_path: Path) -> None:
    now = {"page": IDLE}
    with FakeHttpServer() as http:
        http.route("/vllm", body=lambda: now["page"].encode())
        config = tmp_path / "exporter.yaml"
        config.write_text(yaml.safe_dump({
            "queues": [{"name": "chat", "kind": "vllm", "url": http.url("/vllm"), "backoff_max": 1,
                        "labels": {"namespace": "llm", "workload": "chat"}}],
            "slos": [{"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5}],
        }))  # fmt: skip
        with exporter(["--simulate", "--interval", "0.5", "--config", str(config)]) as p:
            wait_for(lambda: _scaling_up(p) == "0", 30, what="chat polled and not judged")
            with adapter_on(mode, tmp_path, p.url.removeprefix("http://")) as a:
                until(a, "chat", quoting("too few requests in the window"), "the idle page's reason")
                now["page"] = NEGATIVE
                reason = f"invalid histogram: {TTFT}: an le bound is negative"
                until(a, "chat", quoting(reason), "the negative bounds' reason")
                assert quoting(reason)(everywhere(a, ATTAINMENT, "chat"))  # the other SLO rule too
                assert "too few requests" not in str(everywhere(a, RATIO, "chat"))
                assert "Traceback" not in a.log()


LONG = "first line\n\tsecond " + "x" * 5000  # what a reason label may hold: newline, tab, any length
HOSTILE = exposition(
    {
        "rightsizer_workload_slo_scaling_up": [
            ({"namespace": "llm", "workload": "long"}, 0),
            ({"namespace": "llm", "workload": "two"}, 0),
        ],
        "rightsizer_workload_slo_scaling_unjudged_info": [
            ({"namespace": "llm", "workload": "long", "reason": LONG.replace("\n", "\\n")}, 1),
            ({"namespace": "llm", "workload": "two", "reason": "too few requests in the window"}, 1),
            ({"namespace": "llm", "workload": "two", "reason": "sources down"}, 1),
        ],
    }
)


@pytest.mark.parametrize("mode", MODES)
def test_a_reason_is_bounded_in_length_and_count(mode: str, tmp_path: Path) -> None:
    # the stamp an exporter publishes, moving at every scrape: this page is current, not frozen
    page = lambda: (HOSTILE + f"rightsizer_last_sample_timestamp_seconds {time.time()!r}\n").encode()  # noqa: E731
    one_line = ("first line second " + "x" * 5000)[:197] + "..."
    with FakeHttpServer() as http:
        http.route("/metrics", body=page)
        with adapter_on(mode, tmp_path, f"127.0.0.1:{http.ports[0]}") as a:
            until(a, "long", quoting(one_line), "the long reason, bounded")
            assert "x" * 198 not in str(everywhere(a, RATIO, "long"))
            until(a, "two", quoting("sources down (and 1 more)"), "the first of two reasons")
