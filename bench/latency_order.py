"""The time to read a workload's queue, TTFT and end-to-end histograms together
(``rightsizing.slo.latency.ordered``), which the exporter does for every workload at every
right-sizing pass: three histograms of N finite bounds each, on three different layouts (the worst
case: every bound of one is missing from the others), at N = 64, 512 (the most a layout keeps after
thinning) and 2,000.

    .venv/bin/python bench/latency_order.py [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rightsizing.slo.latency import Histogram, ordered


def histogram(n: int, offset: float, scale: float) -> Histogram:
    bounds = tuple(0.001 * (1.0 + offset) * 1.01**i for i in range(n))
    counts = tuple(float(round(scale * 1000 * (i + 1) / n)) for i in range(n))
    return Histogram(bounds, (*counts, counts[-1]), counts[-1] * bounds[n // 2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"{'bounds per histogram':>22} {'ordered() median':>18} {'min':>10}")
    for n in (64, 512, 2000):
        offsets = {"queue": 0.0, "ttft": 0.003, "e2e": 0.007}
        hs = {kind: histogram(n, offset, 1.0) for kind, offset in offsets.items()}
        times = []
        for _ in range(args.reps):
            started = time.perf_counter()
            ordered(hs)
            times.append(time.perf_counter() - started)
        print(f"{n:>22,} {statistics.median(times) * 1000:>15.2f} ms {min(times) * 1000:>7.2f} ms")


if __name__ == "__main__":
    main()
