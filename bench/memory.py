"""Resident memory of rightsizer-exporter on the NVML path, stage by stage (issue 13's RSS target).

Runs the exporter as ``bench/peer.py`` does (its defaults, 1 s interval, on nvidia-ml-py and the
tests' C double of libnvidia-ml.so.1: H100s with GPM, no processes; no pods, queues or TLS) and
prints VmRSS with its RssAnon / RssFile split and the thread count from ``/proc/<pid>/status``:

- fresh windows: ``--wait`` s after start, then 15 s after one GET of /metrics (the first read
  scores right-sizing, renders and starts the render worker thread), then 15 s after a second;
- full windows: with ``rightsizing.window_seconds: 120`` every bucket of every window has taken
  samples 135 s after start (the default hour would take an hour); the same stages.

    .venv/bin/python bench/memory.py [--gpus 8] [--wait 10] [--skip-full]

Single runs: RSS moves by 0.1 MiB between runs of the same code.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

import common  # noqa: E402,F401  first: puts tests/ on sys.path for the test modules below
from nvmldouble import NvmlDouble, build  # noqa: E402
from peer import control  # noqa: E402
from servers import http_get, start_exporter  # noqa: E402

FULL_WINDOW = 120  # seconds: rightsizing.window_seconds for the full-windows run


def status(pid: int) -> str:
    """VmRSS, RssAnon, RssFile (MiB) and Threads of a process."""
    values: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = (rest.split() or [""])[0]
    mib = [f"{k} {int(values[k]) / 1024:5.1f}" for k in ("VmRSS", "RssAnon", "RssFile")]
    return "  ".join([*mib, f"Threads {values['Threads']}"])


def run(lib: Path, gpus: int, wait: float, window: float | None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        double = NvmlDouble(lib, Path(tmp), trace=False)
        double.set(control(gpus, False))
        config = Path(tmp) / "exporter.yaml"
        text = "interval: 1\n"
        if window is not None:
            text += f"rightsizing:\n  window_seconds: {window:g}\n  min_history_seconds: 60\n"
            text += f"  idle_after_seconds: {window:g}\n"
        config.write_text(text)
        proc = start_exporter(["--config", str(config)], env=double.env(), timeout=60)
        title = "full windows" if window is not None else "fresh windows"
        try:
            time.sleep(wait)
            print(f"{title:<14}{f'{wait:g} s after start':<26}{status(proc.proc.pid)}", flush=True)
            for n in (1, 2):
                http_get(proc.url + "/metrics", timeout=10)
                time.sleep(15)
                print(f"{'':<14}{f'15 s after scrape {n}':<26}{status(proc.proc.pid)}", flush=True)
        finally:
            proc.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--wait", type=float, default=10, help="seconds after start before the first figure")
    p.add_argument("--skip-full", action="store_true", help="only the fresh-windows run")
    args = p.parse_args()
    lib = build(Path(tempfile.mkdtemp(prefix="bench-nvml-double-"))).parent
    print(f"NVML double, {args.gpus} H100s with GPM, interval 1 s; MiB from /proc/<pid>/status")
    run(lib, args.gpus, args.wait, None)
    if not args.skip_full:
        run(lib, args.gpus, FULL_WINDOW + 15, FULL_WINDOW)


if __name__ == "__main__":
    main()
