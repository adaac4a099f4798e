"""Which pod (UID) and container (runtime id) a process belongs to, from ``/proc/<pid>/cgroup``.

The kubelet puts every container's processes in a cgroup whose path names the pod UID and the
container's runtime id. The shapes seen in practice, all handled here:

cgroup v1 (one line per hierarchy, ``N:controllers:/path``) and cgroup v2 (``0::/path``), with

- the cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (Guaranteed pods have no
  QoS level: ``/kubepods/pod<uid>/<id>``); used by containerd, CRI-O and docker alike;
- the systemd driver: ``/kubepods.slice/kubepods-besteffort.slice/
  kubepods-besteffort-pod<uid with _ for ->.slice/<runtime>-<id>.scope`` where ``<runtime>`` is
  ``cri-containerd`` (containerd), ``crio`` (CRI-O) or ``docker`` (docker through cri-dockerd);
- paths seen from inside another cgroup namespace, which start with ``/../..``;
- static (mirror) pods, whose UID is a 32-digit hash without dashes.

A process outside any pod (host daemons, the exporter itself on a bare host) has no pod UID:
``parse_cgroup`` returns None for it. The procfs root is configurable (``pods.procfs_root``) so
the exporter can read the host's ``/proc`` mounted elsewhere when it does not run with hostPID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from rightsizer_core.files import open_regular

# "pod" + a UID: 8-4-4-4-12 hex digits joined by '-' (cgroupfs) or '_' (systemd), or 32 hex digits.
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?(?=/|$)"
)
# The container's cgroup: "<64 hex>", or "<runtime>-<64 hex>.scope".
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")
_MAX_BYTES = 64 * 1024  # a cgroup file is a few hundred bytes; never read an unbounded file


@dataclass(frozen=True, slots=True)
class CgroupRef:
    pod_uid: str  # with dashes, as the Kubernetes API spells it
    container_id: str | None  # the runtime's 64-hex container id; None for the pod-level cgroup
    runtime: str | None  # "cri-containerd", "crio", "docker" (systemd driver only), else None
    # The cgroup holding the container's cpuset (``numa.cgroup_cpus``): the v1 cpuset hierarchy's
    # path when there is one (v1, hybrid), else the unified path; None when neither names the pod.
    cpuset_path: str | None = field(default=None, compare=False)
    unified: bool = field(default=False, compare=False)


def _normalise_uid(raw: str) -> str:
    return raw.replace("_", "-")


def parse_cgroup_path(path: str) -> CgroupRef | None:
    """The pod and container of one cgroup path, or None when the path is not inside a pod."""
    matches = list(_POD_UID.finditer(path))
    if not matches:
        return None
    match = matches[-1]  # the innermost "pod…" component wins (a kubelet nested in a pod)
    uid = _normalise_uid(match.group(1))
    rest = path[match.end() :].strip("/")
    container_id = runtime = None
    if rest:
        leaf = rest.split("/", 1)[0]
        found = _CONTAINER.match(leaf)
        if found:
            runtime, container_id = found.group(1), found.group(2)
    return CgroupRef(uid, container_id, runtime)


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod of a whole ``/proc/<pid>/cgroup`` file (v1, v2 or hybrid), or None.

    The unified (v2) line wins when it names a pod; on v1 every hierarchy normally names the same
    cgroup, and the first one that names a pod is used. A reference with a container id is
    preferred to one without (a pod-level cgroup, e.g. the pause container's parent).
    """
    best: CgroupRef | None = None
    unified: CgroupRef | None = None
    cpuset: str | None = None  # the v1 cpuset hierarchy's path
    for line in text.splitlines():
        hierarchy, sep1, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep1 and sep2) or not (hierarchy.strip().isascii() and hierarchy.strip().isdigit()):
            continue
        if "cpuset" in controllers.split(","):
            cpuset = path.strip()
        ref = parse_cgroup_path(path.strip())
        if ref is None:
            continue
        if hierarchy.strip() == "0" and controllers == "" and ref.container_id is not None:
            unified = ref
        elif best is None or (best.container_id is None and ref.container_id is not None):
            best = ref
    found = unified or best
    if found is None:
        return None
    if cpuset is not None and parse_cgroup_path(cpuset) is not None:
        return replace(found, cpuset_path=cpuset, unified=False)
    if unified is not None:
        return replace(found, cpuset_path=_unified_path(text), unified=True)
    return found


def _unified_path(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return None


def read_cgroup(procfs_root: str | Path, pid: int) -> CgroupRef | None:
    """The pod of process ``pid`` under ``procfs_root``; None when it is in no pod or has exited.

    Blocking file I/O: call it off the event loop.
    """
    try:
        with open_regular(Path(procfs_root) / str(int(pid)) / "cgroup") as f:
            data = f.read(_MAX_BYTES)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None  # the process exited between NVML's answer and this read
    return parse_cgroup(data.decode("utf-8", errors="replace"))
