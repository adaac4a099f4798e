"""Settings of the patches generated for recommendations (the ``patches`` section of the exporter's
configuration; ``rightsizer report --format patches`` reads it with ``--exporter-config``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rightsizer_core.settings import setting

DAY = 86400.0


@dataclass(frozen=True)
class PatchSettings:
    mig_strategy: Literal["mixed", "single"] = setting(
        "mixed",
        "How the cluster's NVIDIA device plugin exposes MIG: 'mixed' (each profile its own resource, "
        "nvidia.com/mig-<profile>) or 'single' (nvidia.com/gpu, the profile in the node label "
        "nvidia.com/gpu.product as <GPU>-MIG-<profile>).",
    )
    include_estimated_prices: bool = setting(
        False,
        "Patch moves whose price (today's or the recommended option's) is an estimate, not a list or "
        "configured price; without it they are listed as not patched.",
    )
    min_history_seconds: float = setting(
        1800.0,
        "A move is patched only when every GPU it rests on has at least this much history (below it a "
        "verdict can rest on one burst or one lull).",
        minimum=0,
        maximum=30 * DAY,
    )
    min_window_coverage_ratio: float = setting(
        0.9,
        "... and history covering at least this share of the window judged (a week's report needs "
        "about a week of history).",
        minimum=0.0,
        maximum=1.0,
    )
