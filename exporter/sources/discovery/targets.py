"""Which of the node's pods are inference servers to poll: pure functions over the kubelet's pod list.

A pod is a candidate when it is annotated ``rightsizer.io/scrape: "true"``, or (with
``discovery.prometheus_annotations``) ``prometheus.io/scrape: "true"``; ``rightsizer.io/scrape:
"false"`` opts it out either way. Its kind is ``rightsizer.io/kind``, else the one inference server
its containers' images name, else the page tells (``probe``). Port: ``rightsizer.io/port``, else
``prometheus.io/port``, else the pod's only declared container port. Path: ``rightsizer.io/path``,
else ``prometheus.io/path``, else ``/metrics``.

A pod is polled once it has been Ready (a server still loading its weights is not a replica yet),
and for as long as it exists and is not terminating: a pod that stops answering is down, never
dropped. Its workload is its controller (``ownerReferences``): a ReplicaSet's pods belong to the
Deployment whose name is the ReplicaSet's less its ``pod-template-hash`` suffix.

Everything here reads hostile input: a field of the wrong type is a pod skipped with a reason.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rightsizer_core.selectors import Selector

from .settings import DiscoverySettings

PREFIX = "rightsizer.io/"
SERVER_KINDS = ("vllm", "sglang", "tgi", "triton")
# A path segment of the image's repository that names the server (vllm/vllm-openai,
# lmsysorg/sglang, ghcr.io/huggingface/text-generation-inference, nvcr.io/nvidia/tritonserver).
_IMAGE_KINDS = (
    ("vllm", re.compile(r"vllm")),
    ("sglang", re.compile(r"sglang")),
    ("tgi", re.compile(r"text-generation-inference")),
    ("triton", re.compile(r"tritonserver")),
)
_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # a DNS-1123 subdomain


@dataclass(frozen=True)
class Server:
    """One pod's inference server, as the pod list describes it."""

    uid: str
    namespace: str
    pod: str
    workload: str
    workload_kind: str
    ip: str
    port: int
    path: str
    kind: str | None  # None: the page must tell
    model: str | None = None

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}{self.path}"

    @property
    def labels(self) -> dict[str, str]:
        return {"namespace": self.namespace, "workload": self.workload, "pod": self.pod}


@dataclass
class Selection:
    servers: list[Server] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (namespace/pod, why)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> dict[str, str]:
    return {k: v for k, v in _dict(value).items() if isinstance(k, str) and isinstance(v, str)}


def image_kind(images: Iterable[str]) -> str | None:
    """The one server kind the images' repositories name; None for none or several."""
    kinds: set[str] = set()
    for image in images:
        repo = image.lower().split("@", 1)[0]
        last = repo.rsplit("/", 1)[-1]
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]  # the tag off, a registry port kept
        kinds.update(kind for kind, pattern in _IMAGE_KINDS if pattern.search(repo))
    return kinds.pop() if len(kinds) == 1 else None


def owner(meta: Mapping[str, Any], labels: Mapping[str, str], pod: str) -> tuple[str, str]:
    """(kind, name) of the workload that owns the pod: its controller, a ReplicaSet's Deployment."""
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        ref = _dict(ref)
        kind, name = ref.get("kind"), ref.get("name")
        if ref.get("controller") is True and isinstance(kind, str) and isinstance(name, str) and name:
            template_hash = labels.get("pod-template-hash", "")
            if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
                return "Deployment", name[: -len(template_hash) - 1]
            return kind, name
    return "Pod", pod


def _ready(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        cond = _dict(cond)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _port(annotations: Mapping[str, str], containers: list[dict[str, Any]]) -> int | str:
    """The port, or why there is none."""
    for key in (f"{PREFIX}port", "prometheus.io/port"):
        raw = annotations.get(key)
        if raw is not None:
            if raw.strip().isdigit() and 0 < int(raw) < 65536:
                return int(raw)
            return f"{key} {raw[:40]!r} is not a port number"
    declared = set()
    for c in containers:
        listed = c.get("ports")
        for p in listed if isinstance(listed, list) else []:
            if isinstance(p, dict):
                declared.add(p.get("containerPort"))
    ports = [p for p in declared if isinstance(p, int) and 0 < p < 65536]
    if len(ports) == 1:
        return ports[0]
    return f"no port: set {PREFIX}port (the pod declares {len(ports)} container ports)"


def _opted_in(annotations: Mapping[str, str], settings: DiscoverySettings) -> bool:
    own = annotations.get(f"{PREFIX}scrape")
    if own is not None:
        return own == "true"
    return settings.prometheus_annotations and annotations.get("prometheus.io/scrape") == "true"


def server_of(
    item: Any, settings: DiscoverySettings, selector: Selector, known: Collection[str]
) -> Server | str | None:
    """The pod's server; a reason (str) when it asks to be polled but cannot be; None when it
    does not ask, is filtered out, or is not (yet, or any more) a running replica."""
    pod = _dict(item)
    meta, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not (isinstance(name, str) and isinstance(namespace, str) and isinstance(uid, str)):
        return None
    if not (name and namespace and uid):
        return None
    if not (_DNS_NAME.fullmatch(name) and _DNS_NAME.fullmatch(namespace) and len(namespace) <= 63):
        return "namespace or name is not a Kubernetes name"  # they become label values: refused
    if len(name) > 253 or len(uid) > 64:
        return "name or UID longer than Kubernetes allows"
    annotations, labels = _strings(meta.get("annotations")), _strings(meta.get("labels"))
    if not _opted_in(annotations, settings):
        return None
    if settings.namespaces and namespace not in settings.namespaces:
        return None
    if not selector.matches(labels):
        return None
    if meta.get("deletionTimestamp") is not None or status.get("phase") != "Running":
        return None  # terminating or not running: gone
    if uid not in known and not _ready(status):
        return None  # not a replica until it has been Ready once
    ip = status.get("podIP")
    if not isinstance(ip, str) or not re.fullmatch(r"[0-9A-Fa-f.:]{2,45}", ip):
        return "no pod IP"
    raw_containers = spec.get("containers")
    listed = raw_containers if isinstance(raw_containers, list) else []
    containers = [c for c in listed if isinstance(c, dict)]
    kind = annotations.get(f"{PREFIX}kind")
    if kind is not None and kind not in SERVER_KINDS:
        return f"{PREFIX}kind {kind[:40]!r} is not one of {', '.join(SERVER_KINDS)}"
    if kind is None:
        kind = image_kind(c["image"] for c in containers if isinstance(c.get("image"), str))
    port = _port(annotations, containers)
    if isinstance(port, str):
        return port
    path = annotations.get(f"{PREFIX}path") or annotations.get("prometheus.io/path") or "/metrics"
    if not _PATH.fullmatch(path) or len(path) > 256:
        return f"path {path[:40]!r} is not a URL path"
    model = annotations.get(f"{PREFIX}model")
    workload_kind, workload = owner(meta, labels, name)
    return Server(uid, namespace, name, workload, workload_kind, ip, port, path, kind, model)


def select(
    items: list[Any], settings: DiscoverySettings, selector: Selector, known: Collection[str]
) -> Selection:
    """The servers to poll, at most ``max_servers`` (those polled already, by pod UID in ``known``,
    keep their places)."""
    out = Selection()
    found: list[Server] = []
    for item in items:
        verdict = server_of(item, settings, selector, known)
        if isinstance(verdict, Server):
            found.append(verdict)
        elif isinstance(verdict, str):
            meta = _dict(_dict(item).get("metadata"))
            out.skipped.append((f"{meta.get('namespace')}/{meta.get('name')}"[:300], verdict))
    found.sort(key=lambda s: (s.uid not in known, s.namespace, s.pod))
    out.servers = found[: settings.max_servers]
    for extra in found[settings.max_servers :]:
        why = f"more than {settings.max_servers} servers on the node (discovery.max_servers)"
        out.skipped.append((extra.name, why))
    return out
