"""The adapter's own CPU per refresh at fleet scale, stage by stage (issue 32: what a refresh costs
the replica's one process, which shares the interpreter with the answers it serves).

No engine: ``bench/adapter_memory.py``'s fake query API, in a child process so that its CPU is not
counted, answers every built-in rule for the fleet (default 40,000 GPUs on 5,000 nodes) as an
engine would with every exporter healthy. One ``Cache`` and ``PrometheusSource`` in this process
(the adapter's defaults) refresh ``--refreshes`` times after two warm-up refreshes; printed: this
process's CPU per refresh, and the CPU of the thread running each stage (reading the answers,
``parse_answer``; sorting them into values and source states, ``_sort_out``, with its
``classify`` and ``split_parts``; building the cache's vectors, ``_build``; the sweep and indexes
after it, ``_after_refresh``), for every built-in rule and for the two rules the fleet bench's
selectors ask (queue depth and GPU utilisation: the others idle). ``--cold`` forgets the label sets
read before each refresh (``SeenTexts``), so every series is decoded: what a refresh cost before
them. The process runs with the adapter's own settings (``adapter.cli.tune_process``: above all,
no automatic full collection, which would otherwise run during refreshes and traverse every label
set held); ``--python-defaults`` leaves Python's, as this bench did before.

    .venv/bin/python bench/adapter_parse.py [--gpus 40000] [--refreshes 4] [--cold] [--python-defaults]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package

import adapter.cache as cache_module  # noqa: E402
import adapter.sources.prometheus as prometheus  # noqa: E402
from adapter.cli import flags_of, make_source, parser, tune_process  # noqa: E402
from adapter.config import load_config  # noqa: E402
from adapter.selfmetrics import AdapterMetrics  # noqa: E402

ASKED = ("rightsizer_queue_depth", "rightsizer_gpu_utilization_ratio")
ENGINE = f"""
import sys, time
sys.path[0:0] = [{str(BENCH.parent)!r}, {str(BENCH.parent / "tests")!r}, {str(BENCH)!r}]
import adapter_memory as am
engine = am.Engine(am.Fleet(int(sys.argv[1])))
engine.empty = False
print(am.serve(engine), flush=True)
while True:
    time.sleep(3600)
"""
used: collections.Counter[str] = collections.Counter()


def timed(owner: Any, name: str) -> None:
    """Count the CPU of the thread running ``owner.name`` under ``name``."""
    call: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(call)
    def counting(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            used[name] += time.thread_time() - began

    setattr(owner, name, counting)


for owner, name in (
    (prometheus, "parse_answer"),
    (prometheus.PrometheusSource, "_sort_out"),
    (prometheus, "classify"),
    (prometheus, "split_parts"),
    (cache_module.Cache, "_build"),
    (cache_module, "_after_refresh"),
):
    timed(owner, name)


async def refreshes(url: str, names: tuple[str, ...], count: int, cold: bool) -> str:
    cfg = load_config(None, flags_of(parser().parse_args(["--prometheus-url", url])))
    rules = [r for r in cfg.effective_rules if not names or r.name in names]
    metrics = AdapterMetrics()
    source = make_source(cfg, metrics)
    await source.start()
    try:
        cache = cache_module.Cache(rules, source, metrics)
        for _ in range(2):
            await cache.refresh_once()
        used.clear()
        cpu = []
        for _ in range(count):
            if cold:
                prometheus._rotate_seen()
                prometheus._rotate_seen()
            began = time.process_time()
            await cache.refresh_once()
            cpu.append(time.process_time() - began)
            assert all(s.error is None for s in cache.states.values()), "a rule failed"
    finally:
        await source.close()
    stages = ", ".join(f"{name} {seconds / count * 1000:.0f}" for name, seconds in used.most_common())
    cpu.sort()
    return (
        f"{len(rules)} rules: CPU per refresh {sum(cpu) / count * 1000:.0f} ms "
        f"(fastest {cpu[0] * 1000:.0f}, slowest {cpu[-1] * 1000:.0f}); by stage, ms: {stages}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--gpus", type=int, default=40000)
    ap.add_argument("--refreshes", type=int, default=4)
    ap.add_argument("--cold", action="store_true", help="decode every series at every refresh")
    ap.add_argument(
        "--python-defaults",
        action="store_true",
        help="Python's own collector settings, not the adapter's (how this bench measured before)",
    )
    args = ap.parse_args()
    if not args.python_defaults:
        tune_process()  # as a replica runs: no automatic full collection (rightsizer_core/heap.py)
    command = [sys.executable, "-c", ENGINE, str(args.gpus)]
    engine = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout is not None
        url = engine.stdout.readline().strip()
        settings = "Python's defaults" if args.python_defaults else "the adapter's"
        read = "forgotten" if args.cold else "kept"
        print(f"fleet: {args.gpus:,} GPUs; label sets read before: {read}; process settings: {settings}")
        for names in ((), ASKED):
            print(asyncio.run(refreshes(url, names, args.refreshes, args.cold)), flush=True)
    finally:
        engine.kill()


if __name__ == "__main__":
    main()
