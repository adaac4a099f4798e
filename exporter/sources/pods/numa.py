"""Where a GPU and the container that holds it sit on the host's NUMA nodes.

- The GPU's node: NVML's ``nvmlDeviceGetNumaNodeId`` (the ``numa_node`` field, read once per GPU
  with the static values) where the driver answers it, else the kernel's
  ``<sysfs>/bus/pci/devices/<bus id>/numa_node`` (the bus id lowercased, ``0000:xx:yy.z``). -1 in
  either place, or no such file (a kernel built without NUMA), means the platform has no NUMA
  information: nothing to judge.
- The node's CPUs: ``<sysfs>/devices/system/node/node<N>/cpulist``.
- The CPUs the container may run on: its cgroup's effective cpuset, ``<cgroup root>/<path>/
  cpuset.cpus.effective`` on cgroup v2, ``<cgroup root>/cpuset/<path>/cpuset.effective_cpus`` on v1,
  the path being the one ``/proc/<pid>/cgroup`` names for a process of the container.

A file that is missing or unreadable leaves that part unknown (None), never empty. Blocking reads:
call them off the event loop.
"""

from __future__ import annotations

from pathlib import Path

from rightsizer_core.files import open_regular
from rightsizing.numa import parse_cpulist

_MAX_BYTES = 64 * 1024  # a cpulist of 4096 CPUs written one by one is under 20 KiB


def _read_text(path: Path) -> str | None:
    try:
        with open_regular(path) as f:
            return f.read(_MAX_BYTES).decode("ascii", errors="replace")
    except OSError:
        return None


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:17:00.0`` as sysfs names the device: ``0000:17:00.0``, lowercase."""
    text = nvml_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}" if sep else text
    except ValueError:
        return text


def sysfs_gpu_node(sysfs_root: str, nvml_bus_id: str) -> int | None:
    """The kernel's NUMA node of the PCI device (-1: none), or None when the file says nothing."""
    text = _read_text(Path(sysfs_root) / "bus" / "pci" / "devices" / sysfs_bus_id(nvml_bus_id) / "numa_node")
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def node_cpus(sysfs_root: str, node: int) -> frozenset[int] | None:
    text = _read_text(Path(sysfs_root) / "devices" / "system" / "node" / f"node{node}" / "cpulist")
    return None if text is None else parse_cpulist(text)


def cgroup_cpus(cgroup_root: str, path: str, unified: bool) -> frozenset[int] | None:
    """The container's effective cpuset from its cgroup ``path`` (as /proc/<pid>/cgroup names it).
    A path seen from another cgroup namespace (``/..``) cannot be resolved: None."""
    rel = path.strip().lstrip("/")
    if not rel or rel.startswith(".."):
        return None
    root = Path(cgroup_root)
    if unified:
        file = root / rel / "cpuset.cpus.effective"
    else:
        file = root / "cpuset" / rel / "cpuset.effective_cpus"
    text = _read_text(file)
    cpus = None if text is None else parse_cpulist(text)
    return cpus or None  # an empty effective cpuset is not a container's: unknown
