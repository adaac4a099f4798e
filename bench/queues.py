"""Queue-depth figures (issue 4): 200 sources of mixed kinds polled at 1 s.

Prints the exporter's CPU (% of one core, from /proc/<pid>/stat) and scrape latency (wrk) on the
simulated fleet with no queue configured and with 200 queues, then the distribution of the delay
from a change at a source to the changed value being published by the exporter.

The HTTP sources (vLLM, TGI, Triton, SGLang, custom exposition, JSON; one loopback port each, as
separate servers would be) are lean responders in a child process, Redis is a real redis-server;
neither counts
towards the exporter's CPU.

    .venv/bin/python bench/queues.py [--seconds 60] [--wrk-seconds 10] [--changes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httptools
from common import PROMETHEUS_HEADERS, measure_cpu, wrk
from servers import Process, exporter, http_get, redis_server, wait_for

# 200 sources: (kind, how many).
MIX = (
    ("vllm", 40),
    ("tgi", 25),
    ("triton", 25),
    ("sglang", 25),
    ("prometheus", 25),
    ("http_json", 20),
    ("redis_list", 15),
    ("redis_stream", 10),
    ("redis_zset", 5),
    ("redis_group", 10),
)


def names() -> list[tuple[str, str]]:
    return [(kind, f"{kind}-{i}") for kind, count in MIX for i in range(count)]


# -- the HTTP sources, in a child process -------------------------------------------------------------
class Responder(asyncio.Protocol):
    """One source's server: answers every GET with the source's current exposition or JSON, kept
    alive. Real sources are separate servers answering in parallel; a lean responder (pre-rendered
    bytes, httptools for the request) keeps 160 of them sharing one process from becoming the
    bottleneck of what is measured."""

    def __init__(self, answer: Callable[[str], bytes]) -> None:
        self.answer = answer
        self.parser = httptools.HttpRequestParser(self)
        self.path = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.path += url

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(self.answer(self.path.decode()))
        self.path = b""


def serve_sources() -> None:
    from queue_fakes import SglangMetrics, VllmMetrics, json_body, tgi_metrics, triton_metrics

    http = [(kind, name) for kind, name in names() if not kind.startswith("redis")]
    values = {name: 1.0 for _, name in http}
    vllm = {name: VllmMetrics() for kind, name in http if kind == "vllm"}
    sglang = {name: SglangMetrics() for kind, name in http if kind == "sglang"}
    cache: dict[str, tuple[float, bytes]] = {}

    def response(body: bytes, content_type: str) -> bytes:
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        return head.encode() + body

    def answer(kind: str, name: str) -> bytes:
        value = values[name]
        cached = cache.get(name)
        if cached and cached[0] == value:
            return cached[1]
        if kind == "vllm":
            vllm[name].set([value], [2])
            body = vllm[name].render()
        elif kind == "sglang":
            sglang[name].set(value, 3)
            body = sglang[name].render()
        elif kind == "tgi":
            body = tgi_metrics(value, 4)
        elif kind == "triton":
            body = triton_metrics({"resnet50": value, "bert-large": 0})
        elif kind == "prometheus":
            body = (
                "# HELP jobs_waiting Jobs waiting.\n# TYPE jobs_waiting gauge\n"
                f'jobs_waiting{{priority="high"}} {value:g}\njobs_waiting{{priority="low"}} 7\n'
            ).encode()
        else:
            body = json_body({"queue": {"waiting": value, "running": 1}})
        ctype = "application/json" if kind == "http_json" else "text/plain; version=0.0.4; charset=utf-8"
        cache[name] = (value, response(body, ctype))
        return cache[name][1]

    def increment(path: str) -> bytes:  # GET /_inc/<name> on the control port: value + 1
        name = path.rsplit("/", 1)[1]
        values[name] += 1
        return response(f"{values[name]:g}".encode(), "text/plain")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        urls = {}
        for kind, name in http:
            server = await loop.create_server(
                lambda k=kind, n=name: Responder(lambda _path: answer(k, n)), "127.0.0.1", 0, backlog=64
            )
            urls[name] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
        control = await loop.create_server(lambda: Responder(increment), "127.0.0.1", 0)
        port = control.sockets[0].getsockname()[1]
        print(json.dumps({"urls": urls, "control": f"http://127.0.0.1:{port}/_inc"}), flush=True)
        await asyncio.to_thread(sys.stdin.read)  # serve until the parent closes our stdin

    asyncio.run(main())


@contextlib.contextmanager
def http_sources() -> Iterator[tuple[dict[str, str], str, subprocess.Popen[str]]]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-sources"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        yield info["urls"], info["control"], proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


# -- configuration -------------------------------------------------------------------------------------
def queue_entries(urls: dict[str, str], redis_url: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for kind, name in names():
        entry: dict[str, Any] = {"name": name, "labels": {"namespace": "bench", "workload": name}}
        if kind.startswith("redis"):
            entry.update(kind="redis", url=redis_url, key=name)
            if kind == "redis_group":
                entry["group"] = "workers"
        else:
            entry.update(kind=kind, url=urls[name])
            if kind == "prometheus":
                entry.update(metric="jobs_waiting", match={"priority": "high"})
            elif kind == "http_json":
                entry.update(path="queue.waiting", in_flight_path="queue.running")
        entries.append(entry)
    return entries


def fill_redis(port: int) -> None:
    import redis

    r = redis.Redis(port=port)
    for kind, name in names():
        if kind == "redis_list":
            r.rpush(name, "job")
        elif kind == "redis_zset":
            r.zadd(name, {"job-0": 0})
        elif kind in ("redis_stream", "redis_group"):
            r.xadd(name, {"n": 0})
            if kind == "redis_group":
                r.xgroup_create(name, "workers", id="0")


# -- measurements --------------------------------------------------------------------------------------
def cost(p: Process, seconds: int, wrk_seconds: int) -> tuple[float, float, float, int]:
    url = p.url + "/metrics"
    series = sum(1 for ln in http_get(url)[2].decode().splitlines() if ln and not ln.startswith("#"))
    time.sleep(3)
    cpu, _ = measure_cpu(p.proc.pid, seconds, during=lambda: http_get(url, PROMETHEUS_HEADERS))
    latency = wrk(url, 1, wrk_seconds, PROMETHEUS_HEADERS)
    return cpu, latency.p50_ms, latency.p99_ms, series


def change_latencies(p: Process, control: str, redis_port: int, changes: int) -> list[tuple[str, float]]:
    """Change tracked sources at random moments (about four changes a second, each source every
    ten seconds or so) and record when the exporter first serves each new value: a watcher thread
    reads ``/api/v1/queues`` every 20 ms over keep-alive, so figures are up to ~25 ms high (reading it
    more often loads the 2-core test machine enough to slow the exporter down)."""
    import redis

    r = redis.Redis(port=redis_port)
    tracked = [(kind, name) for kind, name in names() if name.endswith(("-0", "-1", "-2", "-3"))]
    current = {name: 1.0 for _, name in tracked}
    pending: dict[str, tuple[float, float]] = {}  # name -> (expected depth, time of the change)
    results: list[tuple[str, float]] = []
    lock = threading.Lock()
    done = threading.Event()

    def watch() -> None:
        api = urlsplit(p.url)
        conn = http.client.HTTPConnection(api.hostname, api.port, timeout=5)
        while not done.is_set():
            conn.request("GET", "/api/v1/queues")
            items = json.loads(conn.getresponse().read())["queues"]
            seen = time.time()
            with lock:
                for q in items:
                    want = pending.get(q["name"])
                    if want is not None and q["depth"] == want[0]:
                        results.append(
                            (
                                q["kind"] if q["kind"] != "redis" else q["name"].rsplit("-", 1)[0],
                                seen - want[1],
                            )
                        )
                        del pending[q["name"]]
            time.sleep(0.020)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ctl = urlsplit(control)
    control_conn = http.client.HTTPConnection(ctl.hostname, ctl.port, timeout=5)
    try:
        for i in range(changes):
            kind, name = tracked[i % len(tracked)]
            time.sleep(random.uniform(0.1, 0.4))  # random phase against the 1 s render grid
            with lock:
                if name in pending:
                    raise RuntimeError(f"{name}: previous change not published after ten seconds")
            current[name] += 1
            started = time.time()
            with lock:
                pending[name] = (current[name], started)
            if kind == "redis_list":
                r.rpush(name, "job")
            elif kind == "redis_zset":
                r.zadd(name, {f"job-{i + 1}": i + 1})
            elif kind in ("redis_stream", "redis_group"):
                r.xadd(name, {"n": i + 1})
            else:
                control_conn.request("GET", f"/_inc/{name}")
                assert float(control_conn.getresponse().read()) == current[name]
        wait_for(lambda: not pending, 10, what="the last changes to be published")
    finally:
        done.set()
        watcher.join(5)
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def print_parse_costs() -> None:
    from latency_parse import costs, kv_pool_cost

    rows = costs()
    print("latency histograms read on the same poll (in-process CPU per poll, parsed as the page arrives):")
    for kind, full, bare, kept in rows:
        print(f"  {kind:>7}: {full:7.0f} us per poll, {bare:7.0f} us without them: +{full - bare:.0f} us "
              f"({kept} latency lines kept)")  # fmt: skip
    by = {kind: full - bare for kind, full, bare, _ in rows}
    mix = dict(MIX)
    added = sum(by[k] * mix[k] for k in by) / 1000
    print(f"  for this benchmark's 200 sources at 1 s ({', '.join(f'{mix[k]} {k}' for k in by)}): "
          f"+{added:.1f} ms of CPU per second = +{added / 10:.2f} % of one core")  # fmt: skip
    with_pool, without = kv_pool_cost()
    print(f"  vLLM's KV-cache pool (cache_config_info) read on the same poll: {with_pool:.0f} us per poll, "
          f"{without:.0f} us without it: +{with_pool - without:.0f} us")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60, help="CPU measuring window per configuration")
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--changes", type=int, default=300, help="source changes timed to publication")
    ap.add_argument("--serve-sources", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--parse-only", action="store_true", help="only what latency histograms add per poll")
    args = ap.parse_args()
    if args.serve_sources:
        serve_sources()
        return
    print_parse_costs()
    if args.parse_only:
        return

    base = ["--simulate", "--interval", "1"]
    with exporter(base) as p:
        none = cost(p, args.seconds, args.wrk_seconds)
    with redis_server() as rds, http_sources() as (urls, control, _), tempfile.TemporaryDirectory() as tmp:
        fill_redis(rds.extra["port"])
        config = Path(tmp) / "exporter.yaml"
        config.write_text(json.dumps({"queues": queue_entries(urls, rds.url)}))
        with exporter([*base, "--config", str(config)]) as p:
            ours = {name for _, name in names()}  # the simulated fleet adds queues of its own

            def all_up() -> bool:
                items = json.loads(http_get(p.url + "/api/v1/queues")[2])["queues"]
                up = {q["name"] for q in items if q["name"] in ours and q["up"]}
                return up == ours

            wait_for(all_up, 30, what="all 200 queue sources up")
            with200 = cost(p, args.seconds, args.wrk_seconds)
            by_kind = change_latencies(p, control, rds.extra["port"], args.changes)
            delays = [d for _, d in by_kind]
            items = json.loads(http_get(p.url + "/api/v1/queues")[2])["queues"]
            stalled = [q for q in items if q["name"] in ours and not q["up"]]

    print(f"exporter on the simulated fleet (8 GPUs), 1 s sampling, scraped once a second, {args.seconds} s:")
    for label, (cpu, p50, p99, series) in (("no queues", none), ("200 queues", with200)):
        print(
            f"  {label:>10}: CPU {cpu:5.2f}% of one core; scrape p50 {p50:.2f} ms, p99 {p99:.2f} ms "
            f"({series} series, 1 keep-alive scraper)"
        )
    print(f"  200 queues add {with200[0] - none[0]:.2f}% of one core")
    print(
        f"change at a source -> value published, {len(delays)} changes at random moments "
        f"(interval 1 s): p50 {percentile(delays, 50) * 1000:.0f} ms, "
        f"p99 {percentile(delays, 99) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
    )
    for kind, _ in MIX:
        mine = [d for k, d in by_kind if k == kind]
        if mine:
            print(f"    {kind:>12}: p50 {percentile(mine, 50) * 1000:.0f} ms, max {max(mine) * 1000:.0f} ms")
    late = sum(1 for d in delays if d > 1.1)
    print(
        f"  p90 {percentile(delays, 90) * 1000:.0f} ms, p95 {percentile(delays, 95) * 1000:.0f} ms; "
        f"{late} of {len(delays)} over interval + 100 ms; sources down at the end: {len(stalled)}"
    )


if __name__ == "__main__":
    main()
