"""Answer latency of one adapter replica while it refreshes a fleet's rules (issue 32: p99 <= 50 ms
at 2,000 requests/s paced), with no engine sharing its cores.

The fake query API of ``bench/adapter_memory.py`` (loopback, a thread of this process) answers
every built-in rule for the fleet (default 40,000 GPUs on 5,000 nodes) as an engine would with
every exporter healthy, at once: what is left is the adapter's own work. One replica as
``bench/fleet_adapter.py`` runs it (HTTPS with its self-signed certificate, bearer tokens checked
through TokenReview and SubjectAccessReview against tests/fake_apiserver.py, refresh every 5 s,
the built-in rules) answers the same 1,000 HPA-style selectors (700 queue depths, 300 pod GPU
utilisations, each naming one workload) in rotation with Debian's wrk, paced to ``--rate``.
Printed: requests/s, p50 and p99 over TLS, answers not 2xx, the refreshes completed during the
load and their mean time and the workers' pauses for the requests (the adapter's own counters), and
the adapter's peak RSS.

    .venv/bin/python bench/adapter_latency.py [--gpus 40000] [--rate 2000] [--seconds 30]
        [--connections 64] [--env NAME=VALUE] [--lock-holds]

``--lock-holds`` loads bench/lockwatch into the adapter: a thread that sleeps 1 ms over and over
and records each time it woke more than 10 ms late (it waited that long for the interpreter lock or
a core, as the event loop does) with what the adapter's other threads ran then.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package
sys.path.insert(1, str(BENCH.parent / "tests"))
sys.path.append(str(BENCH))

import adapter_memory as am  # noqa: E402
import fleet_adapter as fa  # noqa: E402
from adapter_support import get, start_adapter  # noqa: E402
from servers import wait_for  # noqa: E402


def main() -> None:
    ap = am.fleet_arguments(__doc__.split("\n\n", 1)[0])
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--lock-holds", action="store_true",
                    help="also print how late a 1 ms ticker in the adapter woke during the load, and "
                         "what its threads ran then (bench/lockwatch)")  # fmt: skip
    args = ap.parse_args()
    fleet = am.Fleet(args.gpus)
    engine = am.Engine(fleet)
    engine.empty = False
    url = am.serve(engine)
    paths = fa.selectors(fleet.workloads)
    print(f"fleet: {args.gpus:,} GPUs on {len(fleet.instances):,} nodes, {len(fleet.queues):,} queues, "
          f"{len(paths)} selectors; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
          flush=True)  # fmt: skip
    api, auth = fa.adapter_bench.delegated_auth(Path(tempfile.mkdtemp(prefix="adapter-latency-")))
    flags = ["--prometheus-url", url, "--refresh-interval", f"{args.interval:g}", *auth]
    env = dict(e.split("=", 1) for e in args.env)
    watched = Path()
    if args.lock_holds:
        watched = Path(tempfile.mkdtemp(prefix="adapter-lock-")) / "holds.json"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH / "lockwatch"), env.get("PYTHONPATH")]))
        env["LOCKWATCH"] = str(watched)
    adapter = start_adapter(flags, ready=False, timeout=120, env=env)
    try:
        wait_for(lambda: get(adapter.url + "/readyz")[0] == 200, 300, interval=1.0, what="readyz")
        wait_for(lambda: fa.refreshes_of(adapter.url) >= 2, 300, what="two refreshes")
        answered = sum(code == 200 and bool(v) for code, v in fa.answers(adapter.url, paths))
        before = fa.after_refresh(adapter.url)
        script = fa.ROTATE % ", ".join(json.dumps(p) for p in paths)
        script += fa.PACE % (args.connections / fa.WRK_THREADS, args.rate / fa.WRK_THREADS)
        held = _read(watched) if args.lock_holds else {}
        began = time.time()
        lat, failed = fa.wrk(adapter.url + paths[0], args.connections, args.seconds, script)
        ended = time.time()
        after = fa.after_refresh(adapter.url)

        def delta(name: str) -> float:
            return fa.metric(after, name) - fa.metric(before, name)

        done = delta("rightsizer_adapter_refreshes_total")
        took = delta("rightsizer_adapter_refresh_duration_seconds_sum")
        print(f"before the load: {answered} of {len(paths)} selectors answered with a value", flush=True)
        print(f"load: {lat.requests_per_second:,.0f} req/s ({args.rate:,.0f} asked, {args.connections} "
              f"connections, {args.seconds} s), p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms, "
              f"{failed} not 2xx", flush=True)  # fmt: skip
        pid = adapter.proc.pid
        print(f"refreshes: {done:.0f} during the load and after it, mean {took / max(done, 1):.2f} s; "
              f"adapter RSS {fa.rss_mib(pid):.0f} MiB (peak {fa.rss_mib(pid, 'VmHWM'):.0f}); "
              f"{engine.queries} queries answered", flush=True)  # fmt: skip
        print(f"workers gave way to the requests {delta('rightsizer_adapter_worker_pauses_total'):,.0f} "
              f"times, {delta('rightsizer_adapter_worker_pause_seconds_total'):.2f} s in all "
              "(adapter/giveway.py)", flush=True)  # fmt: skip
        if args.lock_holds:
            time.sleep(1.5)  # the watcher writes every second
            _print_holds(held, _read(watched), began, ended)
        verdict = "met" if lat.p99_ms <= 50 else "NOT MET"
        print(f"goal p99 <= 50 ms at {args.rate:,.0f} req/s: {verdict}", flush=True)
    finally:
        adapter.stop()
        api.stop()


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _print_holds(before: dict[str, Any], after: dict[str, Any], began: float, ended: float) -> None:
    """What ``bench/lockwatch`` saw during the load: late wakes of its 1 ms ticker, the lines the
    adapter's other threads ran then, and the cyclic collector's runs."""
    late = [(lag, running) for at, lag, running in after.get("late", []) if began <= at <= ended]
    ticks = after.get("ticks", 0) - before.get("ticks", 0)
    worst = sorted((lag for lag, _ in late), reverse=True)[:5]
    counts = ", ".join(f"{sum(lag > ms for lag, _ in late)} past {ms} ms" for ms in (10, 30, 50))
    print(f"interpreter lock: {ticks:,} ticks of 1 ms during the load, {counts}; "
          f"longest {', '.join(f'{w:.0f}' for w in worst) or 'none'} ms", flush=True)  # fmt: skip
    by_line: dict[str, list[float]] = {}
    for lag, running in late:
        for where in running:
            by_line.setdefault(where, []).append(lag)
    for where, lags in sorted(by_line.items(), key=lambda kv: -sum(kv[1]))[:8]:
        print(f"  {len(lags):4d} late wakes, longest {max(lags):5.1f} ms, while {where}", flush=True)
    for gen, (runs, seconds, longest) in sorted(after.get("collections", {}).items()):
        was = before.get("collections", {}).get(gen, [0, 0.0, 0.0])
        print(f"  collections of generation {gen}: {runs - was[0]:,.0f}, {1000 * (seconds - was[1]):,.0f} ms "
              f"in all, longest {1000 * longest:.1f} ms (since start)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
