"""MIG figures (issue 3): 8 H100s x 7 MIG instances through the real NVML path.

The exporter runs as a subprocess on nvidia-ml-py and the tests' C double of libnvidia-ml.so.1
(8 GPUs with GPM; in the MIG run each GPU in MIG mode with 7 x 1g.10gb instances, 56 in all, each
with its own memory and GPM values), with XID events on. The same 8 GPUs without MIG are
measured first, as the baseline. Printed per layout:

- per-cycle cost: the nvml collector's duration (median and p95 over the run) and the NVML calls
  one cycle makes (counted from the double's trace in a separate short run);
- exporter CPU (% of one core) at the sampling interval, and peak RSS;
- /metrics scrape latency with wrk (keep-alive, Prometheus' Accept headers, gzip), 1 and 20
  scrapers, and the exposition's size.

The double is not a driver: it stats its control file on every call, so per-call costs are an
upper bound of the Python side plus the double. Pod attribution on the same 8 x 7 layout with 56
pods is measured by bench/pods.py.

    .venv/bin/python bench/mig.py [--seconds 20] [--wrk-seconds 10] [--interval 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/exporter.py would shadow the exporter package: the repository root first, this directory last.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

from common import PROMETHEUS_HEADERS, measure_cpu, wrk  # noqa: E402
from nvmldouble import NvmlDouble, build, exporter_args, gpu_values, scrape  # noqa: E402
from servers import http_get, start_exporter, wait_for  # noqa: E402

GPUS, INSTANCES, GIB = 8, 7, 2**30
GPM = {1: 40.0, 2: 31.5, 3: 12.0, 5: 9.5, 10: 22.0, 20: 850.0, 21: 1700.0, 60: 12000.0, 61: 11000.0}


def control(mig: bool) -> dict[str, str | int | float]:
    keys: dict[str, str | int | float] = {"gpus": GPUS}
    for g in range(GPUS):
        keys.update(gpu_values(g))
        keys[f"gpu.{g}.gpm.supported"] = 1
        keys.update({f"gpu.{g}.gpm.{i}": v for i, v in GPM.items()})
        if not mig:
            continue
        keys[f"gpu.{g}.mig.mode"] = 1
        for k in range(INSTANCES):
            pre = f"gpu.{g}.mig.{k}"
            keys.update({
                f"{pre}.uuid": f"MIG-{g:04x}{k:04x}-7b2f-5e8a-9c4d-{g * 16 + k:012x}",
                f"{pre}.gi_id": 7 + k, f"{pre}.ci_id": 0, f"{pre}.profile_id": 19,
                f"{pre}.memory.total": 10 * GIB, f"{pre}.memory.used": (1 + k) * GIB,
            })  # fmt: skip
            keys.update({f"{pre}.gpm.{i}": v / (1 + k % 3) for i, v in GPM.items()})
    return keys


def instance_series(url: str) -> int:
    return sum(1 for n, lbl, _ in scrape(url) if n == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in lbl)


def collector_seconds(url: str) -> float | None:
    return next(
        (
            v
            for n, lbl, v in scrape(url)
            if n == "rightsizer_collector_duration_seconds" and lbl["collector"] == "nvml"
        ),
        None,
    )


def calls_per_cycle(lib: Path, work: Path, mig: bool, interval: float) -> float:
    """NVML calls per cycle, from the double's trace over a few steady cycles."""
    double = NvmlDouble(lib, work)
    double.set(control(mig))
    proc = start_exporter(exporter_args(work, interval=interval, call_timeout_seconds=2), env=double.env())
    try:
        wait_for(lambda: double.call_count("nvmlGpmMetricsGet", 0) >= 2, 30, what="steady cycles")
        first_cycles, first_calls = (
            double.call_count("nvmlDeviceGetPowerUsage", 0),
            sum(double.calls().values()),
        )
        wait_for(
            lambda: double.call_count("nvmlDeviceGetPowerUsage", 0) >= first_cycles + 5, 60, what="5 cycles"
        )
        cycles = double.call_count("nvmlDeviceGetPowerUsage", 0) - first_cycles
        return (sum(double.calls().values()) - first_calls) / cycles
    finally:
        proc.stop()


def run(lib: Path, mig: bool, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-mig-") as tmp:
        work = Path(tmp)
        (work / "count").mkdir()
        calls = calls_per_cycle(lib, work / "count", mig, args.interval)
        double = NvmlDouble(lib, work)
        double.set(control(mig))
        env = {k: v for k, v in double.env().items() if k != "NVML_DOUBLE_TRACE"}  # no trace while timing
        proc = start_exporter(exporter_args(work, interval=args.interval, call_timeout_seconds=2), env=env)
        try:
            expected = GPUS * INSTANCES if mig else 0
            wait_for(
                lambda: instance_series(proc.url) == expected, 30, what=f"{expected} MIG instance series"
            )
            durations: list[float] = []

            def note() -> None:
                d = collector_seconds(proc.url)
                if d is not None:
                    durations.append(d)

            cpu, rss = measure_cpu(proc.proc.pid, args.seconds, note)
            _, _, body = http_get(proc.url + "/metrics", timeout=5)
            url = proc.url + "/metrics"
            one = wrk(url, 1, args.wrk_seconds, PROMETHEUS_HEADERS)
            many = wrk(url, 20, args.wrk_seconds, PROMETHEUS_HEADERS)
        finally:
            proc.stop()
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    p95 = statistics.quantiles(durations, n=20)[-1] if len(durations) >= 2 else float("nan")
    return {
        "series": float(len(lines)),
        "bytes": float(len(body)),
        "calls": calls,
        "cycle_p50_ms": 1000 * statistics.median(durations),
        "cycle_p95_ms": 1000 * p95,
        "cpu": cpu,
        "rss_mib": rss / 2**20,
        "p50_1": one.p50_ms, "p99_1": one.p99_ms, "rps_1": one.requests_per_second,
        "p50_20": many.p50_ms, "p99_20": many.p99_ms, "rps_20": many.requests_per_second,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20, help="CPU and cycle-cost measuring time per layout")
    p.add_argument("--wrk-seconds", type=int, default=10, help="wrk duration per scraper count")
    p.add_argument("--interval", type=float, default=1.0, help="sampling interval")
    args = p.parse_args()
    lib = build(Path(tempfile.mkdtemp(prefix="bench-nvml-double-"))).parent
    started = time.monotonic()
    results = {name: run(lib, mig, args) for name, mig in (("8 GPUs", False), ("8 GPUs x 7 MIG", True))}
    print(f"NVML double, GPM and XID events on, interval {args.interval:g} s, {args.seconds:g} s per layout")
    print(f"{'layout':<16}{'series':>8}{'KiB':>7}{'calls/cycle':>12}{'cycle p50':>11}{'cycle p95':>11}"
          f"{'CPU %':>7}{'RSS MiB':>9}")  # fmt: skip
    for name, r in results.items():
        cycle = f"{r['cycle_p50_ms']:>9.1f}ms{r['cycle_p95_ms']:>9.1f}ms"
        print(f"{name:<16}{r['series']:>8.0f}{r['bytes'] / 1024:>7.0f}{r['calls']:>12.0f}"
              f"{cycle}{r['cpu']:>7.1f}{r['rss_mib']:>9.0f}")  # fmt: skip
    print(f"\n/metrics scrape latency (wrk {args.wrk_seconds} s, keep-alive, gzip)")
    print(f"{'layout':<16}{'1 scraper p50/p99':>22}{'req/s':>9}{'20 scrapers p50/p99':>24}{'req/s':>9}")
    for name, r in results.items():
        print(f"{name:<16}{r['p50_1']:>10.2f}/{r['p99_1']:<6.2f}ms{r['rps_1']:>9.0f}"
              f"{r['p50_20']:>12.2f}/{r['p99_20']:<6.2f}ms{r['rps_20']:>9.0f}")  # fmt: skip
    print(f"\n(took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
