"""Fleet-scale figures of ``rightsizer report`` on real engines (issue 16, part 2).

For each fleet size: N GPUs x D days of history at a scrape step (``fleet_history``: the
simulator's workloads with the exporter's label sets) is written straight into
- Prometheus: protobuf through its remote-write receiver, half an hour of every series at a time in
  time order (``fleet_remote_write``: one computed history per workload kind, model and node
  variant), then a wait until its compactions settle; or with ``--prometheus-load promtool``
  every sample as OpenMetrics with timestamps -> ``promtool tsdb create-blocks-from openmetrics`` ->
  Prometheus started on those blocks;
- VictoriaMetrics: one JSON line per series streamed to ``/api/v1/import`` (``fleet_native``: one
  computed history per workload kind, model and node variant), or with ``--victoria-import text``
  every sample computed and sent as text to ``/api/v1/import/prometheus`` in 8 MiB batches;
then ``rightsizer report --format json`` runs against each, through a recording proxy that counts
every query and the series each answered. Printed per engine: samples written and how long writing
took, the report's wall time and peak RSS (its ``VmHWM``, read while it runs), queries sent, the
most series one answer held, and the engine's peak RSS (VmHWM).

    .venv/bin/python bench/fleet.py report [--gpus 250,1000] [--days 1] [--step 30]
        [--engines prometheus,victoria-metrics] [--max-series-per-query 2000] [--concurrency 4]
        [--victoria-import json|text] [--prometheus-load remote-write|promtool]
    .venv/bin/python bench/fleet.py adapter [the arguments of bench/fleet_adapter.py]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# bench/exporter.py would shadow the exporter package: the repository root comes first.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.append(str(Path(__file__).resolve().parent))

import fleet_history as fh  # noqa: E402
from fleet_native import write_victoria_native  # noqa: E402
from fleet_remote_write import write_prometheus_remote  # noqa: E402
from query_recorder import recording  # noqa: E402
from servers import prometheus, require_binary  # noqa: E402
from victoria_metrics import victoria_metrics  # noqa: E402

from rightsizing.command.report_shards import SIZED_BY  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def watch_peak_rss(proc: subprocess.Popen[str]) -> float:
    """The process's peak RSS in MiB, read every 50 ms until it exits. (``wait4``'s ``ru_maxrss``
    would not do: a child's exec inherits its parent's high-water mark, and this parent holds the
    generated fleet.)"""
    peak = 0.0
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            peak = max(peak, peak_rss_mib(proc.pid))
        time.sleep(0.05)
    return peak


def run_report(url: str, at: float, days: float, args: argparse.Namespace, bound: int) -> dict[str, float]:
    """The report through a recording proxy: wall time, peak RSS, queries, series per answer."""
    with recording(url) as rec:
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", rec.url,
               "--window", f"{days:g}d", "--at", f"{at:.3f}", "--format", "json",
               "--max-series-per-query", str(bound),
               "--concurrency", str(args.concurrency), "--timeout", "1800"]  # fmt: skip
        out_path = Path(tempfile.mkstemp(prefix="fleet-report-", suffix=".json")[1])
        started = time.monotonic()
        with out_path.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, cwd=ROOT, text=True)
            peak = watch_peak_rss(proc)
        wall = time.monotonic() - started
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"report failed ({proc.returncode}): {stderr}")
        document = json.loads(out_path.read_text())
        out_path.unlink()
        answers = list(rec.answers)
    if os.environ.get("FLEET_SLOWEST"):
        for a in sorted(answers, key=lambda a: -a.seconds)[: int(os.environ["FLEET_SLOWEST"])]:
            print(f"  {a.seconds:7.2f} s  {a.series:5d} series  {a.query[:160]}", flush=True)
    shards = {a.query.split('instance=~"', 1)[1].split('"', 1)[0] for a in answers if "instance=~" in a.query}
    n = len(SIZED_BY)  # the queries that size the shards come first
    return {
        "wall_s": wall,
        "rss_mib": peak,
        "queries": len(answers),
        "shards": max(1, len(shards)),
        "max_series": max(a.series for a in answers[n:]) if len(answers) > n else 0,
        "sizing_series": max((a.series for a in answers[:n]), default=0),
        "gpus_judged": len(document["gpus"]),
        "verdicts": document["totals"]["verdicts"],
    }  # type: ignore[return-value]


BLOCK = 7200.0  # promtool writes 2-hour blocks, reading its whole input once per block


def write_prometheus(gpus: list[fh.Gpu], start: float, seconds: float, step: float, tsdb: Path) -> int:
    """OpenMetrics, one family after the other (as the format wants), turned into TSDB blocks one
    2-hour slice at a time (aligned as promtool aligns its blocks): promtool reads its whole input
    once per block it writes, so one file for the week would be read 84 times."""
    n = 0
    t = start
    while t <= start + seconds:
        edge = min((t // BLOCK + 1) * BLOCK, start + seconds + step)  # the next block boundary
        slice_seconds = (edge - t - 1e-6) // step * step
        n += _slice(gpus, t, slice_seconds, step, start, tsdb)
        t += slice_seconds + step
    return n


def _slice(gpus: list[fh.Gpu], t: float, seconds: float, step: float, origin: float, tsdb: Path) -> int:
    parts = [tsdb / f"family-{i}.om" for i in range(len(fh.FAMILIES))]
    handles = [p.open("w") for p in parts]
    n = 0
    for i, line in fh.lines(gpus, t, seconds, step, ms=False, origin=origin):
        handles[i].write(line + "\n")
        n += 1
    for h in handles:
        h.close()
    om = tsdb / "slice.om"
    with om.open("w") as out:
        for name, part in zip(fh.FAMILIES, parts, strict=True):
            out.write(f"# TYPE {name} gauge\n")
            with part.open() as src:
                shutil.copyfileobj(src, out, 1 << 20)
            part.unlink()
        out.write("# EOF\n")
    promtool = require_binary("promtool")
    create = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(om), str(tsdb / "data")]
    done = subprocess.run(create, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"promtool failed: {done.stderr[-2000:]}")
    om.unlink()
    return n


def write_victoria(url: str, gpus: list[fh.Gpu], start: float, seconds: float, step: float) -> int:
    import urllib.request

    def post(text: str) -> None:
        req = urllib.request.Request(url + "/api/v1/import/prometheus", data=text.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=600) as r:
            assert r.status == 204, r.status

    n, batch, size = 0, [], 0
    for _, line in fh.lines(gpus, start, seconds, step, ms=True):
        batch.append(line)
        size += len(line) + 1
        n += 1
        if size >= 8 << 20:
            post("\n".join(batch) + "\n")
            batch, size = [], 0
    if batch:
        post("\n".join(batch) + "\n")
    with urllib.request.urlopen(url + "/internal/force_flush", timeout=600) as r:
        assert r.status == 200
    return n


PROMETHEUS_ARGS = [
    "--storage.tsdb.retention.time=3650d",
    "--query.max-samples=500000000",
    "--query.timeout=30m",
]
COMPACTIONS, BLOCKS = "prometheus_tsdb_compactions_total", "prometheus_tsdb_blocks_loaded"


def _tsdb_counters(url: str) -> tuple[float, float]:
    """(compactions run, blocks loaded) from Prometheus's own metrics."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (COMPACTIONS, BLOCKS):
            values[name] = float(value)
    return values.get(COMPACTIONS, 0.0), values.get(BLOCKS, 0.0)


def wait_compactions_settle(url: str, quiet: float = 90.0) -> tuple[float, int]:
    """Waits until Prometheus has run no compaction for ``quiet`` seconds (its compaction loop wakes
    every minute); returns (seconds waited, blocks loaded)."""
    began = time.monotonic()
    last, since = _tsdb_counters(url), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(5)
        now = _tsdb_counters(url)
        if now != last:
            last, since = now, time.monotonic()
    return time.monotonic() - began - quiet, int(last[1])


@contextlib.contextmanager
def engine_holding(
    name: str, gpus: list[fh.Gpu], start: float, seconds: float, step: float, native: bool = True,
    promtool: bool = False,
) -> Iterator[tuple[str, int, float, int]]:
    """Yields (URL, samples written, seconds writing took, engine pid) with the engine running."""
    began = time.monotonic()
    if name == "prometheus" and not promtool:
        with prometheus({}, args=[*PROMETHEUS_ARGS, "--web.enable-remote-write-receiver"]) as prom:
            n = write_prometheus_remote(prom.url, gpus, start, seconds, step)
            took = time.monotonic() - began
            settled, blocks = wait_compactions_settle(prom.url)
            rss = peak_rss_mib(prom.proc.pid)
            print(f"prometheus: {n / 1e6:.1f} M samples by remote write in {took:.1f} s "
                  f"({n / took / 1e6:.2f} M samples/s); compactions settled {settled:.0f} s later, "
                  f"{blocks} blocks; engine peak RSS so far {rss:.0f} MiB", flush=True)  # fmt: skip
            yield prom.url, n, took, prom.proc.pid
    elif name == "prometheus":
        tsdb = Path(tempfile.mkdtemp(prefix="fleet-tsdb-"))
        try:
            n = write_prometheus(gpus, start, seconds, step, tsdb)
            took = time.monotonic() - began
            with prometheus({}, data_dir=tsdb / "data", args=PROMETHEUS_ARGS) as prom:
                yield prom.url, n, took, prom.proc.pid
        finally:
            shutil.rmtree(tsdb, ignore_errors=True)
    else:
        with victoria_metrics(args=["-retentionPeriod=100y", "-search.maxSamplesPerQuery=10000000000",
                                    "-search.maxUniqueTimeseries=10000000"]) as vm:  # fmt: skip
            write = write_victoria_native if native else write_victoria
            n = write(vm.url, gpus, start, seconds, step)
            yield vm.url, n, time.monotonic() - began, vm.proc.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--gpus", default="250,1000")
    rep.add_argument("--days", type=float, default=1.0)
    rep.add_argument("--step", type=float, default=30.0)
    rep.add_argument("--engines", default="prometheus,victoria-metrics")
    rep.add_argument("--max-series-per-query", default="2000", help="bounds to run the report with: 2000,250")
    rep.add_argument("--concurrency", type=int, default=4)
    rep.add_argument("--victoria-import", choices=("json", "text"), default="json")
    rep.add_argument("--prometheus-load", choices=("remote-write", "promtool"), default="remote-write")
    sub.add_parser(
        "adapter", add_help=False, help="the adapter's figures: bench/fleet_adapter.py, its arguments after"
    )
    args, rest = parser.parse_known_args()
    if args.what == "adapter":
        import fleet_adapter

        sys.argv = [str(Path(__file__).with_name("fleet_adapter.py")), *rest]
        fleet_adapter.main()
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    seconds = args.days * 86400
    end = (time.time() // 3600) * 3600 - 3600  # a whole hour, an hour back: every block is history
    start = end - seconds
    print(f"rightsizer report at fleet scale: {args.days:g} d at {args.step:g} s per sample, "
          f"--max-series-per-query {args.max_series_per_query}, --concurrency {args.concurrency} "
          f"(generated history: the simulator's workloads, the exporter's labels; "
          f"{os.cpu_count()} cores)")  # fmt: skip
    for n_gpus in (int(x) for x in args.gpus.split(",")):
        gpus = fh.fleet(n_gpus)
        for engine in args.engines.split(","):
            native = args.victoria_import == "json"
            promtool = args.prometheus_load == "promtool"
            holding = engine_holding(engine, gpus, start, seconds, args.step, native, promtool)
            with holding as (url, samples, took, pid):
                for bound in (int(b) for b in args.max_series_per_query.split(",")):
                    r = run_report(url, end + 1, args.days, args, bound)
                    print(f"{engine:17} {n_gpus:6d} GPUs {samples / 1e6:8.1f} M samples written in "
                      f"{took:7.1f} s | report {r['wall_s']:7.1f} s, peak RSS {r['rss_mib']:6.0f} MiB, "
                      f"{r['queries']} queries "
                      f"({r['shards']} shard(s)), at most {r['max_series']} series per answer "
                      f"(sizing: {r['sizing_series']}), {r['gpus_judged']} GPUs judged {r['verdicts']} | "
                      f"engine peak RSS {peak_rss_mib(pid):6.0f} MiB", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
