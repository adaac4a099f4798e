"""Hostile sources against the exporter, for bench/hostile.py: each case runs the real exporter (a
simulated 2-GPU fleet with no queues of its own, ``tests/hostile_sources.py``) under the launcher
that reads its peak RSS, beside one well-behaved vLLM source, and prints the peak against the
manifest's limit with what became of the hostile source.

Cases: a vLLM answer of 281,472 series just under the 16 MiB body cap (one source, then two), a
vLLM series with a 15 MiB label value, 15 MiB of JSON empty objects and JSON nested 100,000 deep
(http_json), a real Redis stream with 150,000 consumer groups, a fake Redis answering with a
gigabyte string and with a billion-element array (``tests/resp_fake.py``), the fake kubelet (real
pod-resources gRPC) answering 120,000 pods (~20 MB); and the same exporter with only the
well-behaved source, for comparison.

Then the adapter in direct mode (``run_adapter``) scraping one simulated exporter and one hostile
endpoint (the answers of ``tests/test_hostile_scrape.py``): a body that never ends, a 600 KB gzip
bomb, a valid 60 MB exposition, 80,000 series under the byte cap.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from adapter_support import get_json
from gpu_rig import scenario
from hostile_clients import manifest_memory_limit
from hostile_runs import finish, start
from hostile_sources import MIB, gpu_pods, long_label, many_series, measured_exporter
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_raw_answer
from queue_fakes import VllmMetrics
from queue_servers import FakeHttpServer
from resp_fake import HostileRedis
from servers import exporter, redis_server, wait_for
from test_hostile_scrape import HOSTILE

WAITING = "vllm:num_requests_waiting"
LISTENING = re.compile(r"msg=listening address=(\S+)")
JSON = "application/json"
Case = Callable[[Path, FakeHttpServer], contextlib.AbstractContextManager[tuple[dict[str, Any], str]]]


def vllm(count: int) -> Case:
    body = many_series(WAITING, 16 * MIB)

    @contextlib.contextmanager
    def case(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
        srv.route("/huge", body=body)
        queues = [{"name": f"hostile{i}", "kind": "vllm", "url": srv.url("/huge")} for i in range(count)]
        yield {"queues": queues}, "queue hostile0"

    return case


def http(route: str, body: bytes, entry: dict[str, Any], content_type: str | None = None) -> Case:
    @contextlib.contextmanager
    def case(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
        srv.route(route, body=body, **({"content_type": content_type} if content_type else {}))
        yield {"queues": [{"name": "hostile", "url": srv.url(route), **entry}]}, "queue hostile"

    return case


@contextlib.contextmanager
def groups_case(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
    with redis_server() as server:
        r = redis.Redis(port=server.extra["port"])
        r.xadd("jobs", {"n": 1})
        with r.pipeline(transaction=False) as pipe:
            for i in range(150_000):
                pipe.xgroup_create("jobs", f"group-{i}", id="0")
            pipe.execute()
        entry = {"name": "hostile", "kind": "redis", "url": server.url, "key": "jobs", "group": "group-7"}
        yield {"queues": [{**entry, "timeout": 10}]}, "queue hostile"


def hostile_redis(mode: str) -> Case:
    @contextlib.contextmanager
    def case(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
        with HostileRedis(mode) as hostile:
            yield {"queues": [{"name": "hostile", "kind": "redis", "url": hostile.url, "key": "jobs"}]}, (
                "queue hostile"
            )
            print(f"    (the fake Redis sent {hostile.sent / MIB:.1f} MiB before the exporter hung up)")

    return case


@contextlib.contextmanager
def kubelet_case(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
    directory = short_socket_dir()
    try:
        size = write_raw_answer(directory / "answer.json", gpu_pods(120_000))
        print(f"    (the kubelet's answer: {size / 1e6:.1f} MB)")
        socket = directory / "kubelet.sock"
        with kubelet_process(socket, directory / "answer.json"):
            settings = {"enabled": True, "socket": str(socket), "refresh_interval_seconds": 2}
            yield {"pods": {**settings, "timeout_seconds": 1.5}}, "pods"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def nothing_hostile(tmp: Path, srv: FakeHttpServer) -> Iterator[tuple[dict[str, Any], str]]:
    yield {"queues": []}, "queue good"


CASES: dict[str, Case] = {
    "well-behaved vLLM source only": nothing_hostile,
    "vLLM answer of 281,472 series, just under 16 MiB": vllm(1),
    "two such vLLM sources": vllm(2),
    "vLLM series with a 15 MiB label value": http("/label", long_label(WAITING, 15 * MIB), {"kind": "vllm"}),
    "http_json: 15 MiB of empty objects": http(
        "/wide", b"[" + b"{}," * (5 * MIB) + b"{}]", {"kind": "http_json", "path": "waiting"}, JSON
    ),
    "http_json: nested 100,000 deep": http(
        "/deep", b"[" * 100_000 + b"]" * 100_000, {"kind": "http_json", "path": "waiting"}, JSON
    ),
    "Redis stream with 150,000 consumer groups (timeout 10 s)": groups_case,
    "Redis answering a 1 GiB string": hostile_redis("huge-string"),
    "Redis answering a billion-element array": hostile_redis("many-elements"),
    "kubelet answering 120,000 pods": kubelet_case,
}


def outcome_of(running: Any, what: str) -> str:
    if what == "pods":
        pods = running.api("pods")
        return f"pod attribution ok={pods.get('ok')} error={pods.get('error')!r}"
    name = what.split()[1]
    q = running.queue(name)
    return f"{name}: up={q['up']} depth={q['depth']} error={q['error']!r}"


def peak_line(outcome: Any, limit: int) -> str:
    if outcome.returncode is None:
        return "did not stop within 30 s of SIGTERM: killed, its peak not recorded"
    peak = outcome.max_rss_bytes
    verdict = "under" if peak < limit else "OVER"
    return (
        f"peak RSS {peak / MIB:.0f} MiB ({verdict} the {limit / MIB:.0f} MiB limit), "
        f"exit {outcome.returncode}"
    )


def run(seconds: float = 8.0) -> None:
    limit = manifest_memory_limit("exporter")
    print(
        f"\nexporter against hostile sources: peak RSS over each whole run (simulated 2-GPU fleet, "
        f"{seconds:.0f} s per case, loopback), manifest limit {limit / MIB:.0f} MiB"
    )
    good = VllmMetrics()
    good.set([5], [2])
    for title, make in CASES.items():
        with tempfile.TemporaryDirectory(prefix="hostile-") as tmp, FakeHttpServer() as srv:
            srv.route("/good", body=good.render())
            print(f"  {title}:")
            with make(Path(tmp), srv) as (config, what):
                good_entry = {"name": "good", "kind": "vllm", "url": srv.url("/good")}
                config.setdefault("queues", []).append(good_entry)
                with measured_exporter(Path(tmp), config) as running:
                    time.sleep(seconds)
                    seen = outcome_of(running, what)
                    served = "" if what == "queue good" else f"beside it, {outcome_of(running, 'queue good')}"
            outcome = running.outcome
            assert outcome is not None
            print(f"    {peak_line(outcome, limit)}")
            print(f"    {seen}")
            if served:
                print(f"    {served}")


def run_adapter(seconds: float = 10.0) -> None:
    limit = manifest_memory_limit("adapter")
    print(
        f"\nadapter in direct mode against a hostile exporter beside a simulated one: peak RSS over each "
        f"whole run ({seconds:.0f} s of scrapes per case, loopback), manifest limit {limit / MIB:.0f} MiB"
    )
    for title, (chunks, encoding, _) in HOSTILE.items():
        with tempfile.TemporaryDirectory(prefix="hostile-") as name:
            tmp = Path(name)
            with exporter(["--simulate", str(scenario(tmp, "a"))]) as good, FakeHttpServer() as srv:
                route = srv.route("/metrics", chunks=chunks, encoding=encoding)
                args = ["--exporter", good.url, "--exporter", srv.url("/metrics"), "--insecure-http"]
                proc = start("adapter", [*args, "--listen", "127.0.0.1:0"], tmp)
                try:
                    found = wait_for(lambda err=tmp / "adapter.err": LISTENING.search(err.read_text()), 30)
                    time.sleep(seconds)
                    base = f"http://{found.group(1)}/apis/external.metrics.k8s.io/v1beta1/namespaces/prod"
                    try:
                        code, body = get_json(f"{base}/rightsizer_gpu_busy?labelSelector=workload%3Dworker")
                    except OSError as exc:  # an adapter swamped by the answer may not answer in time
                        code, body = 0, {"message": f"no answer: {exc}"}
                finally:
                    proc.send_signal(signal.SIGTERM)
                    outcome = finish(proc, "adapter", tmp, 30)
            print(f"  {title} ({route.requests} scrapes of it):")
            print(f"    {peak_line(outcome, limit)}")
            print(f"    the workload's gpu_busy: HTTP {code}: {str(body.get('message', body))[:240]}")
