"""rightsizer-exporter next to nvitop-exporter on the same NVML library (issue 13).

Both exporters run in turn (ours, nvitop, ours, nvitop, ...) as subprocesses on nvidia-ml-py and
the tests' C double of libnvidia-ml.so.1, at the same interval, with no scrapes while their CPU is
measured. Ours runs with its defaults: every DCGM field it reads, GPM profiling ratios (the double's
GPUs are H100s with GPM), XID events and right-sizing; no pods, queues or TLS. Per layout
(8 GPUs; 8 GPUs x 7 MIG instances; 64 GPUs) it prints:

- CPU: process CPU time (utime + stime from /proc) over ``--seconds`` with no scrapes (or, with
  ``--scrape-every S``, one GET of /metrics every S seconds, as Prometheus would), as % of one core;
  the median of ``--reps`` repetitions, and the median of the per-pair ratios (the machine is
  shared, so a pair measured back to back is more trustworthy than absolute numbers);
- RSS: peak VmRSS during the window;
- NVML calls per GPU per cycle: the double's call counters (``NVML_DOUBLE_COUNTERS``, every call
  with a device counts on its GPU) over the window, divided by GPUs and by window / interval;
- series published (non-comment lines of /metrics) and scrape latency p50/p99 (wrk, one keep-alive
  connection, after the CPU window).

nvitop-exporter is not a dependency of this project: install it into a venv of its own and name
its script, e.g. ``python3 -m venv /tmp/nvitop && /tmp/nvitop/bin/pip install nvitop-exporter``:

    .venv/bin/python bench/peer.py --nvitop /tmp/nvitop/bin/nvitop-exporter [--seconds 60] [--reps 3]

The double is not a driver: each call costs a stat() of its control file, so calls cost both
exporters more than they would on a real GPU (the per-call share of CPU is an upper bound).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

from common import cpu_seconds, rss_bytes, wrk  # noqa: E402
from mig import GPM, INSTANCES  # noqa: E402
from nvmldouble import NvmlDouble, build, gpu_values  # noqa: E402
from servers import free_port, http_get, start_exporter, wait_for  # noqa: E402

GIB = 2**30
LAYOUTS = (("8 GPUs", 8, False), ("8 GPUs x 7 MIG", 8, True), ("64 GPUs", 64, False))


def control(gpus: int, mig: bool) -> dict[str, str | int | float]:
    """H100s with GPM and no processes; with ``mig`` each in MIG mode with 7 x 1g.10gb instances."""
    keys: dict[str, str | int | float] = {"gpus": gpus}
    for g in range(gpus):
        keys.update(gpu_values(g, processes="", pci_bus_id=f"00000000:{0x18 + g:02X}:00.0"))
        keys[f"gpu.{g}.gpm.supported"] = 1
        keys.update({f"gpu.{g}.gpm.{i}": v for i, v in GPM.items()})
        if mig:
            keys[f"gpu.{g}.mig.mode"] = 1
            for k in range(INSTANCES):
                pre = f"gpu.{g}.mig.{k}"
                keys.update({
                    f"{pre}.uuid": f"MIG-{g:04x}{k:04x}-7b2f-5e8a-9c4d-{g * 16 + k:012x}",
                    f"{pre}.gi_id": 7 + k, f"{pre}.ci_id": 0, f"{pre}.profile_id": 19,
                    f"{pre}.memory.total": 10 * GIB, f"{pre}.memory.used": (1 + k) * GIB,
                })  # fmt: skip
    return keys


@dataclass
class Run:
    cpu_percent: float
    rss_mib: float
    calls_per_gpu_cycle: float
    series: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")


class Program:
    """One exporter process on the double: started, measured, stopped."""

    def __init__(
        self, name: str, start: Callable[[dict[str, str], Path], tuple[subprocess.Popen[bytes], str]]
    ):
        self.name = name
        self._start = start

    def measure(self, double: NvmlDouble, gpus: int, args: argparse.Namespace, latency: bool) -> Run:
        proc, url = self._start(double.env(), double.control_path.parent)
        try:
            wait_for(
                lambda: http_get(url + "/metrics", timeout=5)[0] == 200, 60, what=f"{self.name} /metrics"
            )
            time.sleep(args.warmup)
            before_calls, before_cpu, t0 = (
                sum(double.call_totals()[0]),
                cpu_seconds(proc.pid),
                time.monotonic(),
            )
            peak = rss_bytes(proc.pid)
            every = args.scrape_every
            next_scrape = t0 + every if every > 0 else float("inf")
            while time.monotonic() - t0 < args.seconds:
                now = time.monotonic()
                if now >= next_scrape:  # as Prometheus would: one GET of /metrics every ``every`` s
                    http_get(url + "/metrics", timeout=10)
                    next_scrape += every
                    continue
                time.sleep(min(1.0, args.seconds - (now - t0), next_scrape - now))
                peak = max(peak, rss_bytes(proc.pid))
            elapsed = time.monotonic() - t0
            used, calls = cpu_seconds(proc.pid) - before_cpu, sum(double.call_totals()[0]) - before_calls
            run = Run(100 * used / elapsed, peak / 2**20, calls / gpus / (elapsed / args.interval))
            if latency:
                _, _, body = http_get(url + "/metrics", timeout=10)
                run.series = sum(1 for ln in body.decode().splitlines() if ln and not ln.startswith("#"))
                lat = wrk(url + "/metrics", 1, args.wrk_seconds)
                run.p50_ms, run.p99_ms = lat.p50_ms, lat.p99_ms
            return run
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def ours(interval: float) -> Program:
    def start(env: dict[str, str], work: Path) -> tuple[subprocess.Popen[bytes], str]:
        config = work / "exporter.yaml"
        config.write_text(f"interval: {interval}\n")
        p = start_exporter(["--config", str(config)], env=env, timeout=60)
        return p.proc, p.url

    return Program("rightsizer-exporter", start)


def nvitop(script: str, interval: float) -> Program:
    def start(env: dict[str, str], work: Path) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        log = (work / "nvitop.log").open("wb")
        cmd = [script, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", str(interval)]
        p = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=work)
        return p, f"http://127.0.0.1:{port}"

    return Program("nvitop-exporter", start)


def layout(
    lib: Path, gpus: int, mig: bool, programs: list[Program], args: argparse.Namespace
) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {p.name: [] for p in programs}
    for rep in range(args.reps):
        for program in programs:  # in turn: A B A B ...
            with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
                double = NvmlDouble(lib, Path(tmp), trace=False)  # counters only while timing
                double.set(control(gpus, mig))
                out[program.name].append(program.measure(double, gpus, args, latency=rep == 0))
    return out


def print_table(results: dict[str, dict[str, list[Run]]], names: list[str]) -> None:
    a, b = names
    print(f"{'layout':<16}{'':<21}{'CPU %':>7}{'RSS MiB':>9}{'calls/GPU/cycle':>17}{'series':>8}"
          f"{'scrape p50':>12}{'p99':>9}")  # fmt: skip
    for title, runs in results.items():
        for name in names:
            r = runs[name]
            first = r[0]
            print(f"{title:<16}{name:<21}{statistics.median(x.cpu_percent for x in r):>7.2f}"
                  f"{statistics.median(x.rss_mib for x in r):>9.1f}"
                  f"{statistics.median(x.calls_per_gpu_cycle for x in r):>17.1f}{first.series:>8}"
                  f"{first.p50_ms:>10.2f}ms{first.p99_ms:>7.2f}ms")  # fmt: skip
            title = ""
        pairs = list(zip(runs[a], runs[b], strict=True))
        cpu = statistics.median(x.cpu_percent / y.cpu_percent for x, y in pairs)
        spread = ", ".join(f"{x.cpu_percent / y.cpu_percent:.2f}" for x, y in pairs)
        print(f"{'':<16}{'ratio ours/nvitop':<21}{cpu:>7.2f}"
              f"{statistics.median(x.rss_mib / y.rss_mib for x, y in pairs):>9.2f}"
              f"{statistics.median(x.calls_per_gpu_cycle / y.calls_per_gpu_cycle for x, y in pairs):>17.2f}"
              f"{runs[a][0].series / max(1, runs[b][0].series):>8.2f}"
              f"{runs[a][0].p50_ms / runs[b][0].p50_ms:>12.3f}{runs[a][0].p99_ms / runs[b][0].p99_ms:>9.3f}"
              f"   (CPU per pair: {spread})")  # fmt: skip
    if "8 GPUs" in results and "64 GPUs" in results:
        for name in names:
            small = statistics.median(x.cpu_percent for x in results["8 GPUs"][name])
            big = statistics.median(x.cpu_percent for x in results["64 GPUs"][name])
            print(f"{name}: CPU with 64 GPUs / with 8 GPUs = {big / small:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nvitop", default=shutil.which("nvitop-exporter"), help="the nvitop-exporter script")
    p.add_argument("--seconds", type=float, default=60, help="CPU window per run")
    p.add_argument(
        "--scrape-every", type=float, default=0, help="GET /metrics every S s in the CPU window (0: none)"
    )
    p.add_argument("--reps", type=int, default=3, help="runs per exporter and layout, in turn")
    p.add_argument("--warmup", type=float, default=5, help="seconds after start before measuring")
    p.add_argument("--interval", type=float, default=1.0, help="sampling interval of both")
    p.add_argument("--wrk-seconds", type=int, default=5, help="scrape latency measuring time")
    p.add_argument("--layouts", default="8 GPUs,8 GPUs x 7 MIG,64 GPUs", help="comma-separated subset")
    args = p.parse_args()
    if not args.nvitop:
        raise SystemExit("nvitop-exporter not found: install it into a venv and pass --nvitop PATH")
    lib = build(Path(tempfile.mkdtemp(prefix="bench-nvml-double-"))).parent
    programs = [ours(args.interval), nvitop(args.nvitop, args.interval)]
    wanted = [s.strip() for s in args.layouts.split(",")]
    started = time.monotonic()
    results = {t: layout(lib, n, mig, programs, args) for t, n, mig in LAYOUTS if t in wanted}
    scrapes = f"a scrape every {args.scrape_every:g} s" if args.scrape_every > 0 else "no scrapes"
    print(f"NVML double (H100s with GPM, no processes), interval {args.interval:g} s, CPU over "
          f"{args.seconds:g} s with {scrapes}, median of {args.reps} runs in turn; scrape: wrk 1 connection "
          f"{args.wrk_seconds} s")  # fmt: skip
    print_table(results, [p.name for p in programs])
    print(f"\n(took {time.monotonic() - started:.0f} s on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
