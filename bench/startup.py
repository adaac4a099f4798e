"""Start-up of the real exporter on simulated fleets up to the scenario limits (64 devices, 256
device-hours of history): wall time until it listens, the history replay's own time, CPU seconds
and peak RSS of the process, and how long it takes to exit on SIGTERM sent during the replay.

    .venv/bin/python bench/startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
A100 = {"model": "A100-SXM-80GB", "workload": {"kind": "training"}}
MIG = {"profile": "1g.10gb", "workload": {"kind": "steady_inference"}}
FLEETS = {
    "default (8 GPUs, 1 h)": "default",
    "large64 (64 GPUs, 1 h)": "large64",
    "64 GPUs, 4 h (the limit)": {"history_seconds": 4 * 3600, "gpus": [{**A100, "count": 64}]},
    "8 GPUs x 7 MIG, 4 h (the limit)": {
        "history_seconds": 4 * 3600,
        "gpus": [{"model": "A100-SXM-80GB", "count": 8, "mig": [MIG] * 7}],
    },
}


def start(spec: str, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    args = [sys.executable, "-m", "exporter", "--simulate", spec, "--listen", "127.0.0.1:0"]
    began = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    return proc, began


def wait_for_line(log: Path, pattern: str, proc: subprocess.Popen[bytes], limit: float = 300) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m.group(0)
        if proc.poll() is not None:
            raise SystemExit(f"exporter exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.005)
    raise SystemExit(f"no {pattern!r} within {limit} s")


def reap(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def peak_rss(pid: int) -> int:
    """The process's own high-water mark (``VmHWM``), read while it runs: ``wait4``'s ``ru_maxrss``
    would also count the pages the forked child held of this bench before ``exec``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def one_run(spec: str, work: Path) -> tuple[float, float, float, int, float]:
    log = work / "start.log"
    proc, began = start(spec, log)
    wait_for_line(log, r"msg=listening", proc)
    listening = time.perf_counter() - began
    replay = float(wait_for_line(log, r"windows filled from history.*seconds=([0-9.]+)", proc).split("=")[-1])
    rss = peak_rss(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, cpu = reap(proc)
    # Again, stopped in the middle of the replay this time.
    proc, _ = start(spec, log)
    wait_for_line(log, r"filling windows from history", proc)
    signalled = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    code, _ = reap(proc)
    stop = time.perf_counter() - signalled
    if code != 0 or "stopped during start-up" not in log.read_text():
        print(f"    (SIGTERM landed after the replay, or exit code {code})")
    return listening, replay, cpu, rss, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"simulated fleet, real exporter process, {args.runs} runs each (median); "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (shared)")
    print(f"{'fleet':34} {'to listening s':>14} {'replay s':>9} {'CPU s':>6} {'peak RSS MiB':>13} "
          f"{'exit after SIGTERM mid-replay s':>31}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, fleet in FLEETS.items():
            spec = fleet
            if isinstance(fleet, dict):
                path = work / "scenario.yaml"
                path.write_text(yaml.safe_dump(fleet))
                spec = str(path)
            runs = [one_run(str(spec), work) for _ in range(args.runs)]
            listening, replay, cpu, rss, stop = (statistics.median(r[i] for r in runs) for i in range(5))
            print(f"{name:34} {listening:>14.2f} {replay:>9.2f} {cpu:>6.2f} {rss / 2**20:>13.1f}"
                  f" {stop:>31.3f}")


if __name__ == "__main__":
    main()
