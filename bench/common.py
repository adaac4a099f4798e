"""Shared measuring tools for the benchmarks: wrk runs, process CPU and RSS from /proc."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Latency:
    p50_ms: float
    p99_ms: float
    requests_per_second: float


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url: str, connections: int, seconds: int = 10, headers: dict[str, str] | None = None) -> Latency:
    """Keep-alive load from ``connections`` concurrent clients with Debian's wrk (not Python-bound)."""
    binary = shutil.which("wrk")
    if binary is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    args = [binary, f"-c{connections}", f"-t{min(connections, 2)}", f"-d{seconds}s", "--latency"]
    for k, v in (headers or {}).items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run([*args, url], capture_output=True, text=True, timeout=seconds + 30).stdout
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not (p50 and p99 and rps):
        raise RuntimeError(f"could not parse wrk output:\n{out}")
    return Latency(_ms(p50.group(1)), _ms(p99.group(1)), float(rps.group(1)))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_cpu(pid: int, seconds: float, during: object = None) -> tuple[float, int]:
    """(% of one core, peak RSS bytes) of ``pid`` over ``seconds``; ``during()`` is called each second."""
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    peak = rss_bytes(pid)
    while time.monotonic() - start < seconds:
        if callable(during):
            during()
        time.sleep(1.0)
        peak = max(peak, rss_bytes(pid))
    used = cpu_seconds(pid) - start_cpu
    return 100.0 * used / (time.monotonic() - start), peak
