"""Adapter figures (issue 6), all on real processes: redis-server, the simulated exporter with a
Redis queue, Prometheus, and the adapter over HTTPS (its self-signed certificate).

1. External-metric GETs over TLS keep-alive with Debian's wrk: requests/s, p50, p99, and the
   adapter's CPU; one selector, and 1,000 distinct selectors in rotation. Authentication and
   authorization on, as deployed: every request carries a ServiceAccount-style bearer token,
   checked with a TokenReview and a SubjectAccessReview against a fake API server over HTTPS
   (tests/fake_apiserver.py), both cached; the script prints how many reviews were asked.
2. Upstream queries per refresh while 1,000 distinct selectors are asked (Prometheus mode):
   Prometheus's own count of /api/v1/query requests against the adapter's refresh count.
3. Direct-mode freshness: a Redis queue changes → the adapter serves the new depth (and how much
   of that is the exporter's own polling).
4. KEDA push latency: the queue goes from empty to non-empty → StreamIsActive says true.
5. prometheus-adapter configuration files (tests/fixtures/promadapter/: gpu-and-queues.yaml, and
   several-names.yaml whose rules expose several metrics each) served unchanged: Prometheus's own
   count of query API requests per refresh against the file's rules and the metrics they expose,
   while 1,000 distinct selectors are asked, with the per-request fallbacks counted apart.

    .venv/bin/python bench/adapter.py [--wrk-seconds 10] [--changes 20] [--window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common  # first: puts tests/ on sys.path for the test servers imported below
import grpc
import redis

# This script is bench/adapter.py: put the repository first so `adapter` names the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter_support import adapter, get, get_json
from fake_apiserver import FakeApiServer, Identity, rbac
from servers import exporter, http_get, prom_query, prometheus, redis_server, wait_for

from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc

EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_depth"
TOKEN = "bench-hpa-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
# 1,000 distinct selectors, all selecting the real queue (!qN: no label qN), so each is a 200 answer.
ROTATE = """
local paths = {}
for i = 0, 999 do
  paths[i + 1] = "%s?labelSelector=queue%%3Djobs,workload%%3Dworker,!q" .. i
end
local n = 0
request = function()
  n = n %% 1000 + 1
  return wrk.format("GET", paths[n])
end
"""


def run_wrk(url: str, connections: int, seconds: int, script: str | None = None) -> common.Latency:
    binary = shutil.which("wrk") or "wrk"
    args = [
        binary,
        f"-c{connections}",
        "-t2",
        f"-d{seconds}s",
        "--latency",
        "-H",
        f"Authorization: Bearer {TOKEN}",
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as lua:
        if script:
            lua.write(script)
            lua.flush()
            args += ["-s", lua.name]
        out = subprocess.run([*args, url], capture_output=True, text=True, timeout=seconds + 30).stdout
    found = {
        k: re.search(p, out, re.M)
        for k, p in {
            "p50": r"^\s+50%\s+(\S+)",
            "p99": r"^\s+99%\s+(\S+)",
            "rps": r"Requests/sec:\s+([\d.]+)",
        }.items()
    }
    if not all(found.values()) or "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk run failed or saw errors:\n{out}")

    def ms(text: str) -> float:
        value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return common.Latency(ms(found["p50"].group(1)), ms(found["p99"].group(1)), float(found["rps"].group(1)))  # type: ignore[union-attr]


def counter(url: str, pattern: str) -> float:
    text = get(url, AUTH)[2].decode()
    return sum(float(m.group(1)) for m in re.finditer(pattern + r"\S* ([0-9.e+]+)$", text, re.M))


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    p50 = statistics.median(ordered)
    return f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms"


def until(predicate: Callable[[], bool], timeout: float = 15.0) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise RuntimeError("timed out")
        time.sleep(0.005)
    return time.monotonic()


def depth_in(url: str) -> float:
    code, body = get_json(url + EXT + "?labelSelector=queue%3Djobs", headers=AUTH)
    return float(body["items"][0]["value"]) if code == 200 else -1.0


def exporter_depth(url: str) -> float:
    m = re.search(
        r'^rightsizer_queue_depth\{queue="jobs"[^}]*\} (\S+)$', http_get(url + "/metrics")[2].decode(), re.M
    )
    return float(m.group(1)) if m else -1.0


def freshness(
    queue: redis.Redis, sim_url: str, adapter_url: str, changes: int
) -> tuple[list[float], list[float]]:
    total, exporter_part = [], []
    for i in range(changes):
        queue.delete("jobs")
        until(lambda: depth_in(adapter_url) == 0)
        time.sleep(0.2 + (i % 7) * 0.13)  # change at varied phases of the polling cycles
        n = 3 + i
        start = time.monotonic()
        queue.rpush("jobs", *range(n))
        with ThreadPoolExecutor(2) as pool:  # watch both at once: each sees the change when it happens
            exporter_seen = pool.submit(until, lambda n=n: exporter_depth(sim_url) == n)
            adapter_seen = pool.submit(until, lambda n=n: depth_in(adapter_url) == n)
            published, served = exporter_seen.result(), adapter_seen.result()
        total.append(served - start)
        exporter_part.append(published - start)
    return total, exporter_part


async def push_latency(
    queue: redis.Redis, sim_url: str, grpc_address: str, changes: int
) -> tuple[list[float], list[float]]:
    total, after_publish = [], []
    meta = {"metric": "rightsizer_queue_depth", "labelSelector": "queue=jobs", "activationThreshold": "0"}
    async with grpc.aio.insecure_channel(grpc_address) as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="worker", namespace="prod", scalerMetadata=meta)
        for i in range(changes):
            queue.delete("jobs")
            while (await stub.IsActive(ref)).result:
                await asyncio.sleep(0.01)
            stream = stub.StreamIsActive(ref)
            await asyncio.sleep(0.3 + (i % 5) * 0.15)  # the stream is open and quiet (inactive)
            start = time.monotonic()
            queue.rpush("jobs", "x")
            watcher = asyncio.create_task(asyncio.to_thread(until, lambda: exporter_depth(sim_url) == 1))
            message = await asyncio.wait_for(stream.read(), 15)
            pushed = time.monotonic()
            published = await watcher
            assert message.result is True
            total.append(pushed - start)
            after_publish.append(pushed - published)
            stream.cancel()
    return total, after_publish


QUERIES = r'^prometheus_http_requests_total\{code="200",handler="/api/v1/query"'
REFRESHES = r"^rightsizer_adapter_refreshes_total"


def bench_requests(url: str, pid: int, connections: int, seconds: int, api: FakeApiServer) -> None:
    runs = [
        (4, "one selector", None),
        (connections, "one selector", None),
        (connections, "1,000 selectors in rotation", ROTATE % EXT),
    ]
    for conns, label, script in runs:
        before = common.cpu_seconds(pid)
        lat = run_wrk(url + EXT + "?labelSelector=queue%3Djobs", conns, seconds, script)
        cpu = 100 * (common.cpu_seconds(pid) - before) / seconds
        print(
            f"HTTPS keep-alive GETs, {conns} connections, {label}: {lat.requests_per_second:.0f} req/s, "
            f"p50 {lat.p50_ms:.2f} ms, p99 {lat.p99_ms:.2f} ms, adapter CPU {cpu:.0f}% of one core"
        )
    print(
        f"    authenticated and authorized: {len(api.token_reviews)} TokenReviews and "
        f"{len(api.access_reviews)} SubjectAccessReviews asked in all (cached 10 s each)"
    )


def bench_direct(queue: redis.Redis, sim_url: str, adapter_url: str, grpc_address: str, changes: int) -> None:
    total, part = freshness(queue, sim_url, adapter_url, changes)
    rest = [t - p for t, p in zip(total, part, strict=True)]
    print(f"direct-mode freshness, Redis change -> adapter value ({changes} changes): {percentiles(total)}")
    print(f"    Redis change -> exporter publishes: {percentiles(part)}")
    print(
        f"    exporter publishes -> adapter serves: {percentiles(rest)} (negative: seen by both in one poll)"
    )
    total, after = asyncio.run(push_latency(queue, sim_url, grpc_address, changes))
    print(f"KEDA StreamIsActive push, Redis change -> true received: {percentiles(total)}")
    print(f"    exporter publishes -> true received: {percentiles(after)}")


def bench_queries_per_refresh(prom_url: str, adapter_url: str, connections: int, window: int) -> None:
    rules = len(
        re.findall(r"^rightsizer_adapter_rule_up\{", get(adapter_url + "/metrics", AUTH)[2].decode(), re.M)
    )
    q0, r0 = counter(prom_url + "/metrics", QUERIES), counter(adapter_url + "/metrics", REFRESHES)
    lat = run_wrk(adapter_url + EXT, connections, window, ROTATE % EXT)
    time.sleep(1.1)  # the adapter renders its own /metrics at most once a second
    q1, r1 = counter(prom_url + "/metrics", QUERIES), counter(adapter_url + "/metrics", REFRESHES)
    print(
        f"Prometheus mode, 1,000 distinct selectors for {window} s ({lat.requests_per_second:.0f} req/s): "
        f"{q1 - q0:.0f} queries over {r1 - r0:.0f} refreshes = {(q1 - q0) / max(1, r1 - r0):.2f} per refresh "
        f"({rules} rules; which exporters are up and current rides in the rules' own queries)"
    )


PROMADAPTER_FILES = Path(__file__).resolve().parent.parent / "tests/fixtures/promadapter"
PROMADAPTER_REQUESTS = {  # an external metric each file serves, and the namespace it is asked in
    "gpu-and-queues.yaml": "namespaces/prod/rightsizer_queue_depth",
    "several-names.yaml": "namespaces/llm/queue_requests_per_second",
}
# 1,000 distinct selectors naming only `queue`, which the files' external rules keep (by (queue)):
# all answered from the refresh's vector, none needs a query of its own.
ROTATE_KEPT = """
local paths = {}
for i = 0, 999 do
  paths[i + 1] = "%s?labelSelector=queue%%20notin%%20(q" .. i .. ")"
end
local n = 0
request = function()
  n = n %% 1000 + 1
  return wrk.format("GET", paths[n])
end
"""
PER_REQUEST = r'^rightsizer_adapter_upstream_queries_total\{outcome="success",source="prometheus_per_request"'


def bench_promadapter(prom_url: str, window: int, connections: int, auth_flags: list[str], name: str) -> None:
    import yaml

    file = PROMADAPTER_FILES / name
    data = yaml.safe_load(file.read_text())
    rules = len(data.get("rules") or []) + len(data.get("externalRules") or [])
    path = "/apis/external.metrics.k8s.io/v1beta1/" + PROMADAPTER_REQUESTS[name]
    args = ["--prometheus-url", prom_url, "--refresh-interval", "1", *auth_flags]
    with adapter([*args, "--prometheus-adapter-config", str(file)]) as served:
        metrics = get(served.url + "/metrics", AUTH)[2].decode()
        exposed = len(re.findall(r"^rightsizer_adapter_rule_up\{", metrics, re.M))
        per_request = len(re.findall(r"^rightsizer_adapter_promadapter_per_request\{", metrics, re.M))

        def counts() -> tuple[float, float, float]:
            own = served.url + "/metrics"
            return counter(prom_url + "/metrics", QUERIES), counter(own, REFRESHES), counter(own, PER_REQUEST)

        q0, r0, p0 = counts()
        lat = run_wrk(served.url + path, connections, window, ROTATE_KEPT % path)
        time.sleep(1.1)
        q1, r1, p1 = counts()
    refreshes, own = max(1.0, r1 - r0), p1 - p0
    print(
        f"prometheus-adapter file {name} ({rules} rules -> {exposed} metrics served, {per_request} of them "
        f"per request), simulated fleet, 1,000 distinct selectors for {window} s "
        f"({lat.requests_per_second:.0f} req/s): {q1 - q0:.0f} query API requests over {refreshes:.0f} "
        f"refreshes, of which {own:.0f} per-request fallbacks; refreshes: {(q1 - q0 - own) / refreshes:.2f} "
        f"queries per refresh"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--window", type=int, default=20, help="seconds of the queries-per-refresh measurement")
    ap.add_argument(
        "--only-promadapter", action="store_true", help="run only the prometheus-adapter file step"
    )
    ap.add_argument(
        "--promadapter-file",
        choices=sorted(PROMADAPTER_REQUESTS),
        default=None,
        help="the file of tests/fixtures/promadapter to serve (default: every one)",
    )
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work shares them)")
    run(args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def delegated_auth(tmp: Path) -> tuple[FakeApiServer, list[str]]:
    """A fake API server that knows the bench's token, and the adapter flags that use it."""
    api = FakeApiServer(
        tmp,
        {TOKEN: Identity(READER)},
        rbac(
            {
                "user": READER,
                "verbs": ["list", "get"],
                "group": "external.metrics.k8s.io",
                "resources": ["*"],
            },
            {"user": READER, "paths": ["/metrics"]},
        ),
    )
    config = tmp / "adapter.yaml"
    k = api.config()
    config.write_text(
        f"kubernetes: {{api_url: '{k['api_url']}', ca_file: '{k['ca_file']}', token_file: "
        f"'{k['token_file']}'}}\n"
    )
    return api, ["--config", str(config)]


def run(args: argparse.Namespace) -> None:
    api, auth_flags = delegated_auth(Path(tempfile.mkdtemp()))
    try:
        run_with(args, api, auth_flags)
    finally:
        api.stop()


def run_with(args: argparse.Namespace, api: FakeApiServer, auth_flags: list[str]) -> None:
    if args.only_promadapter:
        with (
            exporter(["--simulate"]) as sim,
            prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as prom,
        ):
            wait_for(lambda: prom_query(prom.url, "rightsizer_queue_depth"), 30, what="the first scrape")
            for name in [args.promadapter_file] if args.promadapter_file else sorted(PROMADAPTER_REQUESTS):
                bench_promadapter(prom.url, args.window, args.connections, auth_flags, name)
        return
    with redis_server() as server:
        queue = redis.Redis(port=server.extra["port"], socket_timeout=5)
        config = Path(tempfile.mkdtemp()) / "exporter.yaml"
        config.write_text(
            f"queues:\n  - {{name: jobs, kind: redis, url: 'redis://127.0.0.1:{server.extra['port']}/0', "
            "key: jobs, labels: {namespace: prod, workload: worker}}\n"
        )
        with exporter(["--simulate", "--config", str(config)]) as sim:
            with adapter(["--exporter", sim.url, "--grpc-listen", "127.0.0.1:0", *auth_flags]) as direct:
                queue.rpush("jobs", *range(12))
                until(lambda: depth_in(direct.url) == 12)
                bench_requests(direct.url, direct.proc.pid, args.connections, args.wrk_seconds, api)
                bench_direct(queue, sim.url, direct.url, direct.extra["grpc"], args.changes)
            with prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as prom:
                wait_for(lambda: prom_query(prom.url, "rightsizer_queue_depth"), 30, what="the first scrape")
                with adapter(
                    ["--prometheus-url", prom.url, "--refresh-interval", "1", *auth_flags]
                ) as prom_mode:
                    bench_queries_per_refresh(prom.url, prom_mode.url, args.connections, args.window)
                for name in (
                    [args.promadapter_file] if args.promadapter_file else sorted(PROMADAPTER_REQUESTS)
                ):
                    bench_promadapter(prom.url, args.window, args.connections, auth_flags, name)


if __name__ == "__main__":
    main()
