"""Status page figures: time to render ``/`` for one published cycle, and its size.

The page is rendered on the first request after each cycle and then served from memory, so this
is the cost one viewer (or many) adds per cycle, paid on the event loop of the HTTP server, never
by the sampling loop. Fleet: a built-in simulated scenario with its hour of history replayed (the
``large64`` scenario: 64 GPUs), the real right-sizing extension, one sampling cycle.

    .venv/bin/python bench/status.py [--scenario large64] [--renders 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

# bench/exporter.py would shadow the exporter package: import from the repository root instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from exporter.render import Renderer  # noqa: E402
from exporter.rightsizing_live.extension import RightsizingExtension  # noqa: E402
from exporter.sampler import Sampler  # noqa: E402
from exporter.sources.simulated.source import SimulatedSource, load_scenario  # noqa: E402
from exporter.status import StatusPage  # noqa: E402
from exporter.status.model import ChartMemo, build  # noqa: E402
from exporter.status.page import render  # noqa: E402
from rightsizing.catalog import load_catalog  # noqa: E402
from rightsizing.settings import RightsizingSettings  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="large64")
    ap.add_argument("--renders", type=int, default=50)
    args = ap.parse_args()
    source = SimulatedSource(load_scenario(args.scenario))
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source)
    sampler = Sampler(source, Renderer(), 1.0, "bench", [ext])
    await sampler.start()
    cold, loop_part, thread_part = [], [], []
    size = 0
    try:
        for _ in range(5):  # the first view after start: no bucket remembered yet
            published = sampler.current
            assert published is not None
            started = time.perf_counter()
            size = len(await StatusPage("simulated", 1.0).body(published))
            cold.append(time.perf_counter() - started)
        memo = ChartMemo()
        for _ in range(args.renders):  # one view per cycle: finished buckets remembered
            published = await sampler.cycle()
            started = time.perf_counter()
            model = build(published.snapshot, "simulated", 1.0, memo)
            middle = time.perf_counter()
            size = len(render(model).encode())
            loop_part.append(middle - started)
            thread_part.append(time.perf_counter() - middle)
    finally:
        await sampler.stop()
    gpus = len(published.snapshot.gpus)
    ms = 1000
    print(f"status page, simulated fleet '{args.scenario}' ({gpus} GPUs, 1 h window replayed):")
    print(f"  first view after start: median {statistics.median(cold) * ms:.1f} ms (5 renders)")
    print(
        f"  one view per cycle ({args.renders} cycles): content read on the event loop median "
        f"{statistics.median(loop_part) * ms:.1f} ms, max {max(loop_part) * ms:.1f} ms; "
        f"HTML in a worker thread median {statistics.median(thread_part) * ms:.1f} ms"
    )
    print(f"  size {size / 1024:.0f} KiB ({size / gpus / 1024:.1f} KiB per GPU)")


if __name__ == "__main__":
    asyncio.run(main())
