"""What one read of a node's dcgm-exporter page costs the exporter (``exporter/sources/dcgm``).

The page is shaped as dcgm-exporter writes it for an 8-GPU node with pod mapping on: every field
of its default counters file (etc/default-counters.csv: clocks, temperatures, power, PCIe, GPU and
memory-copy utilization, framebuffer, XID, remapped rows, NVLink, the DCP profiling fields), one
line per GPU with its labels (gpu, UUID, pci_bus_id, device, modelName, Hostname, driver version,
pod, namespace, container), and the SM lines turned on. It is fed to the reader in 64 KiB chunks,
as the HTTP client hands an answer over, and read to the per-GPU ratios; in-process CPU time
(thread time) per read, the median of 7 runs.

Usage: .venv/bin/python bench/dcgm_page.py [--gpus 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# bench/exporter.py would shadow the exporter package: import it from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if not hasattr(sys.modules.get("exporter"), "__path__"):
    sys.modules.pop("exporter", None)

from exporter.sources.dcgm.page import PageScan

# Field names of dcgm-exporter's etc/default-counters.csv (d5e5f51) that are not commented out,
# plus SM active and occupancy turned on.
DEV = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
)  # fmt: skip
PROF = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)  # fmt: skip


def page(gpus: int) -> bytes:
    lines = []
    for name in (*DEV, *PROF):
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} gauge"]
        for i in range(gpus):
            labels = (
                f'gpu="{i}",UUID="GPU-{i:08x}-6156-355b-e589-ff2064894f16",pci_bus_id="00000000:{i:02X}:00.0",'
                f'device="nvidia{i}",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-17",'
                f'DCGM_FI_DRIVER_VERSION="550.54.15",container="vllm",namespace="llm",'
                f'pod="chat-7f9c8d6b5-{i:05d}"'
            )
            value = f"{0.1 + i / 100:f}" if name.startswith("DCGM_FI_PROF") and "PCIE" not in name else "1234"
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def read_once(body: bytes) -> int:
    scan = PageScan(False, 4096, 4096)
    for at in range(0, len(body), 65536):
        scan.feed(body[at : at + 65536])
    return len(scan.finish().values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    body = page(args.gpus)
    assert read_once(body) == args.gpus
    runs = []
    for _ in range(7):
        n = 200
        started = time.thread_time()
        for _ in range(n):
            read_once(body)
        runs.append((time.thread_time() - started) / n)
    per_read = statistics.median(runs)
    print(f"dcgm-exporter page: {args.gpus} GPUs, {len(DEV) + len(PROF)} fields, {len(body):,} bytes")
    print(f"one read: {per_read * 1e6:.0f} us of CPU (median of 7 x 200 reads)")
    print(f"at the default interval (5 s): {per_read / 5 * 100:.3f} % of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
