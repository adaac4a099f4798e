"""Simulated fleet figures: CPU per ``collect()`` (it runs every cycle on the event loop) for the
8-GPU default and the 64-GPU large64 scenarios, with and without the per-cycle host CPU and queue
reads the right-sizing engine makes, and the cost of replaying an hour of history.

    .venv/bin/python bench/simulated.py [--cycles 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

# bench/exporter.py would shadow the exporter package: import it from the repository root instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from exporter.sources.simulated.source import Scenario, SimulatedSource, load_scenario  # noqa: E402


class Ticker:
    """A monotonic clock that the benchmark moves one second per cycle, as at speed 1."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def per_cycle_ms(scenario: Scenario, cycles: int, engine_reads: bool) -> tuple[float, float]:
    """Median and p99 CPU milliseconds of one cycle, each at a new simulated second."""
    clock = Ticker()
    src = SimulatedSource(scenario, monotonic=clock)

    async def run() -> list[float]:
        costs = []
        for _ in range(cycles):
            clock.now += 1.0
            began = time.process_time()
            reading = await src.collect()
            if engine_reads:
                src.host_cpu_busy_ratio(reading.timestamp)
                src.queue_samples(reading.timestamp)
            costs.append((time.process_time() - began) * 1000)
        return costs

    costs = asyncio.run(run())
    costs.sort()
    return statistics.median(costs), costs[int(0.99 * (len(costs) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'scenario':10} {'GPUs':>4} {'collect p50 ms':>15} {'p99 ms':>8} {'+engine reads p50 ms':>21}"
          f" {'replay 1 h / 5 s (s)':>21}")
    for name in ("default", "large64"):
        scenario = load_scenario(name)
        p50, p99 = per_cycle_ms(scenario, args.cycles, False)
        e50, _ = per_cycle_ms(scenario, args.cycles, True)
        src = SimulatedSource(scenario)
        began = time.process_time()
        count = sum(1 for _ in src.history(3600, 5))
        replay = time.process_time() - began
        gpus = len(scenario.gpus)
        print(f"{name:10} {gpus:>4} {p50:>15.3f} {p99:>8.3f} {e50:>21.3f} {replay:>17.2f} ({count})")


if __name__ == "__main__":
    main()
