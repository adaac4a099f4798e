"""Physics of a simulated GPU: from a workload's activity to every field NVML would report.

Coherence kept here: used + free + reserved = total; power between the idle draw and the
enforced limit (the sw_power_cap clock event and lower clocks when the demand would exceed it);
clocks between the idle clock and the catalog's maximum; temperature following power; GPM ratios
only on GPUs whose catalog entry says ``gpm_supported``. Values are in the snapshot's SI units.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from rightsizing.catalog import PCIE_LANE_BYTES_PER_SECOND, GpuSpec

from .workloads import Activity, Noise

MIB = 1024 * 1024
MHZ = 1e6
IDLE_SM_CLOCK_MHZ = 210.0
IDLE_GDDR_CLOCK_MHZ = 405.0
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_SW_POWER_CAP = 0x4
GPM_FIELDS = (
    "gr_engine_active_ratio",
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
)


@dataclass(frozen=True, slots=True)
class Board:
    """Per-GPU constants derived once from the catalog entry."""

    spec: GpuSpec
    total: int
    reserved: int
    idle_watts: float
    limit_watts: float
    hbm: bool
    link_bytes_per_second: float
    nvlink_bytes_per_second: float | None
    unsupported: frozenset[str]
    static: tuple[tuple[str, float], ...]

    def with_link(self, generation: int, width: int) -> Board:
        """The board with its PCIe link trained at ``generation`` x ``width`` (max values kept)."""
        current = {"pcie_link_gen": float(generation), "pcie_link_width": float(width)}
        static = tuple((k, current.get(k, v)) for k, v in self.static)
        share = PCIE_LANE_BYTES_PER_SECOND.get(generation, 0.0) * width / max(
            PCIE_LANE_BYTES_PER_SECOND.get(self.spec.pcie_generation, 0.0) * self.spec.pcie_width, 1.0
        )
        link = self.link_bytes_per_second * share
        return dataclasses.replace(self, static=static, link_bytes_per_second=link)

    @classmethod
    def of(cls, spec: GpuSpec) -> Board:
        total = spec.usable_memory  # NVML's memory.total: ECC and the driver's reserve already off
        reserved = round(total * 0.006 / MIB) * MIB  # what the driver keeps (NVML memory v2 "reserved")
        hbm = spec.memory_clock_max_mhz < 4500  # GDDR boards report 5000+ MHz memory clocks
        m = re.search(r"NVLink[^,]*,\s*([0-9.]+)\s*(GB|TB)/s", spec.interconnect)
        nvlink = float(m.group(1)) * (1e12 if m.group(2) == "TB" else 1e9) if m else None
        unsupported: set[str] = set()
        if not spec.gpm_supported:
            unsupported.update(GPM_FIELDS)
        if not hbm:  # GDDR boards answer NOT_SUPPORTED for the memory temperature
            unsupported.add("memory_temperature_celsius")
        if nvlink is None:
            unsupported.add("nvlink_bandwidth_count")
        static = (
            ("memory_total_bytes", float(total)),
            ("power_limit_watts", float(spec.tdp_watts)),
            ("sm_clock_max_hz", spec.sm_clock_max_mhz * MHZ),
            ("memory_clock_max_hz", spec.memory_clock_max_mhz * MHZ),
            ("pcie_link_gen", float(spec.pcie_generation)),
            ("pcie_link_gen_max", float(spec.pcie_generation)),
            ("pcie_link_width", float(spec.pcie_width)),
            ("pcie_link_width_max", float(spec.pcie_width)),
            ("encoder_utilization_ratio", 0.0),
            ("decoder_utilization_ratio", 0.0),
            ("xid_last", 0.0),
            ("ecc_uncorrected_count", 0.0),
        )
        return cls(
            spec, total, reserved, 0.08 * spec.tdp_watts + 8.0, float(spec.tdp_watts), hbm,
            spec.pcie_bytes_per_second, nvlink, frozenset(unsupported), static,
        )  # fmt: skip


def demanded_watts(board: Board, a: Activity) -> float:
    """Power the activity would draw without a limit."""
    load = 0.55 * a.sm + 0.2 * a.tensor + 0.25 * a.dram + 0.1 * a.utilization
    resident = 0.02 * board.limit_watts if a.running else 0.0
    return board.idle_watts + resident + (board.limit_watts - board.idle_watts) * min(1.0, load)


def power_watts(board: Board, a: Activity) -> float:
    """Drawn power: the demand, held just under the enforced limit."""
    return min(demanded_watts(board, a), 0.99 * board.limit_watts)


def nvlink_bytes_per_second(board: Board, a: Activity) -> float:
    return (board.nvlink_bytes_per_second or 0.0) * a.nvlink


def fields_of(
    board: Board,
    a: Activity,
    noise: Noise,
    t: float,
    energy_joules: float,
    nvlink_mib: float,
    uptime_seconds: float,
) -> tuple[dict[str, float], int]:
    """Every field of one reading, and the clock-event reason bitmask."""
    spec, sec = board.spec, math.floor(t)
    demand = demanded_watts(board, a)
    cap = 0.99 * board.limit_watts
    power = min(demand, cap) * (1.0 + 0.01 * noise.signed("power", sec))
    power = min(power, cap)
    busy = a.utilization >= 0.01
    reasons = 0 if busy else CLOCK_EVENT_GPU_IDLE
    if busy:
        sm_clock = spec.sm_clock_max_mhz * (0.985 + 0.015 * noise.unit("power", sec + 1))
        if demand > cap:  # the power limit holds the clocks down
            reasons |= CLOCK_EVENT_SW_POWER_CAP
            sm_clock *= max(0.7, (cap / demand) ** 0.5)
    else:
        sm_clock = IDLE_SM_CLOCK_MHZ
    mem_clock = spec.memory_clock_max_mhz if (busy or a.running or board.hbm) else IDLE_GDDR_CLOCK_MHZ
    temperature = 27.0 + 55.0 * (power / board.limit_watts) + 0.6 * noise.signed("temp", sec)
    used = float(min(round(a.memory_bytes / MIB) * MIB, board.total - board.reserved))
    link = board.link_bytes_per_second
    fields = dict(board.static)
    fields.update(
        sm_clock_hz=round(sm_clock) * MHZ,
        memory_clock_hz=round(mem_clock) * MHZ,
        gpu_temperature_celsius=float(round(temperature)),
        power_usage_watts=round(power, 3),
        energy_joules=round(energy_joules, 3),
        pcie_replay_count=float(math.floor(uptime_seconds / 86400.0 * (noise.fixed("pcie", -1) < 0.3))),
        gpu_utilization_ratio=round(a.utilization, 2),
        memory_copy_utilization_ratio=round(0.85 * a.dram, 2),
        memory_used_bytes=used,
        memory_reserved_bytes=float(board.reserved),
        memory_free_bytes=float(board.total - board.reserved - used),
        ecc_corrected_count=float(math.floor(uptime_seconds / 86400.0 * 2 * noise.fixed("memory", -1))),
        compute_processes=1.0 if a.running else 0.0,
        compute_processes_memory_bytes=used if a.running else 0.0,
        pcie_tx_bytes_per_second=round(min(a.pcie_tx, 1.0) * link),
        pcie_rx_bytes_per_second=round(min(a.pcie_rx, 1.0) * link),
    )
    if board.hbm:
        fields["memory_temperature_celsius"] = float(round(temperature + 4.0))
    if board.nvlink_bytes_per_second is not None:
        fields["nvlink_bandwidth_count"] = float(math.floor(nvlink_mib))
    if spec.gpm_supported:
        fields.update(
            gr_engine_active_ratio=round(a.gr_engine, 4),
            sm_active_ratio=round(a.sm, 4),
            sm_occupancy_ratio=round(a.occupancy, 4),
            tensor_active_ratio=round(a.tensor, 4),
            dram_active_ratio=round(a.dram, 4),
        )
    return fields, reasons
