"""GPUs held by pods, with verdicts, for the patch planner's tests (no Prometheus needed): what
``rightsizer report`` and the exporter hand to ``rightsizing.patches.build``."""

from __future__ import annotations

import dataclasses

from rightsizing.catalog import load_catalog
from rightsizing.evidence import Evidence, QueueEvidence
from rightsizing.patches.build import PatchSet, build_patches
from rightsizing.patches.manifests import Manifests
from rightsizing.patches.owners import OwnerSeries
from rightsizing.patches.plan import Context, Held
from rightsizing.patches.settings import PatchSettings
from rightsizing.verdicts import Assessment, price_source

CATALOG = load_catalog()
AT = 1767225600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0


def evidence(history: float = HOUR - 15, queues: tuple[str, ...] = ()) -> Evidence:
    return Evidence(
        samples=int(history / 15), history_seconds=history, window_seconds=HOUR, model="", mig_profile=None,
        memory_total_bytes=80 * 2**30, memory_peak_bytes=18.5 * 2**30, memory_p95_bytes=None,
        activity_source="sm_active", activity_p50=0.05, activity_p95=0.07, activity_p99=0.08,
        activity_recent_max=0.07, queues=tuple(QueueEvidence(q, 0.0, 3.0, 0.0) for q in queues),
    )  # fmt: skip


def verdict(
    current: str, recommended: str, verdict: str = "", change: str = "", reason: str = ""
) -> Assessment:
    """An assessment as the engine makes it: savings from the catalog's prices."""
    now, then = CATALOG.candidate(current), CATALOG.candidate(recommended)
    assert now is not None
    if recommended == "release":
        saving, verdict = now.hourly_price_dollars, verdict or "idle"
    elif then is None:
        saving = None
    else:
        saving = now.hourly_price_dollars - then.hourly_price_dollars
    verdict = verdict or ("overprovisioned" if saving and saving > 0 else "underprovisioned")
    return Assessment(
        verdict, reason or f"{verdict}: the work fits {recommended}", (), recommended, current, saving, 0.5,
        price_source=price_source(then) if then else "", workload_change=change,
    )  # fmt: skip


def held(
    pod: str, current: str, recommended: str, namespace: str = "llm", container: str = "server", **kw: object
) -> Held:
    ev = kw.pop("evidence", None) or evidence()
    return Held(namespace, pod, container, f"GPU-{pod}-{container}", verdict(current, recommended, **kw), ev)  # type: ignore[arg-type]


def context(
    owners: OwnerSeries | None = None, manifests: Manifests | None = None, **settings: object
) -> Context:
    s = dataclasses.replace(PatchSettings(), **settings)  # type: ignore[arg-type]
    read = "kube-state-metrics" if owners is not None else "pod names"
    return Context(AT, HOUR, CATALOG, s, "rightsizer report", owners, read, manifests)


def patch_set(units: list[Held], **kw: object) -> PatchSet:
    return build_patches(units, context(**kw))  # type: ignore[arg-type]
