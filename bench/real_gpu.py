"""rightsizer-exporter beside nvitop-exporter on a machine with real NVIDIA GPUs.

``bench/peer.py`` compares the two on the tests' NVML double, whose calls cost what a stat() costs;
on a driver some calls cost milliseconds (the energy counter took 4 ms on an H200), so the figures
that matter for a node are taken here, on the real library. Both exporters run in turn (ours,
nvitop-exporter, ours, ...) at a 1 s interval with their defaults, with no scrape during each CPU
window. It prints, for each run:

- CPU: process CPU time (utime + stime, /proc/<pid>/stat) over ``--seconds``, as % of one core;
- RSS: peak VmRSS during the window (and, for ours, RssAnon / RssFile at its end);
- series published (non-comment lines of /metrics) and scrape latency p50/p99 over 50 GETs after
  the window;
- the time from start to the first /metrics answer, and the median ratio ours / theirs per pair.

nvitop-exporter is not a dependency of this project: install ``nvitop-exporter`` beside it, e.g.
``pip install nvitop-exporter``. Usage (from the repository root):

    python3 bench/real_gpu.py [--seconds 25] [--pairs 2] [--metrics-out FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return bytes(answer.read())


def command(which: str, port: int) -> list[str]:
    if which == "ours":
        return [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "1",
                "--log-level", "warning"]
    return [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1", "--port", str(port),
            "--interval", "1"]


def one_run(which: str, seconds: float, metrics_out: Path | None) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    started = time.monotonic()
    proc = subprocess.Popen(command(which, port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        body = b""
        while time.monotonic() - started < 60:
            if proc.poll() is not None:
                raise SystemExit(f"{which} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                body = get(url)
                break
            except OSError:
                time.sleep(0.05)
        first = time.monotonic() - started
        time.sleep(5)  # past start-up and the first slow-cadence reads
        cpu0, t0, peak = cpu_seconds(proc.pid), time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            peak = max(peak, status_kib(proc.pid, "VmRSS"))
            time.sleep(0.5)
        cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0) * 100
        latencies = []
        for _ in range(50):
            t = time.perf_counter()
            body = get(url)
            latencies.append((time.perf_counter() - t) * 1000)
        if metrics_out is not None and which == "ours":
            metrics_out.write_bytes(body)
        series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        latencies.sort()
        return {"cpu_pct": cpu, "rss_mib": peak / 1024, "anon_mib": status_kib(proc.pid, "RssAnon") / 1024,
                "file_mib": status_kib(proc.pid, "RssFile") / 1024, "series": series,
                "p50_ms": latencies[24], "p99_ms": latencies[-1], "first_s": first}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--metrics-out", type=Path)
    args = parser.parse_args()
    try:
        import pynvml

        pynvml.nvmlInit()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        print(f"GPUs: {names}; driver {pynvml.nvmlSystemGetDriverVersion()}; Python {sys.version.split()[0]}")
        pynvml.nvmlShutdown()
    except Exception as error:  # a report of what the machine has, then on
        print(f"NVML: {error}")
    ratios: dict[str, list[float]] = {"cpu_pct": [], "rss_mib": []}
    print(f"{'run':<8} {'CPU %':>7} {'RSS MiB':>8} {'anon':>6} {'file':>6} {'series':>7} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'first s':>8}")
    for _ in range(args.pairs):
        pair = {}
        for which in ("ours", "nvitop"):
            r = pair[which] = one_run(which, args.seconds, args.metrics_out)
            print(f"{which:<8} {r['cpu_pct']:7.2f} {r['rss_mib']:8.1f} {r['anon_mib']:6.1f} "
                  f"{r['file_mib']:6.1f} {r['series']:7.0f} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} "
                  f"{r['first_s']:8.2f}", flush=True)
        for key in ratios:
            ratios[key].append(pair["ours"][key] / pair["nvitop"][key])
    for key, values in ratios.items():
        print(f"ours / nvitop-exporter, {key}: median {statistics.median(values):.2f} "
              f"(pairs: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
