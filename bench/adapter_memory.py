"""Resident memory of one adapter replica holding a fleet's rules (issue 32: RSS <= 256 MiB peak).

No engine: a fake Prometheus query API on loopback (aiohttp) answers the adapter's queries as an
engine would for ``fleet_history``'s fleet (default 40,000 GPUs on 5,000 nodes, one scrape target
per node, every target up and current): each built-in GPU rule one series per GPU (namespace, pod,
container, UUID), each queue rule one per serving pod's queue (about 17,600 at 40,000 GPUs), the
SLO rules none; and each source-state part of the rules' queries and the evidence query as
``bench/fleet_adapter.py``'s engines answer them with every exporter healthy (``up`` 1 and
current for every target, a count per target and job, no stale, gone or frozen series).

The real adapter (``python -m adapter --prometheus-url ...``, HTTP, anonymous, refresh every 5 s
unless told) first refreshes against empty answers: its VmRSS then is the baseline of a replica
holding nothing. Then the fleet is answered, and after each of ``--refreshes`` refreshes (the
adapter's own ``rightsizer_adapter_refreshes_total``), once one request per GPU rule selecting a
workload and one selecting a pod have built the namespace, workload and pod indexes, it prints
VmRSS and VmHWM (peak) from ``/proc/<pid>/status``, the series held (the adapter's own
``rightsizer_adapter_rule_series``) and bytes per series held: (VmRSS - baseline) / series.

    .venv/bin/python bench/adapter_memory.py [--gpus 40000] [--refreshes 6] [--interval 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package
sys.path.insert(1, str(BENCH.parent / "tests"))
sys.path.append(str(BENCH))

import fleet_history as fh  # noqa: E402
from adapter_support import ANONYMOUS, get, start_adapter  # noqa: E402
from aiohttp import web  # noqa: E402
from prom_parts import carried, part_names  # noqa: E402
from servers import wait_for  # noqa: E402

from adapter.promql import render  # noqa: E402
from adapter.rules import BUILTIN_RULES  # noqa: E402
from adapter.sources.source_states import MARKER  # noqa: E402

JOB = "rightsizer-exporter"
GPU_KEY = ("namespace", "pod", "container", "UUID")
QUEUE_UP = "rightsizer_queue_source_up"
EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/"
Item = tuple[str, str]  # a series' "metric" JSON object, its value
LABEL = re.compile(r'(\w+)="([^"]*)"')


class Fleet:
    """What the engine holds: every GPU's key and target, every queue's labels."""

    def __init__(self, gpus: int) -> None:
        self.gpus: list[dict[str, str]] = []  # key labels + instance + job
        self.queues: list[dict[str, str]] = []  # queue labels + instance + job
        for gpu in fh.fleet(gpus):
            labels = dict(LABEL.findall(gpu.prefix[3].split("{", 1)[1]))
            self.gpus.append({**{k: labels[k] for k in GPU_KEY}, "instance": labels["instance"], "job": JOB})
            if gpu.queue:
                self.queues.append({**dict(LABEL.findall(gpu.queue.split("{", 1)[1])), "job": JOB})
        self.instances = sorted({g["instance"] for g in self.gpus})
        self.per_instance = dict.fromkeys(self.instances, 0)
        for g in self.gpus:
            self.per_instance[g["instance"]] += 1
        self.workloads = sorted({q["workload"] for q in self.queues})


def _items(
    series: list[dict[str, str]], value: Callable[[int], str], drop: tuple[str, ...] = ()
) -> list[Item]:
    """Each series' "metric" object without ``drop``, with ``value(its index)``."""
    out = []
    for i, s in enumerate(series):
        out.append((json.dumps({k: v for k, v in s.items() if k not in drop}), value(i)))
    return out


class Engine:
    """The fake query API: each query's answer (values and marked parts) built once, stamped anew."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.empty = True  # answers nothing until the baseline is read
        self.queries = 0
        self.names = part_names()
        self._answers: dict[str, list[Item]] = {}
        targets = [{"instance": i, "job": JOB} for i in fleet.instances]
        self._targets = {name: _items(targets, lambda _: "1") for name in ("up", "stamped")}
        self._values: list[tuple[str, list[Item]]] = []
        for rule in BUILTIN_RULES:
            assert rule.query is not None
            if rule.up_family == QUEUE_UP:
                items = _items(fleet.queues, lambda i: str(i % 7), ("instance", "job"))
            elif rule.source_family is not None:
                items = _items(fleet.gpus, lambda i: f"{(i * 37 % 100) / 100:g}", ("instance", "job"))
            else:
                items = []  # the SLO rules: this fleet declares no SLOs
            self._values.append((render(rule.query, rule.matchers), items))

    def provide(self, name: str, family: str) -> list[tuple[dict[str, str], str]]:
        """Unused: ``_parts`` gives each part's series as JSON text (``carried`` only finds them)."""
        return [({"part": name, "family": family}, "0")]

    def _parts(self, name: str, family: str, now: float) -> list[Item]:
        f = self.fleet
        if name in self._targets:
            return self._targets[name]
        if name in ("up_at", "healthy_at"):
            return _items([{"instance": i, "job": JOB} for i in f.instances], lambda _: f"{now - 1:.3f}")
        if name == "scrapes":
            return [(json.dumps({"job": JOB}), "120")]
        if family == QUEUE_UP:
            if name == "cur":
                return _items(f.queues, lambda _: "1")
            return [(json.dumps({"job": JOB}), str(len(f.queues)))] if name == "jobs" else []
        if family.startswith("rightsizer_workload_slo"):
            return []  # no SLO declared anywhere
        if name == "cur":  # the first refresh, before the targets' health is known
            return _items(f.gpus, lambda _: "1")
        if name == "jobs":
            return [(json.dumps({"instance": i, "job": JOB}), str(n)) for i, n in f.per_instance.items()]
        return []  # ts, seen, why, frozen: every sample current, no series gone

    def answer(self, query: str) -> bytes:
        self.queries += 1
        now = time.time()
        items = self._answers.get(query)
        if items is None:
            items = []
            for rendered, values in self._values:
                if query == rendered or query.startswith(f"({rendered}) or "):
                    items.extend(values)
            for marked, _ in carried(query, self.provide, self.names):
                part, family, mark = marked["part"], marked["family"], marked[MARKER]
                if part in ("up_at", "healthy_at"):
                    continue  # stamped at each answer below
                items.extend((f'{labels[:-1]},"{MARKER}":"{mark}"}}', value)
                             for labels, value in self._parts(part, family, now))  # fmt: skip
            self._answers[query] = items
        stamped = list(items)
        for marked, _ in carried(query, self.provide, self.names):
            if marked["part"] in ("up_at", "healthy_at"):
                mark = marked[MARKER]
                stamped.extend((f'{labels[:-1]},"{MARKER}":"{mark}"}}', value)
                               for labels, value in self._parts(marked["part"], "", now))  # fmt: skip
        if self.empty:
            stamped = []
        body = ",".join(f'{{"metric":{m},"value":[{now:.3f},"{v}"]}}' for m, v in stamped)
        return f'{{"status":"success","data":{{"resultType":"vector","result":[{body}]}}}}'.encode()


class Busy:
    """The union of the times a query was at the fake engine (received until answered)."""

    def __init__(self) -> None:
        self.inflight = 0
        self.since = 0.0
        self.total = 0.0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            if self.inflight == 0:
                self.since = time.monotonic()
            self.inflight += 1

    def leave(self) -> None:
        with self.lock:
            self.inflight -= 1
            if self.inflight == 0:
                self.total += time.monotonic() - self.since

    def read(self) -> float:
        with self.lock:
            return self.total + (time.monotonic() - self.since if self.inflight else 0.0)


def serve(engine: Engine, seconds: float = 0.0, busy: Busy | None = None) -> str:
    """The engine's query API on a loopback port, in a thread of its own, answering each query
    after ``seconds`` (the engine's time for it; ``busy`` counts it); its base URL."""
    started: list[str] = []
    ready = threading.Event()
    busy = busy or Busy()

    async def query(request: web.Request) -> web.Response:
        busy.enter()
        try:
            form = await request.post()
            if seconds:
                await asyncio.sleep(seconds)
            body = engine.answer(str(form["query"]))
        finally:
            busy.leave()
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/api/v1/query", query)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        started.append(f"http://127.0.0.1:{port}")
        ready.set()
        await asyncio.Event().wait()

    threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
    ready.wait(30)
    return started[0]


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid``, bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(rest.split()[0]) * 1024
    return out


def own_metrics(url: str) -> tuple[float, int, int]:
    """(refreshes completed, series held, rules up) from the adapter's own /metrics."""
    text = get(url + "/metrics", timeout=30)[2].decode()
    refreshes = re.search(r"^rightsizer_adapter_refreshes_total (\S+)", text, re.M)
    held = re.findall(r"^rightsizer_adapter_rule_series\{[^}]*\} (\S+)", text, re.M)
    up = re.findall(r"^rightsizer_adapter_rule_up\{[^}]*\} (\S+)", text, re.M)
    done = float(refreshes.group(1)) if refreshes else 0.0
    return done, int(sum(float(v) for v in held)), sum(float(v) == 1 for v in up)


def next_refresh(url: str, after: float, timeout: float) -> tuple[float, int, int]:
    return wait_for(lambda: (m := own_metrics(url))[0] > after and m, timeout, 0.2, "the next refresh")


def build_indexes(url: str, fleet: Fleet) -> int:
    """One request per GPU rule selecting a workload, one selecting a pod (the indexes HPAs use),
    one per queue rule selecting a workload; how many were answered with a value."""
    workload = fleet.workloads[len(fleet.workloads) // 2] if fleet.workloads else "none"
    pod = next(g["pod"] for g in fleet.gpus[len(fleet.gpus) // 2 :] if g["namespace"] == "llm")
    answered = 0
    for rule in BUILTIN_RULES:
        selectors = [f"workload={workload}"]
        if rule.source_family is not None:
            selectors.append(f"pod={pod}")
        elif rule.up_family != QUEUE_UP:
            continue
        for selector in selectors:
            q = urllib.parse.quote(selector)
            code, _, body = get(f"{url}{EXT}llm/{rule.name}?labelSelector={q}", timeout=60)
            answered += code == 200 and bool(json.loads(body).get("items"))
    return answered


def fleet_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a bench of one adapter replica against the fake query API: the fleet's size,
    the adapter's refresh interval and environment."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--gpus", type=int, default=40000)
    ap.add_argument("--interval", type=float, default=5.0, help="the adapter's refresh interval, s")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable of the adapter (e.g. MALLOC_ARENA_MAX=2)")  # fmt: skip
    return ap


def main() -> None:
    ap = fleet_arguments(__doc__.split("\n\n", 1)[0])
    ap.add_argument("--refreshes", type=int, default=6)
    args = ap.parse_args()
    fleet = Fleet(args.gpus)
    engine = Engine(fleet)
    url = serve(engine)
    print(f"fleet: {args.gpus} GPUs on {len(fleet.instances)} nodes, {len(fleet.queues)} queues")
    adapter = start_adapter(
        ["--prometheus-url", url, "--refresh-interval", f"{args.interval:g}"],
        env={**ANONYMOUS, **dict(e.split("=", 1) for e in args.env)},
        timeout=120,
    )
    try:
        refreshes, _, _ = next_refresh(adapter.url, 0, 120)
        base = status(adapter.proc.pid)
        print(f"baseline (empty answers): VmRSS {base['VmRSS'] / 2**20:.1f} MiB")
        engine.empty = False
        refreshes, _, _ = next_refresh(adapter.url, refreshes, 600)  # a refresh may have begun empty
        print("refresh  rules up  series held  answered  VmRSS MiB  VmHWM MiB  bytes/series held")
        peak = 0
        for n in range(1, args.refreshes + 1):
            refreshes, held, up = next_refresh(adapter.url, refreshes, 600)
            answered = build_indexes(adapter.url, fleet)
            mem = status(adapter.proc.pid)
            peak = max(peak, mem["VmHWM"])
            per = (mem["VmRSS"] - base["VmRSS"]) / held if held else float("nan")
            print(f"{n:7d}  {up:4d} of {len(BUILTIN_RULES)}  {held:11,d}  {answered:4d} of 12"
                  f"  {mem['VmRSS'] / 2**20:9.1f}  {mem['VmHWM'] / 2**20:9.1f}  {per:17.0f}")  # fmt: skip
        verdict = "within" if peak <= 256 * 2**20 else "OVER"
        print(f"peak VmHWM {peak / 2**20:.1f} MiB: {verdict} the chart's 256 MiB limit"
              f" ({engine.queries} queries answered)")  # fmt: skip
    finally:
        adapter.stop()


if __name__ == "__main__":
    main()
