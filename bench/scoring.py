"""Right-sizing figures (issue 5): CPU per scoring cycle for 64 GPUs with full 1 h windows at 1 s
sampling, and memory per GPU window.

A cycle is what the sampler runs for the right-sizing extension every interval: add each GPU's
sample to its window and, when something reads the cycle (here: its rows, as a scrape's render
reads them), score every GPU (evidence, verdict, bottlenecks, recommendation) and build the rows.
A cycle nobody reads is only fed: timed apart. GPU readings come from the simulated fleet (the default
scenario's 8 workloads x 8), so the windows hold realistic distributions; the simulated host CPU
and queue depths are precomputed so the figures are the engine's own cost.

    .venv/bin/python bench/scoring.py [--gpus 64] [--cycles 300]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import yaml

# bench/exporter.py would shadow the exporter package: import from the repository root instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from exporter.rightsizing_live.extension import RightsizingExtension  # noqa: E402
from exporter.rightsizing_live.slo_rows import slo_rows  # noqa: E402
from exporter.sources.simulated.scenario import scenario_path  # noqa: E402
from exporter.sources.simulated.source import SimulatedSource, load_scenario  # noqa: E402
from rightsizer_core.snapshot import GpuReading  # noqa: E402
from rightsizing.balance import findings  # noqa: E402
from rightsizing.catalog import load_catalog  # noqa: E402
from rightsizing.cost import cost_json, cost_rows, workload_costs  # noqa: E402
from rightsizing.hostpsi import PsiReader  # noqa: E402
from rightsizing.settings import RightsizingSettings  # noqa: E402
from rightsizing.slo.verdict import judge  # noqa: E402
from rightsizing.tracker import GpuTracker  # noqa: E402

WINDOW = 3600
DISTINCT = 120  # distinct simulated readings, replayed with fresh timestamps


def fleet(gpus: int) -> SimulatedSource:
    """The default scenario's GPUs, each repeated so the fleet has ``gpus`` GPUs."""
    data = yaml.safe_load(scenario_path("default").read_text())
    entries = data["gpus"]
    per = max(1, gpus // len(entries))
    # A two-socket host with PSI; every other GPU model on node 1 while its pod runs on node 0's CPUs
    # (flagged numa_mismatch), so the NUMA check and the pressure series cost what they cost.
    data["numa_nodes"] = ["0-31", "32-63"]
    data["host_pressure"] = {"memory_some": 0.01, "io_some": 0.05, "io_full": 0.02}
    for i, e in enumerate(entries):
        e["count"] = per + (1 if i < gpus - per * len(entries) else 0)
        e.pop("history_seconds", None)
        e["numa_node"] = i % 2
        if e.get("pod"):
            e["pod"]["cpuset"] = "0-15"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(data))
        return SimulatedSource(load_scenario(str(path)))


def readings(src: SimulatedSource) -> list[GpuReading]:
    now = src.now()
    return [src.reading_at(now - WINDOW + k * 30.0) for k in range(DISTINCT)]


class Replayed:
    """The simulated host CPU and queues at the pooled readings' times, precomputed, so the figures
    are the engine's cost and not the simulator's."""

    def __init__(self, src: SimulatedSource, pool: list[GpuReading], t0: float) -> None:
        self.t0 = t0
        self.cpu = [src.host_cpu_busy_ratio(r.timestamp) for r in pool]
        self.queues = [src.queue_samples(r.timestamp) for r in pool]
        self.pressure = src.host_pressure()
        self.numa = src.numa_placements()
        self.slos = src.slos

    def _k(self, t: float | None) -> int:
        return int((t or 0.0) - self.t0) % DISTINCT

    def host_cpu_busy_ratio(self, t: float | None = None) -> float:
        return self.cpu[self._k(t)]

    def queue_samples(self, t: float | None = None) -> list[Any]:
        return self.queues[self._k(t)]

    def host_pressure(self, t: float | None = None) -> Any:
        return self.pressure

    def numa_placements(self) -> Any:
        return self.numa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=300)
    args = ap.parse_args()
    src = fleet(args.gpus)
    pool = readings(src)
    t0 = src.now() - 2 * WINDOW
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, Replayed(src, pool, t0))
    fill_started = time.perf_counter()
    for k in range(WINDOW):  # a full hour at 1 s
        r = pool[k % DISTINCT]
        ext.feed(t0 + k, r.gpus)
    fill = time.perf_counter() - fill_started
    samples = [ext.trackers[g.identity.key].window.samples for g in pool[0].gpus]
    cpu: list[float] = []
    wall: list[float] = []
    gc.collect()
    for k in range(args.cycles):
        r = pool[k % DISTINCT]
        reading = dataclasses.replace(r, timestamp=t0 + WINDOW + k)
        c0, w0 = time.thread_time(), time.perf_counter()
        contribution = ext.contribute(reading, reading.gpus)
        contribution.rows.get("rightsizer_gpu_verdict")  # read, as a scrape's render reads it
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    assert contribution.rows["rightsizer_gpu_verdict"]
    scorings = ext.scorings
    unread: list[float] = []
    for k in range(args.cycles):
        r = pool[k % DISTINCT]
        reading = dataclasses.replace(r, timestamp=t0 + WINDOW + args.cycles + k)
        c0 = time.thread_time()
        ext.contribute(reading, reading.gpus)
        unread.append(time.thread_time() - c0)
    assert ext.scorings == scorings, "a cycle nobody read was scored"
    t0 += args.cycles  # the balance and PSI parts below run after these cycles
    verdicts = sorted({a.verdict for a in ext.assessments.values()})

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracker = GpuTracker(pool[0].gpus[1], RightsizingSettings(), None)
    for k in range(WINDOW):
        tracker.add(t0 + k, pool[k % DISTINCT].gpus[1], 0.3)
    per_window = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()

    ms = sorted(x * 1000 for x in cpu)
    gpus = len(pool[0].gpus)
    print(f"GPUs: {gpus}; window {WINDOW} s at 1 s: {min(samples)}-{max(samples)} samples per window")
    print(f"filling the windows: {fill:.2f} s for {WINDOW * len(pool[0].gpus)} samples")
    print(f"verdicts in the fleet: {', '.join(verdicts)}")
    # Cost per inference rides on the same cycle: its own share, timed apart (rates, pricing, rows, API).
    units = [(k, "", ext.evidence[k], a) for k, a in ext.assessments.items()]
    c0 = time.thread_time()
    for _ in range(args.cycles):
        for counters in ext.servers.values():
            counters.rates()
        costs = workload_costs(units, ext.catalog, ext.settings)
        cost_rows(costs)
        [cost_json(c) for c in costs]
    share = (time.thread_time() - c0) / args.cycles * 1000
    # System balance: each GPU's link seen this cycle, its best over the window, and the findings.
    c0 = time.thread_time()
    for k in range(args.cycles):
        r = pool[k % DISTINCT]
        for g in r.gpus:
            tracker, f = ext.trackers[g.identity.key], g.fields
            tracker.link.add(t0 + WINDOW + args.cycles + k, f.get("pcie_link_gen"), f.get("pcie_link_width"),
                             f.get("pcie_link_gen_max"), f.get("pcie_link_width_max"))  # fmt: skip
            tracker.link.best()
        for ev in ext.evidence.values():
            findings(ev)
    balance = (time.thread_time() - c0) / args.cycles * 1000
    # Host pressure (PSI): the stall each sample carries and the node's pressure rows, per cycle; the
    # kernel's files are read by the host CPU poller (timed apart, on this machine's /proc).
    c0 = time.thread_time()
    for k in range(args.cycles):
        t = t0 + WINDOW + k
        pressure = ext._host_pressure(t)
        stalls = [v for (_, kind), v in pressure.items() if kind == "full"]
        max(stalls) if stalls else None
        ext.row_maker.rows((), {}, {}, None, pressure)
    psi_cycle = (time.thread_time() - c0) / args.cycles * 1000
    # Latency SLOs: feeding each queue's histograms to its windows (every cycle), and the workloads'
    # evidence, scaling state, rows and SLO verdicts (cycles that are read).
    queues = [(q.name, q.labels, q.server, q.latency) for q in ext._sim_queues(t0) if q.latency]
    c0 = time.thread_time()
    for k in range(args.cycles):
        t = t0 + WINDOW + 2 * args.cycles + k
        ext.slo.begin_cycle()
        for q in ext._sim_queues(t):
            ext.slo.add(t, q.name, q.labels, q.server, q.latency)
    slo_fed = (time.thread_time() - c0) / args.cycles * 1000
    with_slo = [(k, ev) for k, ev in ext.evidence.items() if any(q.slo and q.slo.targets for q in ev.queues)]
    c0 = time.thread_time()
    for _ in range(args.cycles):
        found, scaling = ext.slo.evidence(), ext.slo.scaling()
        slo_rows(found, scaling, ext.slo.counted)
        for key, ev in with_slo:
            judge(ev, ext.settings, ext.catalog, ext.assessments[key])
    slo_scored = (time.thread_time() - c0) / args.cycles * 1000
    psi = PsiReader("/proc")
    c0 = time.thread_time()
    for k in range(args.cycles):
        psi.poll(float(k))
    psi_read = (time.thread_time() - c0) / args.cycles * 1000
    flagged = sum(1 for ev in ext.evidence.values() for f in findings(ev) if f.name == "numa_mismatch")
    print(
        f"CPU per scoring cycle, read ({args.cycles} cycles): mean {statistics.fmean(ms):.2f} ms, "
        f"min {ms[0]:.2f} ms, p50 {ms[len(ms) // 2]:.2f} ms, p99 {ms[int(len(ms) * 0.99) - 1]:.2f} ms, "
        f"max {ms[-1]:.2f} ms (wall mean {statistics.fmean(wall) * 1000:.2f} ms)"
    )
    print(f"CPU per cycle nobody reads (fed, not scored): mean {statistics.fmean(unread) * 1000:.3f} ms")
    print(f"of which cost per inference: {share:.3f} ms CPU per cycle for {len(costs)} inference servers")
    print(f"of which system balance (PCIe link, NUMA): {balance:.3f} ms CPU per cycle for {gpus} GPUs "
          f"({flagged} flagged numa_mismatch)")  # fmt: skip
    print(f"of which host pressure (PSI stall and rows): {psi_cycle:.3f} ms CPU per cycle")
    workloads = len(ext.slo.workloads())
    print(f"of which latency SLOs: {slo_fed:.3f} ms CPU per cycle fed ({len(queues)} queues' histograms into "
          f"their windows), {slo_scored:.3f} ms per cycle read ({workloads} workloads' evidence, scaling "
          f"state and rows; SLO verdicts of {len(with_slo)} GPUs)")  # fmt: skip
    print(
        f"PSI read by the host CPU poller (not in the cycle): {psi_read:.3f} ms CPU per poll "
        f"({'available' if psi.available else 'not available'} on this kernel)"
    )
    # CPU time per cycle grows when other processes share the cores: say how busy the machine was.
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end of the run")
    print(f"memory per GPU window (full, {WINDOW} samples): {per_window / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
