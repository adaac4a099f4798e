"""Pod attribution figures (issue 3): a node of 8 GPUs x 7 MIG instances with 56 pods.

Scrape latency (wrk, keep-alive, 1 and 20 scrapers) and exporter CPU with attribution on and off,
same fleet; then what one attribution refresh costs (kubelet List over gRPC + 56 /proc/<pid>/cgroup
reads + the device-manager checkpoint) and what applying it costs per sampling cycle.

The fleet is a synthetic GPU source (8 H100 in MIG mode, 7 x 1g.10gb each, one process per
instance) served by the real exporter code (``exporter.cli.serve``: sampler, renderer, aiohttp
app, ``make_extensions``) in a subprocess; the kubelet is the tests' fake kubelet (real v1 gRPC
on a unix socket) in its own process; /proc and the checkpoint are generated files.

    .venv/bin/python bench/pods.py [--seconds 30] [--wrk-seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

# bench/exporter.py would shadow the exporter package: the repository root first, this directory last.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

from common import PROMETHEUS_HEADERS, measure_cpu, wrk  # noqa: E402
from fakes import fields  # noqa: E402
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer  # noqa: E402
from servers import ROOT, free_port, http_get, wait_for  # noqa: E402

from exporter.sources.pods.attribution import RunningProcess  # noqa: E402
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample  # noqa: E402

GPUS, INSTANCES, GIB = 8, 7, 2**30


def uid(n: int) -> str:
    h = hashlib.sha256(f"pod{n}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def gpu_uuid(g: int) -> str:
    return f"GPU-{g:08x}-5a1e-4c0d-9e7f-{g:012x}"


def mig_uuid(g: int, i: int) -> str:
    return f"MIG-{g:04x}{i:04x}-7b2f-5e8a-9c4d-{g * 16 + i:012x}"


class MigFleet:
    """8 H100s in MIG mode, 7 x 1g.10gb each; one compute process per instance (PID 5000 + n)."""

    name = "nvml"

    def __init__(self) -> None:
        self.samples: list[GpuSample] = []
        self.processes: dict[str, list[RunningProcess]] = {}
        for g in range(GPUS):
            parent = GpuIdentity(g, gpu_uuid(g), f"00000000:{0x18 + g:02X}:00.0", "NVIDIA H100 80GB HBM3", g,
                                 "550.54.15", 80 * GIB)  # fmt: skip
            self.samples.append(GpuSample(parent, True, fields(), clock_event_reasons=0))
            for i in range(INSTANCES):
                n = g * INSTANCES + i
                ident = GpuIdentity(g, mig_uuid(g, i), parent.pci_bus_id, parent.model, g, "550.54.15",
                                    10 * GIB, "1g.10gb", 7 + i, parent.uuid)  # fmt: skip
                mig_fields = {
                    k: v for k, v in fields(memory_total_bytes=10 * GIB).items() if "utilization" not in k
                }
                self.samples.append(GpuSample(ident, True, mig_fields))
                self.processes[ident.uuid] = [RunningProcess(5000 + n, (1 + n % 9) * GIB // 2)]

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def collect(self) -> GpuReading:
        return GpuReading(time.time(), tuple(self.samples), CollectorStatus(self.name, True, 0.001))

    def running_processes(self) -> dict[str, list[RunningProcess]]:
        return self.processes


def build_node(d: Path) -> None:
    """The kubelet's answer, its device-manager checkpoint and a /proc tree for 56 pods."""
    pods, entries = [], []
    for g in range(GPUS):
        for i in range(INSTANCES):
            n = g * INSTANCES + i
            dev = {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [mig_uuid(g, i)]}
            pods.append(
                {
                    "name": f"infer-{n}",
                    "namespace": "serving",
                    "containers": [{"name": "server", "devices": [dev]}],
                }
            )
            entries.append({"PodUID": uid(n), "ContainerName": "server", "ResourceName": dev["resource_name"],
                            "DeviceIDs": {"0": [mig_uuid(g, i)]}, "AllocResp": "CgA="})  # fmt: skip
            proc = d / "proc" / str(5000 + n)
            proc.mkdir(parents=True)
            cid = hashlib.sha256(f"c{n}".encode()).hexdigest()
            slice_ = f"kubepods-burstable-pod{uid(n).replace('-', '_')}.slice"
            (proc / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-burstable.slice/{slice_}/cri-containerd-{cid}.scope\n"
            )
    write_answer(d / "answer.json", pods)
    (d / "checkpoint").write_text(json.dumps({"Data": {"PodDeviceEntries": entries}, "Checksum": 1}))


def settings(d: Path, on: bool, refresh: float = 10) -> dict[str, Any]:
    return {"enabled": on, "socket": str(d / "kubelet.sock"), "refresh_interval_seconds": refresh,
            "timeout_seconds": min(2.0, refresh / 2), "procfs_root": str(d / "proc"),
            "checkpoint": str(d / "checkpoint")}  # fmt: skip


def serve(d: Path, on: bool, refresh: float, port: int) -> int:
    """Subprocess entry: the real exporter serving the MIG fleet."""
    import yaml

    from exporter.cli import serve as serve_exporter
    from exporter.config import load_config
    from rightsizer_core.logs import configure

    path = d / f"exporter-{on}-{refresh}.yaml"
    path.write_text(yaml.safe_dump({"interval": 1, "listen": f"127.0.0.1:{port}", "log_level": "warning",
                                    "pods": settings(d, on, refresh)}))  # fmt: skip
    configure("warning")
    return asyncio.run(serve_exporter(load_config(str(path), {}, environ={}), MigFleet()))  # type: ignore[arg-type]


def run_exporter(d: Path, on: bool, refresh: float, seconds: int, wrk_seconds: int) -> None:
    import subprocess

    port = free_port()
    cmd = [sys.executable, __file__, "--serve", str(d), "--attribution", "on" if on else "off",
           "--refresh", str(refresh), "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: http_get(url)[0] == 200, 30, what="the exporter")
        body = http_get(url)[2].decode()
        if on:
            assert 'pod="infer-55"' in body and "rightsizer_pod_gpu_memory_used_bytes{" in body, (
                "no attribution"
            )
        series = sum(1 for ln in body.splitlines() if ln and not ln.startswith("#"))
        time.sleep(2)
        cpu, rss = measure_cpu(proc.pid, seconds, during=lambda: http_get(url, PROMETHEUS_HEADERS))
        lat = {c: wrk(url, c, wrk_seconds, PROMETHEUS_HEADERS) for c in (1, 20)}
    finally:
        proc.terminate()
        proc.wait(10)
    what = f"attribution on, refresh every {refresh:g} s" if on else "attribution off"
    print(f"{what} ({series} series): exporter CPU {cpu:.2f}% of one core, peak RSS {rss / 2**20:.1f} MiB "
          f"over {seconds}s at 1 s sampling")  # fmt: skip
    for c, x in lat.items():
        print(f"    scrape, {c:>2} keep-alive scraper(s): p50 {x.p50_ms:.2f} ms, p99 {x.p99_ms:.2f} ms, "
              f"{x.requests_per_second:.0f} scrapes/s")  # fmt: skip


async def refresh_cost(d: Path, rounds: int) -> None:
    """CPU and wall time of one refresh, and of one cycle's contribute(), in this process."""
    from exporter.sources.pods.extension import PodAttribution
    from exporter.sources.pods.settings import PodSettings

    fleet = MigFleet()
    ext = PodAttribution(PodSettings(**settings(d, True)), fleet.running_processes)
    reading = await fleet.collect()
    ext.contribute(reading, reading.gpus)
    await ext.refresh()
    assert ext.contribute(reading, reading.gpus).rows["rightsizer_pod_gpu_memory_used_bytes"], (
        "no attribution"
    )
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        await ext.refresh()
    cpu, wall = (time.process_time() - cpu) / rounds, (time.perf_counter() - wall) / rounds
    print(f"one refresh (List of 56 pods + 56 cgroup reads + checkpoint): {cpu * 1e3:.2f} ms CPU, "
          f"{wall * 1e3:.2f} ms wall (mean of {rounds}); "
          f"at the default 10 s cadence {cpu / 10 * 100:.3f}% of a core")  # fmt: skip
    n = 2000
    cpu = time.process_time()
    for _ in range(n):
        contrib = ext.contribute(reading, reading.gpus)
    cpu = (time.process_time() - cpu) / n
    rows = len(contrib.rows["rightsizer_pod_gpu_memory_used_bytes"])
    print(
        f"applying it per sampling cycle (labels on 56 instances, {rows} memory rows): {cpu * 1e6:.0f} us CPU"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=30, help="CPU measuring window per run")
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--attribution", choices=["on", "off"], help=argparse.SUPPRESS)
    ap.add_argument("--refresh", type=float, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        sys.exit(serve(args.serve, args.attribution == "on", args.refresh, args.port))

    d = short_socket_dir()
    try:
        build_node(d)
        with kubelet_process(d / "kubelet.sock", d / "answer.json"):
            print(f"node: {GPUS} GPUs x {INSTANCES} MIG instances, {GPUS * INSTANCES} pods, one process each")
            run_exporter(d, False, 10, args.seconds, args.wrk_seconds)
            run_exporter(d, True, 10, args.seconds, args.wrk_seconds)
            run_exporter(d, True, 1, args.seconds, args.wrk_seconds)
            asyncio.run(refresh_cost(d, 200))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
