"""Fleet-scale figures of the adapter in Prometheus mode (issue 16, part 3), on real processes.

A fleet's current series (default 40,000 GPUs on 5,000 nodes, ``fleet_history``'s workloads and
label sets): per GPU its utilisation, pod memory, verdict (5 series) and fit score; per serving
GPU its queue's depth, in-flight count and source-up. Each node is one scrape target, as in a real
fleet (one exporter per node): one loopback HTTP server serves every node's exposition at its own
path, with ``rightsizer_last_sample_timestamp_seconds`` moving at every scrape like an exporter's,
and the job (``rightsizer-exporter``, ``honor_labels`` as shipped) sets each target's ``instance``
to its node's, so every series has its target's ``up``. They are scraped every 30 s by
Prometheus, then by VictoriaMetrics (``-promscrape.config``, same job), one engine at a time.
Against each engine, two adapter replicas (HTTPS, self-signed certificate, bearer tokens checked
through TokenReview and SubjectAccessReview against tests/fake_apiserver.py, refresh every 5 s
unless told, the built-in rules) and 1,000 distinct HPA-style selectors (700 queue depths, 300 pod
GPU utilisations, each naming one workload) in rotation with Debian's wrk. Printed per
engine: series held, mean and slowest upstream query per rule (the adapter's own histogram),
upstream queries per refresh (the adapter's own counters), adapter RSS, requests/s and p50/p99
over TLS, and whether both replicas give the same answer to each of the 1,000 selectors. With
``--rate R`` the load is paced instead of flat out: wrk's ``delay()`` hook makes each connection wait
before each request, the wait set again every second so that the connections together send R
requests/s (the achieved rate is printed: a wait after each answer sends less while answers are
slower than the cycle). Each engine's figures are then printed against issue 32's goals (selectors
answered, replicas identical, refresh within its interval, freshness, upstream query per rule,
queries per refresh, peak RSS of both replicas, p99 when paced), what one rule's query costs
the engine part by part, and what each rule's whole query costs it, asked alone.

    .venv/bin/python bench/fleet_adapter.py [--gpus 40000] [--engines prometheus,victoria-metrics]
        [--connections 32] [--seconds 20] [--rate 2000]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package
sys.path.insert(1, str(BENCH.parent / "tests"))
sys.path.append(str(BENCH))

import common  # noqa: E402
import fleet_history as fh  # noqa: E402
from adapter_support import get, insecure_context, start_adapter  # noqa: E402
from servers import Process, prometheus, wait_for  # noqa: E402
from victoria_metrics import victoria_metrics  # noqa: E402

from adapter.config import PrometheusSettings  # noqa: E402
from exporter.sources.simulated import workloads as wl  # noqa: E402

_spec = importlib.util.spec_from_file_location("adapter_bench", BENCH / "adapter.py")
assert _spec and _spec.loader
adapter_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter_bench)

IDLE_SECONDS = next(f.default for f in fields(PrometheusSettings) if f.name == "rule_idle_seconds")
JOB = "rightsizer-exporter"
STAMP = "rightsizer_last_sample_timestamp_seconds"
VERDICTS = ("idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data")
VERDICT_OF = {"idle": "idle", "training": "rightsized", "memory_saturated": "underprovisioned",
              "launch_overhead": "overprovisioned", "steady_inference": "overprovisioned"}  # fmt: skip
EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/"


def expositions(gpus: list[fh.Gpu]) -> tuple[list[tuple[str, bytes]], list[str], int]:
    """((instance, exposition) of each node, serving workloads, series in all). The labels a scrape
    adds (``instance``, ``job``) are left to the scrape, as an exporter does."""
    t = time.time()
    nodes: dict[int, tuple[str, list[str]]] = {}
    workloads: list[str] = []
    for g in gpus:
        labels = g.prefix[3].split("{", 1)[1]  # DCGM_FI_DEV_GPU_UTIL's labels, closing brace kept
        instance = re.search(r'instance="([^"]+)"', labels).group(1)  # type: ignore[union-attr]
        labels = re.sub(r',(instance|job)="[^"]*"', "", labels)
        out = nodes.setdefault(g.node, (instance, []))[1]
        a = wl.evaluate(g.workload, g.noise, t, 86400.0)
        own = labels.replace("modelName=", "model_name=")
        out.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels} {round(100 * a.utilization)}")
        out.append(f"rightsizer_pod_gpu_memory_used_bytes{{{own} {round(a.memory_bytes)}")
        verdict = VERDICT_OF.get(g.workload.kind, "rightsized")
        for v in VERDICTS:
            out.append(f'rightsizer_gpu_verdict{{{own[:-1]},verdict="{v}"}} {int(v == verdict)}')
        out.append(f"rightsizer_gpu_fit_score{{{own} {0.3 + 0.6 * g.noise.fixed('phase', 7):.3f}")
        if g.queue:
            q = re.sub(r',(instance|job)="[^"]*"', "", g.queue.split("{", 1)[1])
            workloads.append(re.search(r'workload="([^"]+)"', q).group(1))  # type: ignore[union-attr]
            out.append(f"rightsizer_queue_depth{{{q} {round(a.queue_depth)}")
            out.append(f"rightsizer_queue_in_flight{{{q} {round(a.in_flight)}")
            out.append(f"rightsizer_queue_source_up{{{q} 1")
    bodies = [(instance, ("\n".join(lines) + "\n").encode()) for instance, lines in nodes.values()]
    return bodies, workloads, sum(len(lines) + 1 for _, lines in nodes.values())  # and each node's stamp


@contextmanager
def serving(bodies: list[tuple[str, bytes]]) -> Iterator[str]:
    """Each node's exposition at /n/<i> on one loopback port, its sample stamp set at each scrape
    (so the engine sees a live exporter, not a frozen one); yields the scrape_configs item: one
    target per node, its ``instance`` the node's."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stamp = f"{STAMP} {time.time():.3f}\n".encode()
            body = bodies[int(self.path.rsplit("/", 1)[1])][1] + stamp
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # the engines open many scrapes at once
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a scrape given up (timeout, shutdown)
                super().handle_error(request, client_address)  # type: ignore[arg-type]

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    statics = "\n".join(
        f"      - targets: ['{target}']\n        labels: {{__metrics_path__: /n/{i}, instance: '{instance}'}}"
        for i, (instance, _) in enumerate(bodies)
    )
    try:
        yield (f"  - job_name: {JOB}\n    honor_labels: true\n    scrape_interval: 30s\n"
               f"    scrape_timeout: 25s\n    static_configs:\n{statics}\n")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def engine(name: str, scrape: str) -> Iterator[tuple[str, int]]:
    if name == "prometheus":
        with prometheus({}, extra_config=scrape, args=["--storage.tsdb.retention.time=1d"]) as p:
            yield p.url, p.proc.pid
    else:
        with victoria_metrics(scrape_configs=scrape) as vm:
            yield vm.url, vm.proc.pid


def scalar(url: str, expr: str) -> float:
    """One instant query's single value (0 when empty), with a deadline fit for 450,000 series."""
    body = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(url + "/api/v1/query", data=body, timeout=300) as r:
        result = json.loads(r.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def selectors(workloads: list[str]) -> list[str]:
    step = max(1, len(workloads) // 1000)
    chosen = workloads[::step][:1000]
    return [f"{EXT}{'rightsizer_queue_depth' if i < 700 else 'rightsizer_gpu_utilization_ratio'}"
            f"?labelSelector=workload%3D{w}" for i, w in enumerate(chosen)]  # fmt: skip


ROTATE = """
local paths = {%s}
local n = 0
request = function()
  n = n %% #paths + 1
  return wrk.format("GET", paths[n])
end
"""
WRK_THREADS = 2
# Pacing: each thread's connections wait before each request; once a second the wait is set again
# from the second just past (its connections' cycle is the wait plus the answer's time), so the
# thread sends its share of the rate. wrk's Lua has only a clock of whole seconds, and whole ms waits.
PACE = """
local conns, share = %.1f, %.1f
local wait, second, sent = 1000 * conns / share, os.time(), 0
delay = function()
  local now = os.time()
  if now ~= second then
    if sent > 0 then
      local answer = 1000 * conns / sent - wait
      wait = math.max(0, 1000 * conns / share - answer)
    end
    second, sent = now, 0
  end
  sent = sent + 1
  return math.floor(wait + 0.5)
end
"""


def metric(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M))


def refreshes_of(url: str) -> float:
    return metric(get(url + "/metrics", adapter_bench.AUTH)[2].decode(), "rightsizer_adapter_refreshes_total")


FIRST_REFUSAL: dict[str, str] = {}  # the first refused answer's message: what the figures stand on


def after_refresh(url: str) -> str:
    """The adapter's own metrics as first rendered after a refresh completed (it renders them at
    most once a second): the counts between two such readings are of whole refreshes, where a
    refresh that straddles the edge of a fixed window would count its queries without itself."""
    first = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = get(url + "/metrics", adapter_bench.AUTH)[2].decode()
        count = metric(text, "rightsizer_adapter_refreshes_total")
        if first is not None and count > first:
            return text
        first = count if first is None else first
        time.sleep(0.2)
    raise SystemExit("no refresh completed in 300 s")


def answers(url: str, paths: list[str]) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    for p in paths:
        code, _, body = get(url + p, adapter_bench.AUTH, timeout=30)
        if code != 200:
            FIRST_REFUSAL.setdefault("message", f"{code} {json.loads(body).get('message', '')}"[:300])
        items = json.loads(body).get("items") if code == 200 else None
        values = sorted((json.dumps(i["metricLabels"], sort_keys=True), i["value"]) for i in items or [])
        out.append((code, values))
    return out


class Asking:
    """Asks every selector of both replicas every ``every`` seconds, as the HPAs (every 15 s) and
    ScaledObjects using them would: the rules they select stay refreshed (``rule_idle_seconds``).
    One kept-alive connection per replica, as kube-apiserver's aggregator keeps its connections."""

    def __init__(self, urls: list[str], paths: list[str], every: float = 15.0) -> None:
        self.urls, self.paths, self.every = urls, paths, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        connections: dict[str, http.client.HTTPSConnection] = {}
        while not self.stop.is_set():
            started = time.monotonic()
            for url in self.urls:
                where = urllib.parse.urlsplit(url)
                for p in self.paths:
                    conn = connections.get(url)
                    if conn is None:
                        conn = http.client.HTTPSConnection(where.hostname or "", where.port, timeout=30,
                                                           context=insecure_context())  # fmt: skip
                        connections[url] = conn
                    try:
                        conn.request("GET", where.path + p, headers=adapter_bench.AUTH)
                        conn.getresponse().read()
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        del connections[url]
            self.stop.wait(max(0.0, self.every - (time.monotonic() - started)))
        for conn in connections.values():
            conn.close()

    def __enter__(self) -> Asking:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def idle_rules(url: str) -> int:
    text = get(url + "/metrics", adapter_bench.AUTH)[2].decode()
    return len(re.findall(r"^rightsizer_adapter_rule_idle\{[^}]*\} 1\.0$", text, re.M))


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def replicas(flags: list[str]) -> Iterator[tuple[Process, Process]]:
    """Two adapters on ``flags``, each given 5 minutes for its first refresh."""
    started: list[Process] = []
    try:
        for _ in range(2):
            started.append(start_adapter(flags, ready=False))
        for p in started:
            try:
                wait_for(lambda p=p: get(p.url + "/readyz")[0] == 200, 300, interval=1.0, what="readyz")
            except AssertionError:
                warnings = [line for line in p.log().splitlines() if "level=warn" in line or "error" in line]
                why = "\n".join(warnings[-8:])
                raise SystemExit(f"an adapter did not get ready in 300 s:\n{why}") from None
        yield started[0], started[1]
    finally:
        for p in started:
            p.stop()


class Watch:
    """Samples both replicas' own metrics once a second while the load runs: the oldest rule's cache
    age (answer freshness) and each replica's peak RSS (VmHWM)."""

    def __init__(self, replicas: tuple[Process, Process]) -> None:
        self.replicas = replicas
        self.oldest = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            for p in self.replicas:
                try:
                    text = get(p.url + "/metrics", adapter_bench.AUTH, timeout=5)[2].decode()
                except OSError:
                    continue
                ages = re.findall(r"^rightsizer_adapter_cache_age_seconds\{[^}]*\} (\S+)$", text, re.M)
                self.oldest = max([self.oldest, *(float(a) for a in ages)])

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def goal(what: str, value: str, target: str, met: bool) -> None:
    print(f"    {what:<44} {value:<34} goal {target:<26} {'met' if met else 'NOT MET'}", flush=True)


def bench_engine(name: str, scrape: str, series: int, paths: list[str], args: argparse.Namespace,
                 auth: list[str]) -> None:  # fmt: skip
    with engine(name, scrape) as (url, pid):
        started = time.monotonic()
        wait_for(lambda: scalar(url, "count(up == 1)") >= args.targets, 600, interval=2.0,
                 what="every target scraped")  # fmt: skip
        families = ("DCGM_FI_DEV_GPU_UTIL", "rightsizer_pod_gpu_memory_used_bytes", "rightsizer_gpu_verdict",
                    "rightsizer_gpu_fit_score", "rightsizer_queue_depth", "rightsizer_queue_in_flight",
                    "rightsizer_queue_source_up", STAMP)  # fmt: skip
        # Family by family: VictoriaMetrics refuses one query over more than 300,000 series by default.
        held = sum(scalar(url, f"count({f})") for f in families)
        print(f"{name}: {held:,.0f} series held of {series:,} written; first full scrape after "
              f"{time.monotonic() - started:.0f} s; engine RSS {rss_mib(pid):,.0f} MiB", flush=True)
        # the adapter answers an exporter job's rules once the engine has scraped it 3 times in
        # 2 x stale_after (a target not scraped yet has no `up` to be missed by): a running engine
        scraped = f'max(count_over_time(up{{job="{JOB}"}}[120s]))'
        wait_for(lambda: scalar(url, scraped) >= 3, 300, interval=2.0, what="the job scraped 3 times")
        if args.parts_only:
            breakdown(url)
            return
        flags = ["--prometheus-url", url, "--refresh-interval", str(args.refresh_interval), *auth]
        with replicas(flags) as (one, two):
            wait_for(lambda: refreshes_of(one.url) >= 2, 120, what="two refreshes")
            asking = Asking([one.url, two.url], paths)
            asking.__enter__()
            if args.warm_seconds:  # every rule is refreshed at first; those no selector asks for idle
                print(f"  asking every selector of both replicas every 15 s for {args.warm_seconds:.0f} s "
                      "(the rules nobody asks for idle)", flush=True)  # fmt: skip
                time.sleep(args.warm_seconds)
            print(f"  idle rules (none of the selectors asks for them): {idle_rules(one.url)} and "
                  f"{idle_rules(two.url)} on the two replicas", flush=True)  # fmt: skip
            before = after_refresh(one.url)
            a, b = answers(one.url, paths), answers(two.url, paths)
            codes = Counter(code for code, _ in a)
            script = ROTATE % ", ".join(json.dumps(p) for p in paths)
            if args.rate:
                script += PACE % (args.connections / WRK_THREADS, args.rate / WRK_THREADS)
            load = os.getloadavg()[0]
            with Watch((one, two)) as watch:
                lat, failed = wrk(one.url + paths[0], args.connections, args.seconds, script)
            load = max(load, os.getloadavg()[0])
            after = after_refresh(one.url)
            rules = len(re.findall(r"^rightsizer_adapter_rule_up\{", after, re.M))

            def delta(name: str) -> float:
                return metric(after, name) - metric(before, name)

            queries, refreshes = delta("rightsizer_adapter_upstream_queries_total"), delta(
                "rightsizer_adapter_refreshes_total")
            timeouts, retries = delta("rightsizer_adapter_upstream_timeouts_total"), delta(
                "rightsizer_adapter_upstream_retries_total")
            total = metric(after, "rightsizer_adapter_upstream_query_duration_seconds_sum")
            count = metric(after, "rightsizer_adapter_upstream_query_duration_seconds_count")
            refresh_mean = delta("rightsizer_adapter_refresh_duration_seconds_sum") / max(1.0, refreshes)
            slowest = _slowest_bucket(after, "rightsizer_adapter_upstream_query_duration_seconds")
            slowest_refresh = _slowest_bucket(after, "rightsizer_adapter_refresh_duration_seconds")
            same = sum(x == y for x, y in zip(a, b, strict=True))
            ok = min(sum(code == 200 and bool(items) for code, items in answers_) for answers_ in (a, b))
            peak = max(rss_mib(p.proc.pid, "VmHWM") for p in (one, two))
            per_rule = total / max(1.0, count)
            print(f"  refresh: {rules} rules, upstream query mean {1000 * per_rule:.0f} ms "
                  f"(slowest {slowest}); {queries:.0f} upstream queries over {refreshes:.0f} refreshes "
                  f"= {queries / max(1, refreshes):.2f} per refresh ({timeouts:.0f} timed out, {retries:.0f} "
                  f"retried); refresh mean {refresh_mean:.2f} s (slowest {slowest_refresh})",
                  flush=True)  # fmt: skip
            print(f"  {len(paths):,} selectors over HTTPS, {args.connections} connections, {args.seconds} s: "
                  f"{lat.requests_per_second:,.0f} req/s ({failed} not 2xx), p50 {lat.p50_ms:.1f} ms, "
                  f"p99 {lat.p99_ms:.1f} ms; "
                  f"adapter RSS {rss_mib(one.proc.pid):.0f} MiB (peak {rss_mib(one.proc.pid, 'VmHWM'):.0f}); "
                  f"load average up to {load:.1f}", flush=True)  # fmt: skip
            print(f"  two replicas: {same} of {len(paths)} answers identical ({ok} with values on each; "
                  f"codes before the load {dict(codes)})", flush=True)
            if FIRST_REFUSAL:
                print(f"  first refusal: {FIRST_REFUSAL.pop('message')}", flush=True)
            figures = Figures(ok, same, len(paths), refresh_mean, slowest_refresh, watch.oldest, per_rule,
                              queries / max(1, refreshes), rules, peak, lat)  # fmt: skip
            asking.__exit__()
            report_goals(name, args, figures)
        breakdown(url)


@dataclass
class Figures:
    answered: int
    same: int
    selectors: int
    refresh_mean: float
    refresh_slowest: str
    oldest: float
    per_rule: float
    per_refresh: float
    rules: int
    peak_mib: float
    lat: common.Latency


def breakdown(url: str) -> None:
    """What one rule's query costs the engine, part by part (each asked alone, three times, best
    kept): the GPU utilisation and queue depth rules' values and source vectors, and the shared
    evidence query; then each rule's whole query as a refresh sends it."""
    from adapter.promql import render
    from adapter.rules import BUILTIN_RULES
    from adapter.sources.evidence import Horizon, rule_parts, target_parts
    from adapter.sources.flagpairs import flag_pairs
    from adapter.sources.source_states import parts_only, with_parts

    horizon = Horizon(3600.0, 60.0)
    for name in ("rightsizer_gpu_utilization_ratio", "rightsizer_queue_depth"):
        rule = next(r for r in BUILTIN_RULES if r.name == name)
        family = rule.states_family
        assert rule.query is not None and family is not None
        selector = render(f"{family}{{<<.LabelMatchers>>}}", rule.matchers)
        current = rule_parts(rule, selector, horizon, [], {JOB})  # every target current, its job scraped
        asked = {"values": render(rule.query, rule.matchers),
                 **{f"{k} (every target current)": v for k, v in current.items()}}  # fmt: skip
        if rule.source_family is not None:
            every_job, timed_all = (rule_parts(rule, selector, horizon, p)["seen"] for p in ([], None))
            asked["seen, no job left out (imported or federated data)"] = every_job
            asked["seen, every series timed (past 64 targets not current)"] = timed_all
        print(f"  engine time per part of {name} (asked alone, best of 3):", flush=True)
        for part, query in asked.items():
            best, found = timed(url, query, 3)
            print(f"    {part:<58} {1000 * best:8.0f} ms, {found:,} series", flush=True)
    best, found = timed(url, parts_only(list(target_parts(horizon).values())), 3)
    print(f"    {'evidence query (shared)':<58} {1000 * best:8.0f} ms, {found:,} series", flush=True)
    for part, query in target_parts(horizon).items():
        best, found = timed(url, query, 3)
        print(f"      {part:<56} {1000 * best:8.0f} ms, {found:,} series", flush=True)
    print("  engine time of each rule's whole query, as a refresh sends it (every target current; alone, "
          "best of 2):", flush=True)  # fmt: skip
    total = 0.0
    pairs = {pair.flag.name: pair for pair in flag_pairs(BUILTIN_RULES)}  # one query for both rules
    shared = {pair.complement.name for pair in pairs.values()}
    for rule in BUILTIN_RULES:
        family = rule.states_family
        assert rule.query is not None and family is not None
        if rule.name in shared:
            continue
        own = rule_parts(rule, render(f"{family}{{<<.LabelMatchers>>}}", rule.matchers), horizon, [], {JOB})
        pair = pairs.get(rule.name)
        query, name = rule.query, rule.name
        if pair is not None:
            query, name = pair.query, f"{rule.name} + {pair.complement.name}"
        best, found = timed(url, with_parts(render(query, rule.matchers), list(own.values())), 2)
        total += best
        print(f"    {name:<58} {1000 * best:8.0f} ms, {found:,} series", flush=True)
    print(f"    {'all rules, one after the other':<58} {1000 * total:8.0f} ms", flush=True)


def timed(url: str, query: str, tries: int) -> tuple[float, int]:
    """The best of ``tries`` answers' times to ``query``, and its series."""
    best, found = float("inf"), 0
    for _ in range(tries):
        started = time.monotonic()
        body = urllib.parse.urlencode({"query": query}).encode()
        with urllib.request.urlopen(url + "/api/v1/query", data=body, timeout=300) as r:
            found = len(json.loads(r.read())["data"]["result"])
        best = min(best, time.monotonic() - started)
    return best, found


def report_goals(name: str, args: argparse.Namespace, f: Figures) -> None:
    """Each figure of issue 32 against its goal."""
    interval, n = args.refresh_interval, f.selectors
    query_goal = 0.05 if args.gpus <= 200 else (1.0 if name == "victoria-metrics" else 5.0)
    print(f"  goals ({name}, {args.gpus:,} GPUs, defaults but --refresh-interval {interval:g}):")
    goal("selectors answered with a value (each replica)", f"{f.answered} of {n}", ">= 99.9 %",
         f.answered >= 0.999 * n)  # fmt: skip
    goal("two replicas identical", f"{f.same} of {n}", "all", f.same == n)
    goal("refresh within its interval (mean)", f"{f.refresh_mean:.2f} s (slowest {f.refresh_slowest})",
         f"<= {interval:g} s", f.refresh_mean <= interval)  # fmt: skip
    goal("answer freshness (oldest cache age seen)", f"{f.oldest:.1f} s", f"<= {2 * interval:g} s",
         0 < f.oldest <= 2 * interval)  # fmt: skip
    goal("upstream query per rule (mean)", f"{1000 * f.per_rule:.0f} ms", f"<= {1000 * query_goal:.0f} ms",
         f.per_rule <= query_goal)  # fmt: skip
    goal("upstream queries per refresh", f"{f.per_refresh:.2f}", f"<= {f.rules + 1} (rules + 1)",
         f.per_refresh <= f.rules + 1)  # fmt: skip
    goal("adapter RSS, peak of both replicas", f"{f.peak_mib:.0f} MiB", "<= 256 MiB", f.peak_mib <= 256)
    if args.rate:
        achieved = f"{f.lat.p99_ms:.1f} ms ({f.lat.requests_per_second:,.0f} req/s achieved)"
        goal(f"p99 at {args.rate:,.0f} req/s paced", achieved, "<= 50 ms", f.lat.p99_ms <= 50)
    else:
        print("    p99 goal (<= 50 ms) applies at --rate 2000, not flat out", flush=True)


def wrk(url: str, connections: int, seconds: int, script: str) -> tuple[common.Latency, int]:
    """Debian's wrk over TLS keep-alive with the bench's bearer token: latency, and non-2xx answers."""
    if shutil.which("wrk") is None:
        raise SystemExit("the load comes from Debian's wrk: apt-get install wrk (docs/development.md)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as lua:
        lua.write(script)
        lua.flush()
        cmd = ["wrk", f"-c{connections}", f"-t{WRK_THREADS}", f"-d{seconds}s", "--latency", "-s", lua.name,
               "-H", f"Authorization: Bearer {adapter_bench.TOKEN}", url]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    patterns = (r"^\s+50%\s+(\S+)", r"^\s+99%\s+(\S+)", r"Requests/sec:\s+([\d.]+)")
    found = [re.search(p, out, re.M) for p in patterns]
    if not all(found):
        raise SystemExit(f"could not read wrk's output:\n{out}")
    p50, p99, rps = (m.group(1) for m in found if m)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return common.Latency(common._ms(p50), common._ms(p99), float(rps)), int(bad.group(1)) if bad else 0


def _slowest_bucket(text: str, family: str) -> str:
    """"under" the smallest histogram bound holding every observation, or "over" the largest finite
    one (some were past it)."""
    bucket = rf'^{family}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}} (\S+)$'
    found = re.findall(bucket, text, re.M)
    buckets = [(float(le), float(v)) for le, v in found]
    total = max((v for _, v in buckets), default=0.0)
    bound = min((le for le, v in buckets if v >= total), default=float("inf"))
    if bound == float("inf"):
        largest = max((le for le, _ in buckets if le != float("inf")), default=0.0)
        return f"over {largest * 1000:.0f} ms"
    return f"under {bound * 1000:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=40000)
    ap.add_argument("--engines", default="prometheus,victoria-metrics")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--refresh-interval", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=0.0, help="requests/s to pace wrk to (default: flat out)")
    ap.add_argument("--query-timeout", type=float,
                    help="prometheus.timeout_seconds (default: twice the refresh interval, at least 5)")
    ap.add_argument("--parts-only", action="store_true", help="only the engine cost of each part")
    ap.add_argument("--warm-seconds", type=float, default=IDLE_SECONDS + 30,
                    help="ask the selectors for this long before measuring: rules none asks for idle "
                         "(default: the adapter's rule_idle_seconds + 30 s; 0: measure at once)")  # fmt: skip
    args = ap.parse_args()
    if not args.parts_only and shutil.which("wrk") is None:  # said now, not after minutes of set-up
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk); --parts-only needs none")
    gpus = fh.fleet(args.gpus)
    bodies, workloads, series = expositions(gpus)
    args.targets = len(bodies)
    paths = selectors(workloads)
    print(f"adapter at fleet scale: {args.gpus:,} GPUs' current series (generated: the simulator's "
          f"workloads, the exporter's labels), {len(bodies)} scrape targets, {len(paths)} selectors; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    api, auth = adapter_bench.delegated_auth(Path(tempfile.mkdtemp(prefix="fleet-adapter-")))
    if args.query_timeout:
        with open(auth[1], "a") as config:
            config.write(f"prometheus: {{timeout_seconds: {args.query_timeout}}}\n")
    try:
        with serving(bodies) as scrape:
            for name in args.engines.split(","):
                bench_engine(name, scrape, series, paths, args, auth)
    finally:
        api.stop()


if __name__ == "__main__":
    main()
