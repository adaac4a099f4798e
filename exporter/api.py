"""JSON views of a snapshot for ``/api/v1/…``."""

from __future__ import annotations

import math
from typing import Any

from rightsizer_core.snapshot import GpuSample, Snapshot


def _clean(value: float) -> float | None:
    return value if math.isfinite(value) else None


def gpu_json(g: GpuSample) -> dict[str, Any]:
    ident = g.identity
    out: dict[str, Any] = {
        "index": ident.index,
        "uuid": ident.uuid,
        "pci_bus_id": ident.pci_bus_id,
        "device": ident.device,
        "model": ident.model,
        "driver_version": ident.driver_version,
        "memory_total_bytes": ident.memory_total_bytes,
        "up": g.up,
        "error": g.error,
        "fields": {k: _clean(v) for k, v in sorted(g.fields.items())},
        "supported": sorted(g.fields),
        "unsupported": sorted(g.unsupported),
        "unsupported_reasons": dict(sorted(g.unsupported_reasons.items())),
        "clock_event_reasons": g.clock_event_reasons,
        "pod": None
        if g.pod is None
        else {"pod": g.pod.pod, "namespace": g.pod.namespace, "container": g.pod.container},
    }
    if ident.mig_profile is not None:
        out["mig"] = {
            "profile": ident.mig_profile,
            "instance_id": ident.mig_instance_id,
            "parent_uuid": ident.parent_uuid,
        }
    return out


def gpus_json(snap: Snapshot) -> dict[str, Any]:
    extras = snap.api.get("gpus")  # per-UUID additions from extensions (e.g. right-sizing scores)
    gpus = []
    for g in snap.gpus:
        item = gpu_json(g)
        if isinstance(extras, dict) and g.identity.uuid in extras:
            item.update(extras[g.identity.uuid])
        gpus.append(item)
    return {
        "timestamp": snap.timestamp,
        "hostname": snap.hostname,
        "gpus": gpus,
        "collectors": [
            {"name": c.name, "success": c.success, "duration_seconds": c.duration_seconds, "error": c.error}
            for c in snap.collectors
        ],
    }


def pods_from_labels(snap: Snapshot) -> dict[str, Any]:
    """``/api/v1/pods`` when no kubelet attribution runs (it publishes its own view when it does):
    the pods the GPU source itself names (the simulated fleet's), or, with none, that attribution
    is off, so "no pods" is never confused with "not looked"."""
    held = [g for g in snap.gpus if g.pod is not None]
    devices = {g.identity.uuid: {"containers": [gpu_json(g)["pod"]], "labelled": True} for g in held}
    if not devices:
        return {
            "enabled": False,
            "ok": None,
            "error": None,
            "phase": "off",
            "why": "pod attribution is off (pods.enabled: false, or no kubelet socket at start)",
        }
    pods = {(g.pod.namespace, g.pod.pod) for g in held if g.pod is not None}
    source = snap.collectors[0].name if snap.collectors else "gpu source"
    return {"enabled": True, "ok": True, "error": None, "phase": "on", "source": source,
            "pods": len(pods), "devices": devices}  # fmt: skip
