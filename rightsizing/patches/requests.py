"""What a pod template asks of its host: CPU and memory requests, as the scheduler adds them up
(every container's requests, a request left out taken from its limit as the API server does, plus
the largest init container's where that is more; sidecars, init containers that restart, count
with the containers). Kubernetes quantities are read with their suffixes (``500m``, ``32Gi``,
``1e9``, ``64G``); anything else is not a number and says so."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_QUANTITY = re.compile(r"^([+]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?$")
_SCALE = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_SCALE |= {"E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity as a number (cores, bytes), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value >= 0 else None
    m = _QUANTITY.match(str(value).strip()) if isinstance(value, str) and len(value) < 40 else None
    if m is None:
        return None
    suffix = m[2] or ""
    scale = 10.0 ** int(suffix[1:]) if suffix[:1] in ("e", "E") else _SCALE[suffix]
    return float(m[1]) * scale


@dataclass(frozen=True)
class Requests:
    cpu_millis: float
    memory_bytes: float

    def words(self) -> str:
        return f"{self.cpu_millis / 1000:g} CPUs and {self.memory_bytes / 2**30:.1f} GiB"


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _asks(container: dict[str, Any], where: str) -> tuple[float, float] | str:
    resources = _mapping(container.get("resources"))
    requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
    out = []
    for name in ("cpu", "memory"):
        raw = requests.get(name, limits.get(name, 0))
        number = quantity(raw)
        if number is None:
            who = str(container.get("name"))[:63]
            return f"{where}: container {who}'s {name} request {str(raw)[:40]!r} is not a quantity"
        out.append(number * (1000 if name == "cpu" else 1))
    return out[0], out[1]


def pod_requests(spec: dict[str, Any], where: str) -> Requests | str:
    """The pod's CPU (millicores) and memory (bytes) requests, or why they cannot be read."""
    total, init_peak = [0.0, 0.0], [0.0, 0.0]
    for field in ("initContainers", "containers"):
        listed = spec.get(field)
        for c in (c for c in (listed if isinstance(listed, list) else []) if isinstance(c, dict)):
            asks = _asks(c, where)
            if isinstance(asks, str):
                return asks
            if field == "containers" or c.get("restartPolicy") == "Always":
                total = [total[0] + asks[0], total[1] + asks[1]]
            else:
                init_peak = [max(init_peak[0], total[0] + asks[0]), max(init_peak[1], total[1] + asks[1])]
    return Requests(max(total[0], init_peak[0]), max(total[1], init_peak[1]))
