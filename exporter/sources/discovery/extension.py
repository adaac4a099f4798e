"""Discovery as a sampler ``Extension``: refreshed on its own cadence, handing sources to the queues.

Each refresh reads the kubelet's pod list (``kubelet``), picks the servers (``targets``), links each
to its pod's GPUs (``gpus``: pod-resources and the device-manager checkpoint), tells a server's kind
from its page when nothing else does, and hands the result to the queue extension, which starts,
keeps or stops one poller per server. ``contribute`` only publishes the last refresh's view and the
``discovery`` collector's state; scrapes never trigger any of it.

A static ``queues:`` entry whose URL has a discovered server's host and port is that server: it is
polled once, as the static entry, with the pod's GPUs. While the pod list cannot be read, the
servers found before keep being polled (a pod that stops answering is down, not gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from rightsizer_core.logs import event
from rightsizer_core.selectors import parse
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample
from rightsizing.models import BUILTIN

from ...sampler import Contribution
from ..pods.checkpoint import CheckpointError, read_checkpoint
from ..pods.client import PodResourcesClient, PodResourcesError
from ..pods.settings import PodSettings
from ..queues.manager import DiscoveredQueue, QueueExtension
from ..queues.settings import SCRAPE_KINDS, QueueSettings
from .gpus import PodGpus, pod_gpus
from .kubelet import KubeletError, KubeletPods
from .settings import DiscoverySettings
from .targets import Server, select

log = logging.getLogger("rightsizer.discovery")


def identity(url: str) -> tuple[str, int] | None:
    """host:port of an HTTP URL, the identity a static entry and a discovered server share."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return ((parts.hostname or "").lower(), port) if parts.hostname else None


class Discovery:
    name = "discovery"

    def __init__(
        self,
        settings: DiscoverySettings,
        pods: PodSettings,
        queues: QueueExtension,
        static: Sequence[QueueSettings],
    ) -> None:
        self.settings = settings
        self.pods = pods
        self.queues = queues
        self.kubelet = KubeletPods(settings)
        self.selector = parse(settings.label_selector).on_keys()
        self.static = {
            ident: cfg.name for cfg in static if cfg.kind in SCRAPE_KINDS and (ident := identity(cfg.url))
        }
        self.static_names = {cfg.name for cfg in static}
        self.polled: dict[str, Server] = {}  # pod UID -> server polled
        self._kinds: dict[str, str | None] = {}  # pod UID -> kind the page told (None: no server there)
        self._gpus: dict[str, tuple[str, ...]] = {}  # pod UID -> its devices, once known
        self._status = CollectorStatus(self.name, False, 0.0, "not refreshed yet")
        self._api: dict[str, Any] = {"enabled": True, "ok": False, "error": "not refreshed yet"}
        self._logged: str | None = "start"
        self._task: asyncio.Task[None] | None = None
        self.refreshes = 0

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._run(), name="discovery")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.kubelet.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.refresh_interval_seconds)
            try:
                await self.refresh()
            except Exception:  # a bug must not end discovery for the life of the process
                log.exception("discovery refresh failed")

    async def refresh(self) -> None:
        started = time.perf_counter()
        self.refreshes += 1
        try:
            items = await self.kubelet.items()
        except KubeletError as exc:
            self._finish(started, str(exc))  # the servers found before keep being polled
            return
        gpus, gpu_problem = await self._pod_gpus()
        selection = select(items, self.settings, self.selector, self.polled.keys())
        skipped = list(selection.skipped)
        servers: list[tuple[Server, str]] = []
        unknown = [s for s in selection.servers if s.kind is None and s.uid not in self._kinds]
        await asyncio.gather(*(self._probe(s) for s in unknown))
        for server in selection.servers:
            kind = server.kind or self._kinds.get(server.uid)
            if kind is None:
                told = server.uid in self._kinds
                why = "its page is not an inference server's" if told else "page not read yet"
                skipped.append((server.name, f"kind unknown ({why}): set rightsizer.io/kind"))
                continue
            servers.append((server, kind))
        wanted, static_gpus, same = self._sources(servers, gpus)
        for taken in [s for s, _ in servers if s.name in self.static_names and s.name not in same]:
            skipped.append((taken.name, "a static queue has this name: rename it to poll both"))
        await self.queues.set_discovered(wanted, static_gpus)
        self.polled = {s.uid: s for s, _ in servers}
        current = {s.uid for s in selection.servers}
        for cache in (self._kinds, self._gpus):
            for uid in [u for u in cache if u not in current]:
                del cache[uid]  # the pod is gone
        self._finish(started, None, servers, skipped, same, gpus, gpu_problem)

    def _sources(
        self, servers: list[tuple[Server, str]], gpus: PodGpus | None
    ) -> tuple[list[DiscoveredQueue], dict[str, tuple[str, ...]], dict[str, str]]:
        wanted: list[DiscoveredQueue] = []
        static_gpus: dict[str, tuple[str, ...]] = {}
        same: dict[str, str] = {}  # discovered name -> static queue polling the same server
        for server, kind in servers:
            held = gpus.of(server.uid, server.namespace, server.pod) if gpus is not None else ()
            if held:
                self._gpus[server.uid] = held  # a pod's devices never change while it lives
            held = held or self._gpus.get(server.uid, ())
            static = self.static.get((server.ip.lower(), server.port))
            if static is not None:
                static_gpus[static] = held
                same[server.name] = static
                continue
            if server.name in self.static_names:
                continue  # its series would be the static queue's
            model = server.model if server.model and server.model.strip().lower() in BUILTIN else None
            cfg = QueueSettings(
                name=server.name,
                kind=kind,
                url=server.url,
                labels=server.labels,
                interval=self.settings.poll_interval,
                model=model if kind in ("vllm", "sglang") else None,
            )
            wanted.append(DiscoveredQueue(cfg, held))
        return wanted, static_gpus, same

    async def _probe(self, server: Server) -> None:
        try:
            kind = await asyncio.wait_for(self.kubelet.probe(server.url), self.settings.timeout_seconds)
        except (KubeletError, TimeoutError):
            return  # unreachable: asked again next refresh
        self._kinds[server.uid] = kind

    async def _pod_gpus(self) -> tuple[PodGpus | None, str | None]:
        socket = self.pods.socket
        if not os.path.exists(socket):
            return None, f"no kubelet pod-resources socket at {socket}: queues are not linked to GPUs"
        client = PodResourcesClient(socket, self.pods.max_answer_bytes, self.pods.max_pods)
        try:
            answer = await client.list(self.pods.timeout_seconds, frozenset(self.pods.resource_names))
        except PodResourcesError as exc:
            return None, str(exc)
        finally:
            await client.close()
        checkpoint, problem = None, None
        if self.pods.checkpoint:
            try:
                checkpoint = await asyncio.wait_for(
                    asyncio.to_thread(read_checkpoint, self.pods.checkpoint), self.pods.timeout_seconds
                )
            except (CheckpointError, TimeoutError) as exc:
                problem = f"GPUs linked by pod name, not UID: {exc or 'checkpoint read timed out'}"
        return pod_gpus(answer, checkpoint), problem

    def _finish(
        self,
        started: float,
        error: str | None,
        servers: list[tuple[Server, str]] | None = None,
        skipped: list[tuple[str, str]] | None = None,
        same: dict[str, str] | None = None,
        gpus: PodGpus | None = None,
        gpu_problem: str | None = None,
    ) -> None:
        self._status = CollectorStatus(self.name, error is None, time.perf_counter() - started, error)
        api: dict[str, Any] = {"enabled": True, "ok": error is None, "error": error}
        api["kubelet"] = self.kubelet.url
        api["refreshes"] = self.refreshes
        if servers is not None:
            api["servers"] = [
                {
                    "queue": s.name,
                    "kind": kind,
                    "url": s.url,
                    "pod_uid": s.uid,
                    "workload": s.workload,
                    "workload_kind": s.workload_kind,
                    "gpus": list(self._gpus.get(s.uid, ())),
                    "polled_as": (same or {}).get(s.name, s.name),
                }
                for s, kind in servers
            ]
            api["skipped"] = [{"pod": pod, "reason": why} for pod, why in skipped or ()]
            api["gpu_links"] = "none" if gpus is None else ("pod_uid" if gpus.exact else "pod_name")
            api["gpu_problem"] = gpu_problem
        elif "servers" in self._api:
            api.update({k: v for k, v in self._api.items() if k in ("servers", "skipped", "gpu_links")})
        self._api = api
        self._log(error, len(servers) if servers is not None else None)

    def _log(self, error: str | None, found: int | None) -> None:
        if error != self._logged:
            if error is not None:
                event(log, logging.WARNING, "discovery cannot read the pod list", error=error)
            else:
                event(log, logging.INFO, "discovery on", url=self.kubelet.url, servers=found or 0)
            self._logged = error

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        return Contribution(api={"discovery": self._api}, collectors=(self._status,))
