"""What a verdict says about one GPU (or a multi-GPU workload's share): the state, the move and
the reason in words (``verdicts.assess`` decides it)."""

from __future__ import annotations

from dataclasses import dataclass

VERDICTS = ("idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data")


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: str
    reason: str
    bottlenecks: tuple[str, ...]
    recommended: str  # a catalog option key, or "release" (idle) or "none" (nothing fits / no data)
    current: str | None  # the catalog option the GPU is today
    hourly_savings_dollars: float | None  # current price - recommended price; negative for upgrades
    fit_score: float | None  # 0-1: 1 when the GPU is the cheapest option that carries its work
    projected_activity: float | None = None  # activity on the recommended option
    memory_need_bytes: float | None = None  # what the recommended option must hold
    summary: str = ""  # the reason in a few stable words (a label value: no numbers in it)
    price_source: str = ""  # of the recommended option's price: list, estimate or configured
    workload_change: str = ""  # multi-GPU work: "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB"
    # The resource that decided, named in the reason: memory, compute, memory bandwidth, host link,
    # bursts, whole GPUs, NVLink; activity (idle), history (not enough data), catalog (unknown GPU).
    deciding: str = ""
    cause: str = ""  # underprovisioned: the unmet demand alone, without the move it asks for
