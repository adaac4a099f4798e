"""The ``/api/v1/pods`` view of one attribution refresh (built at refresh time, never per scrape)."""

from __future__ import annotations

import time
from typing import Any

from rightsizer_core.snapshot import PodRef

from .attribution import Holders, ProcessVerdict
from .client import KubeletAnswer


def _ref_json(ref: PodRef) -> dict[str, str]:
    return {"pod": ref.pod, "namespace": ref.namespace, "container": ref.container}


def api_view(
    socket: str,
    error: str | None,
    phase: str,
    answer_age_seconds: float | None = None,
    answer: KubeletAnswer | None = None,
    holders: Holders | None = None,
    verdicts: tuple[ProcessVerdict, ...] = (),
    process_problem: str | None = None,
) -> dict[str, Any]:
    """``phase``: "on" (fresh answer), "keeping" (kubelet failing, last answer in use), "off"."""
    view: dict[str, Any] = {
        "enabled": True,
        "ok": error is None,
        "error": error,
        "phase": phase,
        "socket": socket,
        "refreshed_at": time.time(),
    }
    if answer is None or holders is None:
        return view
    by_device = {
        **holders.by_id,
        **{f"MIG-{parent}/{gi}": refs for (parent, gi), refs in holders.by_mig_instance.items()},
    }
    view.update(
        answer_age_seconds=None if answer_age_seconds is None else round(answer_age_seconds, 3),
        pods=answer.pods,
        skipped=list(answer.skipped),
        devices={
            device: {"containers": [_ref_json(r) for r in refs], "labelled": len(refs) == 1}
            for device, refs in sorted(by_device.items())
        },
        processes=[
            {
                "gpu_uuid": v.device_uuid,
                "pid": v.pid,
                "pod_uid": v.pod_uid,
                "owner": None if v.pod is None else _ref_json(v.pod),
                "reason": v.reason,
            }
            for v in verdicts
        ],
        process_problem=process_problem,
    )
    return view
