"""What each part of rightsizer-exporter costs to import, and what the default exporter loads.

Two tables:

1. Each import's cost, measured in fresh interpreters (median of ``--runs``): wall time of the
   ``import`` statement and the growth of VmRSS (with its RssAnon / RssFile split) after glibc's
   ``malloc_trim``, as the exporter does after start-up. "alone" imports it into a bare
   interpreter (shared dependencies such as asyncio count in full); "on top" imports it after what
   the default real-NVML exporter loads anyway (``exporter.cli``, the NVML source, the right-sizing
   extension), so it is what configuring that part adds.
2. The default exporter (1 s interval, right-sizing on; no pods, queues, discovery, DCGM page or
   TLS) started as ``bench/peer.py`` starts it, on nvidia-ml-py and the tests' C double of
   libnvidia-ml.so.1 (8 H100s with GPM), after one scrape of /metrics: which of the parts it has
   imported (CPython's ``PYTHONPROFILEIMPORTTIME`` names every module the process imports, for its
   whole life), how many modules, and its RSS split.

    .venv/bin/python bench/imports.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

import common  # noqa: E402,F401  first: puts tests/ on sys.path for the test modules below
from nvmldouble import NvmlDouble, build  # noqa: E402
from peer import control  # noqa: E402
from servers import http_get, start_exporter  # noqa: E402

# (part, module that brings it in, modules whose presence in a process says the part is loaded)
PARTS = (
    ("HTTP server (aiohttp)", "aiohttp.web", ("aiohttp",)),
    ("asyncio + ssl (TLS)", "asyncio", ("ssl",)),
    ("NVML bindings", "pynvml", ("pynvml",)),
    ("YAML", "yaml", ("yaml",)),
    ("configuration schema", "exporter.config", ("exporter.config",)),
    ("right-sizing engine", "exporter.rightsizing_live.extension", ("rightsizing.verdicts",)),
    ("status page", "exporter.status.page", ("exporter.status.page", "exporter.status.model")),
    ("patch writer", "rightsizing.patches.build", ("rightsizing.patches.build",)),
    ("pods: gRPC + kubelet", "exporter.sources.pods.extension", ("grpc", "google.protobuf")),
    ("discovery (kubelet)", "exporter.sources.discovery.extension", ("exporter.sources.discovery.kubelet",)),
    ("queues (HTTP)", "exporter.sources.queues.manager", ("exporter.sources.queues.manager",)),
    ("queues: redis", "exporter.sources.queues.redis", ("redis",)),
    ("prometheus-client parser", "prometheus_client.parser", ("prometheus_client",)),
    ("DCGM page", "exporter.sources.dcgm.extension", ("exporter.sources.dcgm.extension",)),
    ("simulator", "exporter.sources.simulated.source", ("exporter.sources.simulated.source",)),
)
DEFAULT_PATH = ("exporter.cli", "exporter.sources.nvml.source", "exporter.rightsizing_live.extension")

_PROBE = """
import ctypes, json, re, sys, time
trim = ctypes.CDLL("libc.so.6").malloc_trim
def rss():
    trim(0)
    text = open("/proc/self/status").read()
    return [int(re.search(k + r":\\s+(\\d+)", text).group(1)) / 1024 for k in ("VmRSS", "RssAnon", "RssFile")]
for m in BASE:
    __import__(m)
before, n = rss(), len(sys.modules)
t0 = time.perf_counter()
__import__(MODULE)
ms = 1000 * (time.perf_counter() - t0)
after = rss()
print(json.dumps({"ms": ms, "rss": [a - b for a, b in zip(after, before)], "modules": len(sys.modules) - n}))
"""


def cost(module: str, base: tuple[str, ...], runs: int) -> tuple[float, list[float], int]:
    """Median import time (ms), RSS growth [VmRSS, RssAnon, RssFile] (MiB) and modules added."""
    results = []
    for _ in range(runs):
        code = f"BASE = {base!r}\nMODULE = {module!r}\n{_PROBE}"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"importing {module} failed:\n{done.stderr}")
        results.append(json.loads(done.stdout))
    rss = [statistics.median(r["rss"][i] for r in results) for i in range(3)]
    return statistics.median(r["ms"] for r in results), rss, results[0]["modules"]


def imported(log: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", log, re.M)}


def memory(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of a process, MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = {m.group(1): int(m.group(2)) / 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB", status, re.M)}
    return {k: found[k] for k in ("VmRSS", "RssAnon", "RssFile")}


def default_exporter(gpus: int, settle: float) -> tuple[set[str], dict[str, float]]:
    lib = build(Path(tempfile.mkdtemp(prefix="bench-nvml-double-"))).parent
    with tempfile.TemporaryDirectory(prefix="bench-imports-") as tmp:
        double = NvmlDouble(lib, Path(tmp), trace=False)
        double.set(control(gpus, False))
        config = Path(tmp) / "exporter.yaml"
        config.write_text("interval: 1\n")
        env = {**double.env(), "PYTHONPROFILEIMPORTTIME": "1"}
        proc = start_exporter(["--config", str(config)], env=env, timeout=60)
        try:
            time.sleep(settle)
            http_get(proc.url + "/metrics", timeout=10)
            time.sleep(settle)
            return imported(proc.log()), memory(proc.proc.pid)
        finally:
            proc.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="fresh interpreters per import and column")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the double for the default exporter")
    p.add_argument("--settle", type=float, default=5, help="seconds before and after the scrape")
    args = p.parse_args()
    loaded, rss = default_exporter(args.gpus, args.settle)
    version = sys.version.split()[0]
    print(f"Import costs, median of {args.runs} fresh interpreters (Python {version}); RSS after malloc_trim")
    print(f"{'part':<27}{'module':<38}{'alone ms':>9}{'MiB':>6}{'anon':>6}{'file':>6}"
          f"{'on top ms':>10}{'MiB':>6}{'modules':>8}  default exporter")  # fmt: skip
    for part, module, markers in PARTS:
        ms, mib, _ = cost(module, (), args.runs)
        top_ms, top, added = cost(module, DEFAULT_PATH, args.runs)
        present = "loaded" if any(m in loaded for m in markers) else "-"
        print(f"{part:<27}{module:<38}{ms:>9.1f}{mib[0]:>6.1f}{mib[1]:>6.1f}{mib[2]:>6.1f}"
              f"{top_ms:>10.1f}{top[0]:>6.1f}{added:>8}  {present}")  # fmt: skip
    total_ms, total, count = cost(DEFAULT_PATH[0], (), args.runs)
    print(f"\nexporter.cli alone: {total_ms:.0f} ms, {total[0]:.1f} MiB ({count} modules)")
    print(f"default exporter on the double ({args.gpus} GPUs, after one scrape): {len(loaded)} modules "
          f"imported, VmRSS {rss['VmRSS']:.1f} MiB "
          f"(anon {rss['RssAnon']:.1f}, file {rss['RssFile']:.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
